//! What a waiter on the file backend sleeps on: inotify, watching only what can make it a holder
//! — the name's lock files (closed for writing when a holder lets go: see the lease for why that
//! event comes only after the lock is gone), and the ticket files that stand in its way in line
//! (which change when their waiter leaves, dies, or is poked).
//!
//! inotify instances are few (`fs.inotify.max_user_instances`, 128 per user by default), and a
//! waiter keeps its own until it exits. A waiter that finds none left is woken by lock probes
//! instead (see `probe`): a thread blocked on the lock of each file it would watch, which the
//! kernel wakes when that lock goes. Probes see a waiter leave or die and a holder let go, but not
//! a poke (a newer `--supersede` waiter) nor a waiter ahead that froze: those are found at the
//! waiter's re-check times, as with inotify for a frozen one. It tries again for an instance at
//! every look.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use super::probe::{Probes, Wanted};
use crate::reactor::Pollable;

/// Up to this many lock files (`--limit`) are watched one by one; more, through their directory.
const MAX_SLOT_FILE_WATCHES: usize = 8;

/// How the lock files are watched.
enum SlotWatch {
    /// The state directory: every file in it closed for writing is reported, by name.
    Dir(WatchDescriptor),
    /// Each lock file.
    Files(Vec<WatchDescriptor>),
}

impl SlotWatch {
    /// Whether an event from `watch` about `name` is a lock file closed for writing.
    fn reports(
        &self,
        watch: WatchDescriptor,
        name: Option<&std::ffi::OsStr>,
        slot_names: &HashSet<String>,
    ) -> bool {
        match self {
            SlotWatch::Dir(dir) => {
                *dir == watch
                    && name
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| slot_names.contains(n))
            }
            SlotWatch::Files(files) => files.contains(&watch),
        }
    }
}

/// Watches each of `names` in `dir` for being closed for writing; `None` (and no watch left)
/// when one cannot be watched (missing, or the user's watches used up): the directory's one
/// watch does instead.
fn watch_each(
    inotify: &Inotify,
    dir: &Path,
    names: &HashSet<String>,
) -> Option<Vec<WatchDescriptor>> {
    let mut watches = Vec::with_capacity(names.len());
    for name in names {
        let flags = AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_DONT_FOLLOW;
        match inotify.add_watch(dir.join(name).as_path(), flags) {
            Ok(watch) => watches.push(watch),
            Err(_) => {
                for watch in watches {
                    let _ = inotify.rm_watch(watch);
                }
                return None;
            }
        }
    }
    Some(watches)
}

/// One waiter's wake-up source.
pub struct Wakeup {
    /// `None` while no inotify instance is to be had.
    inotify: Option<AsyncFd<Pollable<Inotify>>>,
    /// The state directory, once asked to watch it for lock files let go.
    slots_dir: Option<PathBuf>,
    slot_watch: Option<SlotWatch>,
    slot_names: HashSet<String>,
    file_watches: Vec<WatchDescriptor>,
    /// What a lock file must be for this waiter's try: free (exclusive) or not held exclusively.
    slot_wanted: Wanted,
    /// Without inotify: the probes, whether the lock files asked for this round have one, and
    /// whether everything watched last round had one.
    probes: Probes,
    slots_probed: bool,
    probed_all: bool,
    /// Whether to ask for an inotify instance again at each look (always, but in tests of the
    /// probes).
    asks_for_inotify: bool,
}

impl Wakeup {
    /// A wake-up source for the lock files `slot_names` (watched once asked to), for a waiter
    /// whose try needs them `slot_wanted`.
    pub fn new(slot_names: HashSet<String>, slot_wanted: Wanted) -> io::Result<Self> {
        let mut wakeup = Wakeup {
            inotify: None,
            slots_dir: None,
            slot_watch: None,
            slot_names,
            file_watches: Vec::new(),
            slot_wanted,
            probes: Probes::default(),
            slots_probed: true,
            probed_all: true,
            asks_for_inotify: true,
        };
        if !wakeup.try_inotify()? {
            crate::info!(
                "no inotify instance left (fs.inotify.max_user_instances): woken by lock probes \
                 until one is free"
            );
        }
        Ok(wakeup)
    }

