//! The embedded `file://` backend: kernel `flock` locks on files in a state directory, one host.
//!
//! Layout of the state directory, for a name `a/b` (the `/` is stored as `%`, which names cannot
//! contain):
//! - `a%b.lock` — slot 0's lock file; `a%b@K.lock` — slot K's with `--limit`. Locked with `flock`
//!   while held; the holder's metadata (JSON) is written into it. Never unlinked, so every process
//!   always locks the same inode.
//! - `a%b.fence` — the flushed reservation of fencing tokens; `a%b.fence-hot` — the last token
//!   issued in this boot (see `fence`).
//! - `a%b.wait` — each waiter holds a shared `flock` on it, so `status` can count waiters.

mod backend;
mod fence;
mod lease;
mod paths;
mod proc_locks;
mod settings;
mod state_dir;

pub use backend::FileBackend;
pub use settings::Settings;
