//! The server-side scripts, one per operation that must be atomic. Each is a `.lua` file beside
//! this module (under `lua/`), documented there; the scripts that free a place are prefixed with
//! `wake.lua`, the one way of waking the next waiters (leave with `drop_holds.lua` too), the
//! acquire script with `acquire_opening.lua` and the status read with `status_opening.lua`; the
//! scripts that may publish (those that wake, and acquire) with `may_publish.lua`;
//! redlock's scripts share all three. They are sent by hash and loaded on first use, including
//! after a server restart. [`Call`] is one invocation of a script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{FromRedisValue, Script, ScriptInvocation, ToRedisArgs};

use super::connect::{Link, Request};
use crate::backend::BackendError;

/// The waking helper that the scripts freeing a place share.
const WAKE: &str = include_str!("lua/wake.lua");

/// The check, before any write, that this user may publish where a script is about to (see
/// `lua/may_publish.lua`): prefixed to every script that may.
const MAY_PUBLISH: &str = include_str!("lua/may_publish.lua");

/// Dropping whatever one run holds on a name, shared by the scripts that do (see
/// `lua/drop_holds.lua`); redlock's retreat is one.
pub const DROP_HOLDS: &str = include_str!("lua/drop_holds.lua");

/// A script whose body may call `wake_head` (see `lua/wake.lua`).
pub fn with_wake(body: &str) -> Script {
    Script::new(&format!("{MAY_PUBLISH}{WAKE}{body}"))
}

/// The opening that every try to acquire shares (here and on a redlock master).
const ACQUIRE_OPENING: &str = include_str!("lua/acquire_opening.lua");

/// A script that tries to acquire, after the opening that reads its keys, arguments and clock
/// (see `lua/acquire_opening.lua`).
pub fn with_acquire_opening(body: &str) -> Script {
    Script::new(&format!("{MAY_PUBLISH}{ACQUIRE_OPENING}{body}"))
}

/// The opening both status reads share (here and on a redlock master).
const STATUS_OPENING: &str = include_str!("lua/status_opening.lua");

/// A script that reads a name's holders and line, after the opening that reads the clock and
/// walks the holders (see `lua/status_opening.lua`).
pub fn with_status_opening(body: &str) -> Script {
    Script::new(&format!("{STATUS_OPENING}{body}"))
}

/// Take a free slot (or a shared hold) in turn, or keep the caller in line.
pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| with_acquire_opening(include_str!("lua/acquire.lua")));
/// Extend an exclusive slot this run owns.
pub static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/renew.lua")));
/// Extend a shared hold this run owns.
pub static RENEW_SHARED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/renew_shared.lua")));
/// Drop an exclusive slot this run owns and wake whoever is next.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| with_wake(include_str!("lua/release.lua")));
/// Drop a shared hold this run owns and wake whoever is next.
pub static RELEASE_SHARED: LazyLock<Script> =
    LazyLock::new(|| with_wake(include_str!("lua/release_shared.lua")));
/// Leave the line after giving up.
pub static LEAVE: LazyLock<Script> =
    LazyLock::new(|| with_wake(&format!("{DROP_HOLDS}{}", include_str!("lua/leave.lua"))));
/// Drop every holder of a name.
pub static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| with_wake(include_str!("lua/force_release.lua")));
/// Holders and waiters, read together.
pub static STATUS: LazyLock<Script> =
    LazyLock::new(|| with_status_opening(include_str!("lua/status.lua")));
/// `--min-interval`: record a run unless the last was too recent.
pub static CLAIM_INTERVAL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claim_interval.lua")));

/// One script invocation: its keys and arguments, run on one server (or on each redlock master).
#[derive(Clone)]
pub struct Call {
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub fn new(script: &'static Script) -> Self {
        Call {
            script,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    pub fn key(mut self, key: String) -> Self {
        self.keys.push(key);
        self
    }

    pub fn keys(mut self, keys: impl IntoIterator<Item = String>) -> Self {
        self.keys.extend(keys);
        self
    }

    pub fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// Runs the invocation on `link`, giving up after `limit`.
    pub async fn run<T>(&self, link: &Link, limit: Duration) -> Result<T, BackendError>
    where
        T: FromRedisValue + Send,
    {
        link.send(limit, Request::Script(&self.invocation())).await
    }

    /// [`Call::run`] for a script that may run twice (see [`Link::send_repeatable`]).
    pub async fn run_repeatable<T>(&self, link: &Link, limit: Duration) -> Result<T, BackendError>
    where
        T: FromRedisValue + Send,
    {
        link.send_repeatable(limit, Request::Script(&self.invocation()))
            .await
    }

    fn invocation(&self) -> ScriptInvocation<'static> {
        let mut invocation = self.script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation
    }
}
