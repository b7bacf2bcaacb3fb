//! The embedded `file://` backend: kernel `flock` locks on files in a state directory, one host.
//!
//! Layout of the state directory, for a name `a/b` (the `/` is stored as `%`, which names cannot
//! contain):
//! - `a%b.lock` — slot 0's lock file; `a%b@K.lock` — slot K's with `--limit`. Locked with `flock`
//!   while held (shared by `--shared` holders); an exclusive holder's record (JSON) is written
//!   into it. Never unlinked, so every process always locks the same inode.
//! - `a%b.fence` — the flushed reservation of fencing tokens; `a%b.fence-hot` — the last token
//!   issued in this boot (see `fence`).
//! - `a%b.line/` — the line of waiters (ticket files) and the shared holders' records (see
//!   `line`; with `floor`, below which every ticket is gone); `a%b.tickets` — the counter that
//!   numbers tickets.
//! - `a%b.interval` — when the name last ran, for `--min-interval` (see `interval`).
//! - `a%b.modes` — where `--shared` holders and exclusive holders of slots past 0 mark themselves
//!   with record locks, so that the two never hold together (see `modes`).

mod backend;
mod fence;
mod inspect;
mod interval;
mod lease;
mod line;
mod modes;
mod paths;
mod probe;
mod proc_locks;
mod retry;
mod settings;
mod state_dir;
mod wakeup;

pub use backend::FileBackend;
pub use settings::Settings;
