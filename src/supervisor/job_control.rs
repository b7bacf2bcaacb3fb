//! Job control without a terminal: SIGTSTP and SIGCONT sent to lockrun are caught and passed to
//! the command, so lockrun itself never stops and the command never runs on an unrenewed lease.
//! The handlers are installed before the command starts: a SIGTSTP sent the moment the command
//! runs would otherwise stop lockrun (or, in an orphaned process group, vanish). They arrive in
//! the stream of [`Signals`](super::Signals), where the supervisor loop passes them on.

use nix::sys::signal::Signal;

use crate::exit::Error;

/// The job-control signals that are caught and passed on.
pub const PASSED_ON: [Signal; 2] = [Signal::SIGTSTP, Signal::SIGCONT];

/// Catches SIGTSTP and SIGCONT from now on, into the stream of signals.
pub fn catch() -> Result<(), Error> {
    for signal in PASSED_ON {
        super::signals::catch(signal)
            .map_err(|e| Error::os("cannot install signal handlers", &e))?;
    }
    Ok(())
}
