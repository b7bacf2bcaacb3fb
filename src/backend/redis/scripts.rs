//! The server-side scripts, one per operation that must be atomic. Each is a `.lua` file beside
//! this module (under `lua/`), documented there; they are sent by hash and loaded on first use,
//! including after a server restart.

use std::sync::LazyLock;

use redis::Script;

/// Take a free slot in turn, or keep the caller in line.
pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/acquire.lua")));
/// Extend a slot this run owns.
pub static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/renew.lua")));
/// Drop a slot this run owns and wake the waiters.
pub static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/release.lua")));
/// Leave the line after giving up.
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/leave.lua")));
/// Drop every holder of a name.
pub static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/force_release.lua")));
/// Holders and waiters, read together.
pub static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/status.lua")));
