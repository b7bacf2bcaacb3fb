//! The scripts a `redlock://` backend runs on each master: its own where a master's part differs
//! from the Redis backend's (taking a hold in turn with tickets and token proposals, backing out
//! of a round that won no quorum, the token write-back, a status read that names holders and
//! waiters so they can be matched across masters; `.lua` files beside this module, under `lua/`),
//! and the Redis backend's own for the rest (renew, release, leave the line, force release,
//! `--min-interval`). [`Call`] is one invocation, sent to every master.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{FromRedisValue, Script, ToRedisArgs};

use crate::backend::BackendError;
use crate::backend::redis::connect::Link;
use crate::backend::redis::scripts::with_wake;

pub use crate::backend::redis::keys::line_keys;
pub use crate::backend::redis::scripts::{
    CLAIM_INTERVAL, FORCE_RELEASE, LEAVE, RELEASE, RELEASE_SHARED, RENEW, RENEW_SHARED,
};

/// Take a hold on one master in turn (or keep one), or keep the caller in line there.
pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/acquire.lua")));
/// Drop what a round that won no quorum took, keeping the place in line.
pub static RETREAT: LazyLock<Script> = LazyLock::new(|| with_wake(include_str!("lua/retreat.lua")));
/// Write the chosen fencing token back.
pub static FENCE: LazyLock<Script> = LazyLock::new(|| with_wake(include_str!("lua/fence.lua")));
/// Holders and waiters on one master, with their ids.
pub static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/status.lua")));

/// One script invocation, to be sent to every master.
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
        let mut invocation = self.script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        link.script(limit, &invocation).await
    }
}