    /// Gets an inotify instance if there is none yet; `false` when none is to be had now.
    fn try_inotify(&mut self) -> io::Result<bool> {
        if self.inotify.is_some() {
            return Ok(true);
        }
        if !self.asks_for_inotify {
            return Ok(false);
        }
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => {
                crate::supervisor::leave_last_close(inotify.as_fd().as_raw_fd());
                self.inotify = Some(crate::reactor::register(inotify)?);
                Ok(true)
            }
            // The per-user instance limit (EMFILE), or the system's file table or memory.
            Err(Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the changes this waiter waits for wake it: it has an inotify instance, or a
    /// probe of every file it watches (as of the last [`Wakeup::watch_files`]).
    pub fn has_events(&self) -> bool {
        self.inotify.is_some() || self.probed_all
    }

    /// Watches the state directory `dir` for a holder letting go of one of the lock files; called
    /// before a try, so that a holder letting go right after the try still wakes this waiter.
    pub fn watch_slots(&mut self, dir: &Path) -> io::Result<()> {
        self.slots_dir = Some(dir.to_owned());
        self.watch_slot_files()
    }

    /// Without an inotify instance, after a try that found every lock file taken: a probe on
    /// each (one started on a lock already let go rings at once, so nothing is missed in between;
    /// started before the try, it would hold the lock for an instant and could fail the try).
    pub fn probe_slots(&mut self) {
        let Some(dir) = self.slots_dir.as_ref().filter(|_| self.inotify.is_none()) else {
            return;
        };
        for name in &self.slot_names {
            let path = dir.join(name);
            // As the try opened it: no symlink followed, no FIFO waited on.
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&path);
            let probed = match opened {
                Ok(file) => self.probes.probe(&path, file, self.slot_wanted),
                Err(_) => false,
            };
            self.slots_probed &= probed;
        }
    }

    /// Watches the lock files for a holder letting go, once asked to and an inotify instance is
    /// there: each file itself when there are few, so that the other files of the state directory
    /// (the ticket counter every joiner writes, the token files) wake nobody; else, or when one
    /// is missing, the directory.
    fn watch_slot_files(&mut self) -> io::Result<()> {
        let (Some(inotify), Some(dir), None) = (&self.inotify, &self.slots_dir, &self.slot_watch)
        else {
            return Ok(());
        };
        let inotify = inotify.get_ref().inner();
        let each = match self.slot_names.len() <= MAX_SLOT_FILE_WATCHES {
            true => watch_each(inotify, dir, &self.slot_names),
            false => None,
        };
        self.slot_watch = Some(match each {
            Some(watches) => SlotWatch::Files(watches),
            None => {
                SlotWatch::Dir(inotify.add_watch(dir.as_path(), AddWatchFlags::IN_CLOSE_WRITE)?)
            }
        });
        Ok(())
    }

    /// Watches exactly `files` (ticket files) from now on, and `own`, this waiter's ticket, for
    /// a poke; returns `false` when one is already gone (its change happened before the watch:
    /// look again at once). Without an inotify instance, tries to get one first; still without,
    /// probes `files` (a poke is then seen at the re-check times).
    pub fn watch_files(&mut self, files: &[PathBuf], own: Option<&Path>) -> io::Result<bool> {
        if !self.try_inotify()? {
            return self.probe_files(files);
        }
        self.watch_slot_files()?;
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
        for file in files.iter().map(PathBuf::as_path).chain(own) {
            match inotify.add_watch(file, flags) {
                Ok(watch) => self.file_watches.push(watch),
                Err(Errno::ENOENT) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Probes each of `files` (ticket files) until its waiter is gone; `false` when one is gone
    /// already. Ends the round: whether everything watched has a probe is known now.
    fn probe_files(&mut self, files: &[PathBuf]) -> io::Result<bool> {
        let mut probed_all = std::mem::replace(&mut self.slots_probed, true);
        for path in files {
            let file = match std::fs::File::open(path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            };
            probed_all &= self.probes.probe(path, file, Wanted::NotExclusive);
        }
        self.probed_all = probed_all;
        Ok(true)
    }

    /// Returns once something watched changed (or events were lost), or a probe rang.
    pub async fn woken(&mut self) -> io::Result<()> {
        let Some(inotify) = &self.inotify else {
            self.probes.rung().await;
            return Ok(());
        };
        loop {
            let mut guard = inotify.readable().await?;
            match guard.get_inner().inner().read_events() {
                Ok(events) => {
                    let relevant = events.iter().any(|event| {
                        event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || self.file_watches.contains(&event.wd)
                            || self.slot_watch.as_ref().is_some_and(|watch| {
                                watch.reports(event.wd, event.name.as_deref(), &self.slot_names)
                            })
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
}

/// The inotify instance is left open until the process exits: closing one makes the kernel wait
/// for a grace period (measured here at 10-20 ms, with kernel work that slowed the command's start
/// even when the close ran on another thread). Its last close is left to the watchdog (see
/// `supervisor::leave_last_close`), so that lockrun's own exit does not wait either: the number
/// must then never be freed for another file to take.
impl Drop for Wakeup {
    fn drop(&mut self) {
        let Some(inotify) = self.inotify.take() else {
            return;
        };
        // Deregistered from the reactor, then deliberately not closed.
        let inotify = inotify.into_inner();
        // Nothing more to report: the kernel retires the watches now, while the command runs.
        let slot_watches = match self.slot_watch.take() {
            Some(SlotWatch::Dir(watch)) => vec![watch],
            Some(SlotWatch::Files(watches)) => watches,
            None => Vec::new(),
        };
        for watch in self.file_watches.drain(..).chain(slot_watches) {
            let _ = inotify.inner().rm_watch(watch);
        }
        std::mem::forget(inotify);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Duration;

    /// A wake-up source as a waiter past the inotify budget has it.
    fn without_inotify(slot_names: &[&str], slot_wanted: Wanted) -> Wakeup {
        Wakeup {
            inotify: None,
            slots_dir: None,
            slot_watch: None,
            slot_names: slot_names.iter().map(|s| s.to_string()).collect(),
            file_watches: Vec::new(),
            slot_wanted,
            probes: Probes::default(),
            slots_probed: true,
            probed_all: true,
            asks_for_inotify: false,
        }
    }

    /// `wakeup` sleeps while `lock` is held, and wakes once it goes.
    async fn assert_woken_only_once_gone(wakeup: &mut Wakeup, lock: File) {
        let early = tokio::time::timeout(Duration::from_millis(200), wakeup.woken()).await;
        assert!(early.is_err(), "woken while the lock was held");
        drop(lock);
        tokio::time::timeout(Duration::from_secs(5), wakeup.woken())
            .await
            .expect("woken once the lock went")
            .unwrap();
    }

    fn locked(path: &Path) -> File {
        let file = File::create(path).unwrap();
        file.lock().unwrap();
        file
    }

    #[tokio::test]
    async fn without_inotify_a_ticket_ahead_going_wakes_the_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let ticket = dir.path().join("T1-x");
        let waiter_ahead = locked(&ticket);
        let mut wakeup = without_inotify(&[], Wanted::Free);
        assert!(
            wakeup
                .watch_files(std::slice::from_ref(&ticket), None)
                .unwrap()
        );
        assert!(wakeup.has_events(), "the probe covers the wait");
        // The waiter ahead leaves, or dies.
        assert_woken_only_once_gone(&mut wakeup, waiter_ahead).await;
    }

    #[tokio::test]
    async fn without_inotify_a_holder_letting_go_wakes_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let holder = locked(&dir.path().join("n.lock"));
        let mut wakeup = without_inotify(&["n.lock"], Wanted::Free);
        wakeup.watch_slots(dir.path()).unwrap();
        wakeup.probe_slots();
        assert!(wakeup.watch_files(&[], None).unwrap());
        assert!(wakeup.has_events());
        assert_woken_only_once_gone(&mut wakeup, holder).await;
    }

    /// A newer `--supersede` waiter's poke wakes the older one at once, not at its re-check; the
    /// waiter's own heartbeat, written to the same file, does not.
    #[tokio::test]
    async fn a_poke_wakes_the_waiter_whose_ticket_it_is_and_its_heartbeat_does_not() {
        use super::super::line::Line;
        use super::super::state_dir::StateDir;
        use crate::backend::{HolderInfo, Mode};
        use crate::name::LockName;
        let (_tmp, state) = StateDir::temporary();
        let name = LockName::parse("n").unwrap();
        let line = Line::open(&state, &name).unwrap();
        let record = HolderInfo::current(None, Mode::Exclusive);
        let mut older = line
            .join(&state, &name, Mode::Exclusive, true, &record)
            .unwrap()
            .expect("a free ticket counter");
        let own = line.dir.path().join(older.entry.file_name());
        let mut wakeup = Wakeup::new(HashSet::new(), Wanted::Free).unwrap();
        assert!(wakeup.watch_files(&[], Some(&own)).unwrap());
        older.beat().unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), wakeup.woken()).await;
        assert!(early.is_err(), "woken by its own heartbeat");
        line.poke(&older.entry);
        tokio::time::timeout(Duration::from_secs(5), wakeup.woken())
            .await
            .expect("woken by the poke")
            .unwrap();
    }

    #[tokio::test]
    async fn a_ticket_already_gone_means_look_again_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut wakeup = without_inotify(&[], Wanted::Free);
        let gone = dir.path().join("T1-x");
        assert!(!wakeup.watch_files(&[gone], None).unwrap());
    }
}
