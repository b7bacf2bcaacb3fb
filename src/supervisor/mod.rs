//! Running the command under the lease: spawning it, forwarding signals, renewing, stopping it in
//! time when the lease cannot be kept.

mod cgroup;
mod child;
mod descendants;
mod job_control;
#[cfg(test)]
mod scripted_lease;
mod signals;
mod spawn;
mod supervise;
mod sweep;
#[cfg(test)]
mod tests;
mod watchdog;

pub use child::{Child, Launch, die_with_parent};
pub use signals::{FORWARDED, Signals, ignore_for_lockrun, listen, unless_signalled};
pub use supervise::{Outcome, supervise};
pub use watchdog::{Standby, leave_last_close, note_heap_and_stack};
