//! The networked `mysql://` backend, for MySQL 8 and MariaDB 10.6+: leases as rows whose expiry
//! is computed by the server's clock, in tables of lockrun's own in the URL's database (created on
//! first use), taken by one stored procedure per try that checks the line of waiters and raises a
//! durable per-name token counter, renewed and released by owner-checked statements. Waiters are
//! woken by the release itself (`KILL QUERY` of their sleeping statement), not by polling.
//! `GET_LOCK` is deliberately not what holds a lease: it is tied to one session, vanishes silently
//! with the connection and breaks behind a pooling proxy; lockrun uses it only to find a run's
//! session for a wake-up. Tables, procedures and wake-ups: [`schema`]; URL options: [`settings`].

mod connect;
mod doorbell;
mod inspect;
mod lease;
mod line;
mod schema;
mod server;
mod settings;
mod sql;
mod tls;

pub use settings::Settings;
