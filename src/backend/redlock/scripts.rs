//! The scripts a `redlock://` backend runs on each master: its own where a master's part differs
//! from the Redis backend's (taking a hold in turn with tickets and token proposals, backing out
//! of a round that won no quorum, the token write-back, a status read that names holders and
//! waiters so they can be matched across masters; `.lua` files beside this module, under `lua/`),
//! and the Redis backend's own for the rest (renew, release, leave the line, force release,
//! `--min-interval`). [`Call`], the Redis backend's too, is one invocation, sent to every master.

use std::sync::LazyLock;

use redis::Script;

use crate::backend::redis::scripts::{
    DROP_HOLDS, with_acquire_opening, with_status_opening, with_wake,
};

pub use crate::backend::redis::keys::line_keys;
pub use crate::backend::redis::scripts::Call;

/// Take a hold on one master in turn (or keep one), or keep the caller in line there.
pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| with_acquire_opening(include_str!("lua/acquire.lua")));
/// Drop what a round that won no quorum took, keeping the place in line.
pub static RETREAT: LazyLock<Script> =
    LazyLock::new(|| with_wake(&format!("{DROP_HOLDS}{}", include_str!("lua/retreat.lua"))));
/// Write the chosen fencing token back.
pub static FENCE: LazyLock<Script> = LazyLock::new(|| with_wake(include_str!("lua/fence.lua")));
/// Holders and waiters on one master, with their ids.
pub static STATUS: LazyLock<Script> =
    LazyLock::new(|| with_status_opening(include_str!("lua/status.lua")));
