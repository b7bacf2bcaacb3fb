//! Job control without a terminal: SIGTSTP and SIGCONT sent to lockrun are caught and passed to
//! the command, so lockrun itself never stops and the command never runs on an unrenewed lease.
//! The handlers are installed before the command starts: a SIGTSTP sent the moment the command
//! runs would otherwise stop lockrun (or, in an orphaned process group, vanish).

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::Error;

/// SIGTSTP and SIGCONT received by lockrun while the command runs without the terminal.
pub struct JobControl {
    stop: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl JobControl {
    /// Catches SIGTSTP and SIGCONT from now on. Needs a running tokio runtime.
    pub fn listen() -> Result<Self, Error> {
        let listen = |number| {
            signal(SignalKind::from_raw(number))
                .map_err(|e| Error::internal(format!("cannot install signal handlers: {e}")))
        };
        Ok(JobControl {
            stop: listen(libc::SIGTSTP)?,
            cont: listen(libc::SIGCONT)?,
        })
    }

    /// The next job-control signal lockrun received; `None` once neither can come any more.
    pub async fn next(&mut self) -> Option<Signal> {
        tokio::select! {
            Some(()) = self.stop.recv() => Some(Signal::SIGTSTP),
            Some(()) = self.cont.recv() => Some(Signal::SIGCONT),
            else => None,
        }
    }
}
