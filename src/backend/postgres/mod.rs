//! The networked `postgres://` / `postgresql://` backend: leases as rows with a server-clock
//! expiry in a schema of lockrun's own (created on first use), taken by one server-side function
//! per try that checks the line of waiters and bumps a durable per-name token counter, renewed and
//! released by owner-checked statements, with waiters woken by `LISTEN`/`NOTIFY`. Session advisory
//! locks are deliberately not used: they vanish silently with the connection and do not survive a
//! transaction-pooling proxy. Tables and functions: [`schema`]; URL options: [`settings`].

mod acquire;
mod backend;
mod connect;
mod inspect;
mod lease;
mod schema;
mod settings;
mod tls;
mod waiting;

pub use backend::PostgresBackend;
pub use settings::Settings;
