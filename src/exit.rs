//! Exit statuses and the error type that maps onto them — the one place that knows the table.
//!
//! Every failure in lockrun becomes an [`Error`] whose variant decides the exit status, so `main`
//! only prints `lockrun: {error}` and exits with [`Error::code`]. The numbers follow `sysexits.h`
//! where one fits, and the shell's conventions (126, 127, 128+N) for the command itself.

use std::fmt;

/// A usage error: bad option, name, duration, URL, or a missing command. Nothing ran.
pub const USAGE: u8 = 64;
/// The backend is unreachable or failing before the lock was taken. Nothing ran.
pub const UNAVAILABLE: u8 = 69;
/// An internal error: a bug, or the operating system refused something it should not.
pub const INTERNAL: u8 = 70;
/// The lock was not acquired: busy with `--no-wait`, or `--wait` ran out (see `--busy-exit-code`).
pub const BUSY: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const LEASE_LOST: u8 = 76;
/// `--timeout` ran out; the command was stopped (as `timeout(1)` exits).
pub const TIMED_OUT: u8 = 124;
/// The command exists but could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;
/// Added to a signal number when the command was killed by that signal.
pub const SIGNAL_BASE: u8 = 128;
/// `lockrun drill`: a check of the drill failed (the report names it).
pub const DRILL_FAILED: u8 = 1;
/// The drill's internal probe writer: the fenced store rejected the write (a stale token).
pub const PROBE_REJECTED: u8 = 3;

/// The table as users read it (the man page's EXIT STATUS): the status, and what it means.
pub const TABLE: &[(&str, &str)] = &[
    ("the command's own", "the command ran and exited"),
    (
        "128+N",
        "the command was killed by signal N (or lockrun got signal N before the command started: while connecting, waiting for the lock or checking --min-interval; the command is then not started)",
    ),
    (
        "64",
        "usage error: bad option, name, duration, URL, missing command; nothing ran",
    ),
    (
        "69",
        "backend unreachable or failing before the lock was taken; nothing ran",
    ),
    ("70", "internal error"),
    (
        "75",
        "lock not acquired: busy with --no-wait, --wait ran out, superseded, or --min-interval not yet over (see --busy-exit-code)",
    ),
    (
        "76",
        "the lease was lost while the command ran (renewal failed, lease expired or was broken); the command was stopped",
    ),
    ("124", "--timeout ran out; the command was stopped"),
    ("126", "the command is not executable"),
    ("127", "the command was not found"),
];

/// Everything that can end a lockrun invocation early, each kind with its exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input, reported before anything ran.
    #[error("{0}")]
    Usage(String),
    /// The backend could not be used before the lock was taken.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// The lock was busy; carries the status chosen by `--busy-exit-code`.
    #[error("{message}")]
    Busy { message: String, code: u8 },
    /// The lease was lost while the command ran.
    #[error("{0}")]
    LeaseLost(String),
    /// The command could not be started.
    #[error("{message}")]
    Spawn { message: String, code: u8 },
    /// A signal ended lockrun before the command started.
    #[error("interrupted by {signal} {during}")]
    Interrupted {
        signal: nix::sys::signal::Signal,
        during: String,
    },
    /// A failure that should not happen: the message names what failed.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The process exit status for this error.
    pub fn code(&self) -> u8 {
        match self {
            Error::Usage(_) => USAGE,
            Error::Backend(crate::backend::BackendError::Starved { .. }) => INTERNAL,
            Error::Backend(crate::backend::BackendError::Misconfigured(_)) => USAGE,
            Error::Backend(_) => UNAVAILABLE,
            Error::Busy { code, .. } => *code,
            Error::LeaseLost(_) => LEASE_LOST,
            Error::Spawn { code, .. } => *code,
            Error::Interrupted { signal, .. } => SIGNAL_BASE.wrapping_add(*signal as u8),
            Error::Internal(_) => INTERNAL,
        }
    }

    /// Whether the message is worth printing: a busy exit mapped to 0 is a quiet skip.
    pub fn is_quiet_skip(&self) -> bool {
        matches!(self, Error::Busy { code: 0, .. })
    }

    /// A usage error from anything printable.
    pub fn usage(message: impl fmt::Display) -> Self {
        Error::Usage(message.to_string())
    }

    /// An internal error from anything printable.
    pub fn internal(message: impl fmt::Display) -> Self {
        Error::Internal(message.to_string())
    }

    /// An internal error: the operating system refused `what` (one line, its reason in lowercase).
    pub fn os(what: &str, e: &std::io::Error) -> Self {
        Error::Internal(format!("{what}: {}", crate::messages::io(e)))
    }
}

/// How the command ended, as the status lockrun passes on.
pub fn from_wait_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => SIGNAL_BASE.wrapping_add(signal as u8),
        (None, None) => INTERNAL,
    }
}
