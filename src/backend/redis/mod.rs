//! The networked `redis://` / `rediss://` backend: leases as expiring hashes on one Redis server,
//! taken, renewed and released by server-side scripts that check the owner, with fencing tokens
//! from a per-name counter floored by the server's clock, and a first-come-first-served line of
//! waiters woken by pub/sub. Key layout: [`keys`].

mod connect;
mod doorbell;
mod inspect;
mod keys;
mod lease;
mod line;
mod scripts;
mod settings;

pub use settings::Settings;
