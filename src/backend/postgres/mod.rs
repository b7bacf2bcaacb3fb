//! The networked `postgres://` / `postgresql://` backend: leases as rows with a server-clock
//! expiry in a schema of lockrun's own (created, or migrated from an older version, on first use),
//! taken by one server-side function per try that keeps the line of waiters (FIFO across shared
//! and exclusive holders) and bumps a durable, clock-floored per-name token counter, renewed and
//! released by owner-checked statements. Waiters are woken one by one by `LISTEN`/`NOTIFY` on the
//! run's one connection, or, behind a transaction pooler, look at the line at a pace set by
//! their place in it. Session advisory locks are deliberately not used: they vanish silently with
//! the connection and do not survive a transaction-pooling proxy. Tables and functions:
//! [`schema`]; URL options: [`settings`].

mod crowd;
mod doorbell;
mod failure;
mod inspect;
mod lease;
mod line;
mod link;
mod looker;
mod pace;
mod pgpass;
mod schema;
mod session;
mod settings;
mod tls;

pub use settings::Settings;
