//! What a waiter on the file backend sleeps on: inotify, watching only what can make it a holder
//! — the name's lock files (closed for writing when a holder lets go: see the lease for why that
//! event comes only after the lock is gone), and the ticket files that stand in its way in line
//! (which change when their waiter leaves, dies, or is poked).
//!
//! inotify instances are few (`fs.inotify.max_user_instances`, 128 per user by default), and a
//! waiter keeps its own until it exits. A waiter that finds none left waits without one — its
//! looks at the line come at their re-check times — and tries again for one at every look, so as
//! the line moves and earlier lockruns exit, the waiters near its head are woken again.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use crate::reactor::Pollable;

/// One waiter's wake-up source.
pub struct Wakeup {
    /// `None` while no inotify instance is to be had.
    inotify: Option<AsyncFd<Pollable<Inotify>>>,
    /// The state directory, once asked to watch it for lock files let go.
    slots_dir: Option<PathBuf>,
    dir_watch: Option<WatchDescriptor>,
    slot_names: HashSet<String>,
    file_watches: Vec<WatchDescriptor>,
}

impl Wakeup {
    /// A wake-up source for the lock files `slot_names` (watched once asked to).
    pub fn new(slot_names: HashSet<String>) -> io::Result<Self> {
        let mut wakeup = Wakeup {
            inotify: None,
            slots_dir: None,
            dir_watch: None,
            slot_names,
            file_watches: Vec::new(),
        };
        if !wakeup.try_inotify()? {
            crate::info!(
                "no inotify instance left (fs.inotify.max_user_instances): looking at the line \
                 at its re-check times until one is free"
            );
        }
        Ok(wakeup)
    }

    /// Gets an inotify instance if there is none yet; `false` when none is to be had now.
    fn try_inotify(&mut self) -> io::Result<bool> {
        if self.inotify.is_some() {
            return Ok(true);
        }
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => {
                self.inotify = Some(crate::reactor::register(inotify)?);
                Ok(true)
            }
            // The per-user instance limit (EMFILE), or the system's file table or memory.
            Err(Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether changes wake this waiter (it has an inotify instance).
    pub fn has_events(&self) -> bool {
        self.inotify.is_some()
    }

    /// Watches the state directory `dir` for a holder letting go of one of the lock files.
    pub fn watch_slots(&mut self, dir: &Path) -> io::Result<()> {
        self.slots_dir = Some(dir.to_owned());
        self.watch_dir()
    }

    fn watch_dir(&mut self) -> io::Result<()> {
        if let (Some(inotify), Some(dir), None) = (&self.inotify, &self.slots_dir, self.dir_watch) {
            let watch = inotify
                .get_ref()
                .inner()
                .add_watch(dir.as_path(), AddWatchFlags::IN_CLOSE_WRITE)?;
            self.dir_watch = Some(watch);
        }
        Ok(())
    }

    /// Watches exactly `files` (ticket files) from now on; returns `false` when one is already
    /// gone (its change happened before the watch: look again at once). Without an inotify
    /// instance, tries to get one first; still without, watches nothing.
    pub fn watch_files(&mut self, files: &[PathBuf]) -> io::Result<bool> {
        if !self.try_inotify()? {
            return Ok(true);
        }
        self.watch_dir()?;
        let Some(inotify) = &self.inotify else {
            return Ok(true);
        };
        let inotify = inotify.get_ref().inner();
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

    /// Returns once something watched changed (or events were lost); never without an inotify
    /// instance.
    pub async fn woken(&mut self) -> io::Result<()> {
        let Some(inotify) = &self.inotify else {
            return std::future::pending().await;
        };
        loop {
            let mut guard = inotify.readable().await?;
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
        if let Some(inotify) = self.inotify {
            std::mem::forget(inotify.into_inner());
        }
    }
}
