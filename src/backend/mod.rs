//! The lease abstraction and its implementations, one folder per backend.
//!
//! The supervisor and the subcommands see only [`Backend`] (with its [`Inspect`]) and [`Lease`];
//! which engine sits behind them is decided once, from the URL, by [`BackendSpec::parse`] and
//! [`BackendSpec::open`].
//! Backends with a server-side line of waiters implement [`waiting::line::Line`] and get the
//! waiting itself from [`waiting::line::wait_in_line`]; every networked backend is a
//! [`waiting::networked::Networked`].

mod answer;
mod api;
#[cfg(feature = "dynamodb")]
mod dynamodb;
mod etcd;
mod file;
mod first_contact;
mod first_use;
mod inspect;
mod mysql;
mod pem_files;
mod postgres;
mod redis;
mod redlock;
mod repeat;
mod spec;
mod sql_names;
mod url;
mod waiting;
mod zookeeper;

pub use api::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, Grant, HolderInfo, HolderStatus,
    IntervalClaim, Lease, LockStatus, MAX_LIMIT, Mode, Released, RenewError, Renewal, Revocation,
    WaiterStatus,
};
pub use inspect::Inspect;
pub use pem_files::Holds;
pub use spec::{BackendSpec, Settings, default_state_dir, has_secret, redact};
