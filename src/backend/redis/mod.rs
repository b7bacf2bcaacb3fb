//! The networked `redis://` / `rediss://` backend: leases as expiring hashes on one Redis server,
//! taken, renewed and released by server-side scripts that check the owner, with fencing tokens
//! from a per-name counter floored by the server's clock, and a first-come-first-served line of
//! waiters woken by pub/sub. Key layout: [`keys`].
//!
//! The `redlock://` backend runs on several such servers at once and shares the connection
//! ([`connect`]), the key layout ([`keys`]), the scripts that act on one server ([`scripts`]) and
//! the pub/sub subscription ([`doorbell`]).

pub(super) mod connect;
pub(super) mod doorbell;
pub(super) mod inspect;
pub(super) mod keys;
pub(super) mod lease;
pub(super) mod line;
pub(super) mod scripts;
mod settings;

pub use settings::Settings;
