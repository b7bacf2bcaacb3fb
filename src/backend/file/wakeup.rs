//! What a waiter on the file backend sleeps on: inotify, watching only what can make it a holder
//! — the name's lock files (closed for writing when a holder lets go: see the lease for why that
//! event comes only after the lock is gone), and the ticket files that stand in its way in line
//! (which change when their waiter leaves, dies, or is poked).

use std::collections::HashSet;
use std::io;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use crate::reactor::Pollable;

/// One waiter's wake-up source.
pub struct Wakeup {
    inotify: AsyncFd<Pollable<Inotify>>,
    dir_watch: Option<WatchDescriptor>,
    slot_names: HashSet<String>,
    file_watches: Vec<WatchDescriptor>,
}

impl Wakeup {
    /// A wake-up source for the lock files `slot_names` (watched once asked to).
    pub fn new(slot_names: HashSet<String>) -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(Wakeup {
            inotify: crate::reactor::register(inotify)?,
            dir_watch: None,
            slot_names,
            file_watches: Vec::new(),
        })
    }

    /// Watches the state directory `dir` for a holder letting go of one of the lock files.
    pub fn watch_slots(&mut self, dir: &Path) -> io::Result<()> {
        if self.dir_watch.is_none() {
            let watch = self
                .inotify
                .get_ref()
                .inner()
                .add_watch(dir, AddWatchFlags::IN_CLOSE_WRITE)?;
            self.dir_watch = Some(watch);
        }
        Ok(())
    }

    /// Watches exactly `files` (ticket files) from now on; returns `false` when one is already
    /// gone (its change happened before the watch: look again at once).
    pub fn watch_files(&mut self, files: &[std::path::PathBuf]) -> io::Result<bool> {
        let inotify = self.inotify.get_ref().inner();
        for watch in self.file_watches.drain(..) {
            let _ = inotify.rm_watch(watch);
        }
        let flags = AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_DONT_FOLLOW;
        for file in files {
            match inotify.add_watch(file.as_path(), flags) {
                Ok(watch) => self.file_watches.push(watch),
                Err(Errno::ENOENT) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Returns once something watched changed (or events were lost).
    pub async fn woken(&mut self) -> io::Result<()> {
        loop {
            let mut guard = self.inotify.readable().await?;
            match guard.get_inner().inner().read_events() {
                Ok(events) => {
                    let relevant = events.iter().any(|event| {
                        event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || self.file_watches.contains(&event.wd)
                            || (Some(event.wd) == self.dir_watch
                                && event
                                    .name
                                    .as_ref()
                                    .and_then(|n| n.to_str())
                                    .is_some_and(|n| self.slot_names.contains(n)))
                    });
                    if relevant {
                        return Ok(());
                    }
                }
                Err(Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Ends the wait. The inotify instance is left open until the process exits: closing one
    /// makes the kernel wait for a grace period (measured here at 10-20 ms, with kernel work that
    /// slowed the command's start even when the close ran on another thread). At exit the lease
    /// has already been released, so the next holder does not wait for it.
    pub fn finish(self) {
        // Deregistered from the reactor, then deliberately not closed.
        std::mem::forget(self.inotify.into_inner());
    }
}
