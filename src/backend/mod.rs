//! The lease abstraction and its implementations, one file (or folder) per backend.
//!
//! The supervisor and the subcommands see only [`Backend`] and [`Lease`]; which engine sits behind
//! them is decided once, from the URL, by [`BackendSpec::open`].

mod api;
mod etcd;
mod file;
#[cfg(test)]
pub mod memory;
mod postgres;
mod queue;
mod redis;
mod spec;

pub use api::{
    AcquireRequest, Backend, BackendError, Grant, HolderInfo, HolderStatus, Lease, LockStatus,
    RenewError, Renewal,
};
pub use spec::{BackendSpec, default_state_dir, has_secret, percent_decode, redact};
