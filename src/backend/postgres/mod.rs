//! The networked `postgres://` / `postgresql://` backend: leases as rows with a server-clock
//! expiry in a schema of lockrun's own (created on first use), taken by one server-side function
//! per try that checks the line of waiters and bumps a durable per-name token counter, renewed and
//! released by owner-checked statements, with waiters woken by `LISTEN`/`NOTIFY`. Session advisory
//! locks are deliberately not used: they vanish silently with the connection and do not survive a
//! transaction-pooling proxy. Tables and functions: [`schema`]; URL options: [`settings`].

mod connect;
mod doorbell;
mod inspect;
mod lease;
mod line;
mod pgpass;
mod schema;
mod settings;
mod tls;

pub use settings::Settings;
