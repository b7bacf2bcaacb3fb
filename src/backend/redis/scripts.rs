//! The server-side scripts, one per operation that must be atomic. Each is a `.lua` file beside
//! this module (under `lua/`), documented there; the scripts that free a place are prefixed with
//! `wake.lua`, the one way of waking the next waiters. They are sent by hash and loaded on first
//! use, including after a server restart. A [`Call`] is one invocation: a script with its keys
//! and arguments.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{FromRedisValue, Script, ScriptInvocation, ToRedisArgs};

use super::connect::Link;
use crate::backend::BackendError;

/// The waking helper that the scripts freeing a place share.
const WAKE: &str = include_str!("lua/wake.lua");

/// A script whose body may call `wake_head` (see `lua/wake.lua`).
pub fn with_wake(body: &str) -> Script {
    Script::new(&format!("{WAKE}{body}"))
}

/// Take a free slot (or a shared hold) in turn, or keep the caller in line.
pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/acquire.lua")));
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
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| with_wake(include_str!("lua/leave.lua")));
/// Drop every holder of a name.
pub static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| with_wake(include_str!("lua/force_release.lua")));
/// Holders and waiters, read together.
pub static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/status.lua")));
/// `--min-interval`: record a run unless the last was too recent.
pub static CLAIM_INTERVAL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claim_interval.lua")));

/// One script invocation, kept to be sent to one server or (by Redlock) to each master.
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
        link.script(limit, &self.invocation()).await
    }

    /// [`Call::run`] for a script that may run twice (see [`Link::script_repeatable`]).
    pub async fn run_repeatable<T>(&self, link: &Link, limit: Duration) -> Result<T, BackendError>
    where
        T: FromRedisValue + Send,
    {
        link.script_repeatable(limit, &self.invocation()).await
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
