//! The server-side scripts, one per operation that must be atomic. Each is a `.lua` file beside
//! this module (under `lua/`), documented there; the scripts that free a place are prefixed with
//! `wake.lua`, the one way of waking the next waiters. They are sent by hash and loaded on first
//! use, including after a server restart.

use std::sync::LazyLock;

use redis::Script;

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
