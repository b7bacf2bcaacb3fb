//! What every backend offers: acquire (waiting until a deadline, or until cancelled), renew and
//! release, with semaphore slots, shared (reader) holders and fencing tokens; and, through
//! [`Inspect`], status, list, force release and the fleet-wide run interval.
//!
//! The contract each implementation keeps:
//! - `acquire` returns a lease only when the backend has recorded this run as a holder, with a token
//!   strictly greater than any token it issued for that name before (shared or exclusive); it waits
//!   until the request's deadline, woken by releases where the engine can do that. Whenever it
//!   gives up — deadline, cancellation, a newer `--supersede` waiter, an error — it leaves the line
//!   before returning, so no ghost holds up the next waiter.
//! - A [`Grant`] says when the winning request was *sent*, on the boot clock: the lease is counted
//!   from there, never from when the answer arrived.
//! - `renew` and `release` are owner-checked: they act only on this run's own holder record.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::inspect::Inspect;
use crate::clock::BootInstant;
use crate::name::LockName;

/// Largest `--limit`.
pub const MAX_LIMIT: u32 = 1024;

/// How a holder shares NAME.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Alone (or one of `--limit` semaphore holders).
    #[default]
    Exclusive,
    /// With any number of other shared holders, never with an exclusive one.
    Shared,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// A request to become one of NAME's holders.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    pub name: LockName,
    /// Semaphore size; 1 for a plain lock (and for every shared request).
    pub limit: u32,
    pub mode: Mode,
    /// Requested lease length; the backend may raise it.
    pub ttl: Duration,
    /// Give up at this point; `None` waits forever. A deadline in the past means: try once.
    pub deadline: Option<BootInstant>,
    /// Who is asking, stored for `status`.
    pub holder: HolderInfo,
    /// Newest-wins waiting: joining the line makes every older waiter that also passed
    /// `--supersede` give up.
    pub supersede: bool,
    /// The backend already answered this run (it granted a lease that came too late to use), so
    /// a try that gets no answer is an outage to ride out, not a backend unreachable from the
    /// start.
    pub answered: bool,
}

impl AcquireRequest {
    /// Whether this request waits at all (a deadline already past means: try once).
    pub fn waits(&self) -> bool {
        self.deadline.is_none_or(|d| d > BootInstant::now())
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| d <= BootInstant::now())
    }
}

/// Who holds (or asks for) a lease; shown by `status` and in waiting messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The holding lockrun's pid.
    pub pid: u32,
    pub host: String,
    pub user: String,
    pub note: Option<String>,
    /// RFC 3339, UTC, seconds.
    pub acquired_at: String,
    #[serde(default)]
    pub mode: Mode,
}

impl HolderInfo {
    /// This process, asking now.
    pub fn current(note: Option<String>, mode: Mode) -> Self {
        let user = crate::account::current_or(|| nix::unistd::getuid().to_string());
        HolderInfo {
            pid: std::process::id(),
            host: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            user,
            note,
            acquired_at: now_rfc3339(),
            mode,
        }
    }

    /// The same holder, with `acquired_at` set to now (backends call this when the lock is won).
    pub fn stamped(&self) -> Self {
        HolderInfo {
            acquired_at: now_rfc3339(),
            ..self.clone()
        }
    }

    /// A record that cannot be read (written by something other than lockrun).
    pub fn unknown() -> Self {
        HolderInfo {
            pid: 0,
            host: String::new(),
            user: String::new(),
            note: None,
            acquired_at: String::new(),
            mode: Mode::Exclusive,
        }
    }

