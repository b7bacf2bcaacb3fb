//! What every backend offers: acquire (waiting until a deadline), renew, release, status, list and
//! force release, with semaphore slots and fencing tokens.
//!
//! The contract each implementation keeps:
//! - `acquire` returns a lease only when the backend has recorded this run as a holder, with a token
//!   strictly greater than any token it issued for that name before; it waits until the request's
//!   deadline, woken by releases where the engine can do that, and cleans up after itself when it
//!   gives up, so a timed-out waiter leaves no holder behind.
//! - A [`Grant`] says when the winning request was *sent*, on the boot clock: the lease is counted
//!   from there, never from when the answer arrived.
//! - `renew` and `release` are owner-checked: they act only on this run's own holder record.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::clock::BootInstant;
use crate::name::LockName;

/// A request to become one of NAME's holders.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    pub name: LockName,
    /// Semaphore size; 1 for a plain lock.
    pub limit: u32,
    /// Requested lease length; the backend may raise it.
    pub ttl: Duration,
    /// Give up at this point; `None` waits forever. A deadline in the past means: try once.
    pub deadline: Option<BootInstant>,
    /// Who is asking, stored for `status`.
    pub holder: HolderInfo,
}

/// Who holds (or asks for) a lease; shown by `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HolderInfo {
    /// The holding lockrun's pid.
    pub pid: u32,
    pub host: String,
    pub user: String,
    pub note: Option<String>,
    /// RFC 3339, UTC, seconds.
    pub acquired_at: String,
}

impl HolderInfo {
    /// This process, asking now.
    pub fn current(note: Option<String>) -> Self {
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| nix::unistd::getuid().to_string());
        HolderInfo {
            pid: std::process::id(),
            host: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            user,
            note,
            acquired_at: now_rfc3339(),
        }
    }

    /// The same holder, with `acquired_at` set to now (backends call this when the lock is won).
    pub fn stamped(&self) -> Self {
        HolderInfo {
            acquired_at: now_rfc3339(),
            ..self.clone()
        }
    }
}

/// The wall-clock time, RFC 3339, UTC, whole seconds. For display only: no deadline uses it.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// What an acquisition granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token: strictly increasing per name on this backend.
    pub token: u64,
    /// Which semaphore slot, `0..limit`.
    pub slot: u32,
    /// The lease length the backend granted, counted from `sent_at`; `None` when the lease lasts
    /// exactly as long as the holding process (a kernel lock).
    pub ttl: Option<Duration>,
    /// When the winning request was sent.
    pub sent_at: BootInstant,
}

/// A confirmed renewal: the lease now runs for `ttl` from the moment the renewal was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub ttl: Option<Duration>,
}

/// Why a renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// The backend answered that this run no longer holds the lease. Final.
    #[error("{0}")]
    Lost(String),
    /// No confirmation this time (timeout, connection error); worth retrying until the deadline.
    #[error(transparent)]
    Unconfirmed(BackendError),
}

/// Failures talking to a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Could not connect; `endpoint` is host:port or a directory, never a password.
    #[error("cannot reach {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// Connected, but an operation failed.
    #[error("{endpoint}: {reason}")]
    Failed { endpoint: String, reason: String },
    /// The backend cannot do what was asked.
    #[error("{0}")]
    Unsupported(String),
}

/// A held lease. Dropping it without `release` leaves the backend to expire it.
#[async_trait]
pub trait Lease: Send + Sync {
    /// What was granted.
    fn grant(&self) -> Grant;

    /// Extends the lease, only if this run still owns it.
    async fn renew(&self) -> Result<Renewal, RenewError>;

    /// Gives the lease up, only if this run still owns it, and wakes the next waiter.
    async fn release(self: Box<Self>) -> Result<(), BackendError>;
}

/// One backend, opened.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Where this backend lives, for messages (no password).
    fn describe(&self) -> String;

    /// Becomes a holder of `request.name`, waiting until `request.deadline`. `Ok(None)` means the
    /// lock stayed busy until the deadline.
    async fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> Result<Option<Box<dyn Lease>>, BackendError>;

    /// Who holds `name` now.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError>;

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError>;

    /// Drops every holder of `name`; returns how many there were. Tokens are never reset.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError>;

    /// The backend server's wall clock, for the skew that `lockrun drill` reports; `None` for a
    /// backend without a clock of its own. No lease decision ever uses it.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        Ok(None)
    }
}

/// `status --json`: the contract's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockStatus {
    pub name: String,
    pub held: bool,
    pub limit: u32,
    pub waiters: u32,
    pub holders: Vec<HolderStatus>,
}

/// One holder in [`LockStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HolderStatus {
    pub token: u64,
    pub pid: u32,
    pub host: String,
    pub user: String,
    pub note: Option<String>,
    pub acquired_at: String,
    pub expires_in_ms: u64,
    pub slot: u32,
}

impl HolderStatus {
    /// Joins stored holder information with what the backend knows of the lease.
    pub fn new(info: HolderInfo, token: u64, slot: u32, expires_in: Duration) -> Self {
        HolderStatus {
            token,
            pid: info.pid,
            host: info.host,
            user: info.user,
            note: info.note,
            acquired_at: info.acquired_at,
            expires_in_ms: expires_in.as_millis().try_into().unwrap_or(u64::MAX),
            slot,
        }
    }
}
