//! Turning parsed flags into a validated [`Invocation`]: names, durations, limits, modes, the
//! backend URL, the note and the lease timing are all judged here, before anything connects or
//! runs. Every problem is a one-line [`crate::exit::Error::Usage`] (exit 64).

mod invocation;
mod note;
mod values;

pub use invocation::{Invocation, RunConfig};
pub use note::MAX_NOTE_LEN;
pub use values::duration;