    /// The record as stored by the backends (JSON).
    pub fn encode(&self) -> String {
        // A struct of strings and numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored record; [`HolderInfo::unknown`] when it is not one of lockrun's.
    pub fn decode(stored: &[u8]) -> Self {
        serde_json::from_slice(stored).unwrap_or_else(|_| HolderInfo::unknown())
    }

    /// `host pid N, note …` for messages.
    pub fn describe(&self) -> String {
        let mut text = match (self.host.is_empty(), self.pid) {
            (_, 0) => "a process that is not a lockrun".to_owned(),
            (true, pid) => format!("pid {pid}"),
            (false, pid) => format!("{} pid {pid}", self.host),
        };
        if let Some(note) = &self.note {
            text.push_str(&format!(", note {note}"));
        }
        text
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

/// How an acquisition ended, when the backend could be asked.
pub enum Acquired {
    /// This run is a holder.
    Held(Box<dyn Lease>),
    /// NAME stayed busy until the deadline.
    Busy,
    /// A newer `--supersede` waiter took this one's place; who it is.
    Superseded(HolderInfo),
    /// The caller's cancellation fired (a signal); the line was left.
    Cancelled,
}

/// What stops a wait early: a future the caller completes (on a signal, say).
pub type Cancel<'a> = Pin<&'a mut (dyn Future<Output = ()> + Send)>;

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
    /// The URL reads well but names something that cannot work, found only by looking it up
    /// (one Redlock master under two names): a usage error (exit 64), though found at open.
    #[error("{0}")]
    Misconfigured(String),
    /// The system refused lockrun something it needs here (descriptors, memory: a low
    /// `ulimit -n`): not the backend failing, which a script may retry on (exit 70, not 69).
    #[error("{endpoint}: {reason}")]
    Starved { endpoint: String, reason: String },
}

impl BackendError {
    /// What went wrong, without the endpoint: for a message that names it already.
    pub fn reason(&self) -> &str {
        match self {
            BackendError::Unreachable { reason, .. }
            | BackendError::Failed { reason, .. }
            | BackendError::Starved { reason, .. }
            | BackendError::Unsupported(reason)
            | BackendError::Misconfigured(reason) => reason,
        }
    }

    /// A local I/O error on `endpoint`: [`BackendError::Starved`] when the system ran out of
    /// descriptors or memory for lockrun, else [`BackendError::Failed`].
    pub fn io(endpoint: String, e: &std::io::Error) -> Self {
        let reason = crate::messages::io(e);
        match crate::messages::os_error_within(e) {
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM) => {
                BackendError::Starved { endpoint, reason }
            }
            _ => BackendError::Failed { endpoint, reason },
        }
    }

    /// No connection to `endpoint` was ready within `limit`: nothing accepted it, or the server
    /// accepted and never answered the first request (a frozen server), which the client's
    /// handshake does not tell apart.
    pub fn no_connection_within(endpoint: &str, limit: Duration) -> Self {
        BackendError::Unreachable {
            endpoint: endpoint.to_owned(),
            reason: format!(
                "no connection within {}: nothing accepted, or the server did not answer",
                crate::messages::duration(limit)
            ),
        }
    }

    /// `endpoint` did not answer a request within `limit`.
    pub fn no_answer_within(endpoint: &str, limit: Duration) -> Self {
        BackendError::Failed {
            endpoint: endpoint.to_owned(),
            reason: format!("no answer within {}", crate::messages::duration(limit)),
        }
    }
}

/// A held lease. Dropping it without `release` leaves the backend to expire it.
#[async_trait]
pub trait Lease: Send + Sync {
    /// What was granted.
    fn grant(&self) -> Grant;

    /// The command has started. A backend may finish here what its acquisition left for later,
    /// so that it does not stand between the lock and the command (the file backend leaves the
    /// line and retires its wake-up watches).
    fn started(&self) {}

    /// Extends the lease, only if this run still owns it.
    async fn renew(&self) -> Result<Renewal, RenewError>;

    /// Gives the lease up, only if this run still owns it, and wakes the next waiter; says
    /// whether it was still this run's to give.
    async fn release(self: Box<Self>) -> Result<Released, BackendError>;

    /// Resolves when the backend announces that this lease may have been broken (`release
    /// --force`), or when an announcement may have gone unheard (its listener just started or
    /// broke); the supervisor then renews at once to find out. A hint, never a verdict: a backend
    /// that cannot announce anything never resolves.
    async fn revoked(&self) -> Revocation {
        std::future::pending().await
    }
}

/// What [`Lease::release`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The lease was this run's, and is given back.
    Given,
    /// The lease was no longer this run's (broken with `release --force`, expired, or taken
    /// over): there was nothing to give back, and the run was not covered to its end.
    AlreadyGone,
}

/// Why [`Lease::revoked`] resolved; either way the supervisor renews at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// The backend said the lease may be gone (a forced release, or its key or row went).
    Announced,
    /// The listener for announcements started or broke: one made meanwhile would be missed.
    MayHaveMissed,
}

/// Whether a `--min-interval` run may go ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntervalClaim {
    /// Nobody ran NAME within the interval; this run's start is now recorded.
    Claimed,
    /// NAME was last acquired this long ago, by the backend's clock.
    TooSoon { ago: Duration },
}

/// One backend, opened.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Where this backend lives, for messages (no password).
    fn describe(&self) -> String;

    /// Whether a lease can expire under a live holder (every backend but kernel locks).
    fn expires(&self) -> bool {
        true
    }

    /// Becomes a holder of `request.name`, waiting until `request.deadline` or until `cancel`
    /// resolves, whichever comes first.
    async fn acquire(
        &self,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError>;

    /// What it answers about names without holding them: `status`, `list`, `release --force`,
    /// `--min-interval` and its clock.
    fn inspect(&self) -> &dyn Inspect;
}

/// `status --json`: the contract's shape, plus the line of waiters in order (`queue`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockStatus {
    pub name: String,
    pub held: bool,
    pub limit: u32,
    pub waiters: u32,
    pub holders: Vec<HolderStatus>,
    /// The waiters, first in line first, where the backend can tell.
    pub queue: Vec<WaiterStatus>,
}

impl LockStatus {
    /// NAME free, nobody waiting.
    pub fn free(name: &LockName) -> Self {
        LockStatus {
            name: name.to_string(),
            held: false,
            limit: 1,
            waiters: 0,
            holders: Vec::new(),
            queue: Vec::new(),
        }
    }

    /// A status from its holders and waiters; `held` and `waiters` follow from them. Holders are
    /// listed oldest first (by token), whatever order the backend found them in.
    pub fn new(
        name: &LockName,
        limit: u32,
        mut holders: Vec<HolderStatus>,
        queue: Vec<WaiterStatus>,
    ) -> Self {
        holders.sort_by_key(|holder| holder.token);
        LockStatus {
            name: name.to_string(),
            held: !holders.is_empty(),
            limit: limit.max(1),
            waiters: u32::try_from(queue.len()).unwrap_or(u32::MAX),
            holders,
            queue,
        }
    }
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
    pub mode: Mode,
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
            mode: info.mode,
        }
    }
}

/// One waiter in [`LockStatus::queue`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WaiterStatus {
    pub pid: u32,
    pub host: String,
    pub user: String,
    pub note: Option<String>,
    /// When it joined the line, RFC 3339.
    pub since: String,
    pub mode: Mode,
}

impl WaiterStatus {
    /// A waiter from the record it stored when it joined (its `acquired_at` is when it joined).
    pub fn new(info: HolderInfo) -> Self {
        WaiterStatus {
            pid: info.pid,
            host: info.host,
            user: info.user,
            note: info.note,
            since: info.acquired_at,
            mode: info.mode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_listed_oldest_first_whatever_the_backend_found() {
        let name = LockName::parse("n").unwrap();
        let holder = |token| {
            let info = HolderInfo::current(None, Mode::Shared);
            HolderStatus::new(info, token, 0, Duration::from_secs(1))
        };
        let status = LockStatus::new(&name, 1, vec![holder(9), holder(4), holder(7)], vec![]);
        let tokens: Vec<u64> = status.holders.iter().map(|h| h.token).collect();
        assert_eq!(tokens, [4, 7, 9]);
    }
}
