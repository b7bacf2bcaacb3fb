//! [`FileBackend`]: acquire by `flock` on a slot file, wait woken by inotify when a holder closes
//! its lock file, and read `status` from the kernel's lock table plus the holders' records.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, TryLockError};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

use super::lease::{FileLease, HolderRecord};
use super::proc_locks::LockTable;
use super::state_dir::StateDir;
use super::{fence, paths};
use crate::backend::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, Grant, HolderStatus, IntervalClaim,
    LockStatus,
};
use crate::clock::{BootInstant, BootTimer};
use crate::messages::io as io_reason;
use crate::name::LockName;
use crate::reactor::Pollable;

/// How often a waiter re-checks the locks without being woken, in case a lock was released by a
/// process that had its file open read-only (which inotify does not report as a write close).
const SAFETY_RECHECK: Duration = Duration::from_secs(1);

/// The `file://` backend.
pub struct FileBackend {
    dir: Arc<StateDir>,
}

impl FileBackend {
    /// Opens (creating if needed) the state directory at `path`.
    pub fn open(path: &Path) -> Result<Self, BackendError> {
        Ok(FileBackend {
            dir: Arc::new(StateDir::open(path)?),
        })
    }

    fn failed(&self, e: &io::Error) -> BackendError {
        BackendError::Failed {
            endpoint: self.describe(),
            reason: io_reason(e),
        }
    }

    /// Issues the token and records the holder on a slot this process has just locked.
    fn hold(
        &self,
        request: &AcquireRequest,
        slot: u32,
        file: File,
        sent_at: BootInstant,
    ) -> io::Result<FileLease> {
        let token = fence::next_token(&self.dir, &paths::fence_file(&request.name))?;
        let grant = Grant {
            token,
            slot,
            ttl: None,
            sent_at,
        };
        let record = HolderRecord {
            token,
            slot,
            limit: request.limit,
            ttl_ms: request.ttl.as_millis().try_into().unwrap_or(u64::MAX),
            holder: request.holder.stamped(),
        };
        FileLease::hold(
            Arc::clone(&self.dir),
            paths::slot_file(&request.name, slot),
            file,
            grant,
            &record,
        )
    }

    /// Reads the kernel's lock table and the directory once: every name's slots and holders.
    fn snapshot(&self) -> io::Result<Snapshot> {
        let table = LockTable::read()?;
        let mut names: BTreeMap<LockName, Slots> = BTreeMap::new();
        for file_name in self.dir.file_names()? {
            let Some((name, slot)) = paths::parse_slot_file(&file_name) else {
                continue;
            };
            let slots = names.entry(name).or_default();
            slots.files += 1;
            if let Some(holder) = self.slot_holder(&table, &file_name, slot)? {
                slots.holders.push(holder);
            }
        }
        for slots in names.values_mut() {
            slots.holders.sort_by_key(|(h, _)| h.slot);
        }
        Ok(Snapshot { table, names })
    }

    fn slot_holder(
        &self,
        table: &LockTable,
        file_name: &str,
        slot: u32,
    ) -> io::Result<Option<(HolderStatus, u32)>> {
        let Some(id) = self.dir.file_id(file_name)? else {
            return Ok(None);
        };
        let Some(pid) = table.exclusive_holder(id) else {
            return Ok(None);
        };
        let Some(file) = self.dir.open_existing(file_name)? else {
            return Ok(None);
        };
        // A holder writes its record just after locking; give a brand-new one a moment.
        for attempt in 0..3 {
            if let Some(record) = HolderRecord::read(&file)
                && (pid == 0 || record.holder.pid == pid)
            {
                let ttl = Duration::from_millis(record.ttl_ms);
                return Ok(Some((
                    HolderStatus::new(record.holder, record.token, slot, ttl),
                    record.limit,
                )));
            }
            if attempt < 2 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Locked by something that wrote no record of ours (an outside `flock`, or a holder that
        // has not written it yet): report what the kernel knows.
        let unknown = HolderStatus {
            token: 0,
            pid,
            host: String::new(),
            user: String::new(),
            note: None,
            acquired_at: String::new(),
            expires_in_ms: 0,
            slot,
            mode: crate::backend::Mode::Exclusive,
        };
        Ok(Some((unknown, 1)))
    }

    fn waiters(&self, name: &LockName, table: &LockTable) -> io::Result<u32> {
        let id = self.dir.file_id(&paths::wait_file(name))?;
        Ok(id.map_or(0, |id| table.shared_count(id)))
    }

    /// NAME's status from a snapshot. The limit is the one its holders declared; for a free name,
    /// the number of slot files (the largest limit it was used with).
    fn status_in(&self, snapshot: &Snapshot, name: &LockName) -> io::Result<LockStatus> {
        let slots = snapshot.names.get(name);
        let holders = slots.map_or(&[][..], |s| &s.holders[..]);
        let limit = holders
            .iter()
            .map(|(_, limit)| *limit)
            .max()
            .or(slots.map(|s| s.files))
            .unwrap_or(1)
            .max(1);
        Ok(LockStatus {
            name: name.to_string(),
            held: !holders.is_empty(),
            limit,
            waiters: self.waiters(name, &snapshot.table)?,
            holders: holders.iter().map(|(h, _)| h.clone()).collect(),
            queue: Vec::new(),
        })
    }
}

/// The kernel's locks and the directory's slot files, read once.
struct Snapshot {
    table: LockTable,
    names: BTreeMap<LockName, Slots>,
}

/// One name's slot files and current holders (with the limit each declared).
#[derive(Default)]
struct Slots {
    files: u32,
    holders: Vec<(HolderStatus, u32)>,
}

#[async_trait]
impl Backend for FileBackend {
    fn describe(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn expires(&self) -> bool {
        false
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
        mut cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        let slot_names: Vec<String> = (0..request.limit)
            .map(|k| paths::slot_file(&request.name, k))
            .collect();
        let slots = slot_names
            .iter()
            .map(|file_name| self.dir.open_rw(file_name))
            .collect::<io::Result<Vec<File>>>()
            .map_err(|e| self.failed(&e))?;
        let mut waiting: Option<(Waiting, BootTimer)> = None;
        loop {
            let sent_at = BootInstant::now();
            if let Some(slot) = try_lock_any(&slots).map_err(|e| self.failed(&e))? {
                if let Some((waiting, _timer)) = waiting {
                    waiting.finish();
                }
                let file = slots.into_iter().nth(slot).expect("slot index is in range");
                let lease = self
                    .hold(request, slot as u32, file, sent_at)
                    .map_err(|e| self.failed(&e))?;
                return Ok(Acquired::Held(Box::new(lease)));
            }
            if request.expired() {
                return Ok(Acquired::Busy);
            }
            match waiting.as_mut() {
                // Watch first, then try again: a release between the first try and the watch
                // would otherwise go unnoticed until the safety re-check.
                None => {
                    let started = Waiting::start(&self.dir, &request.name, &slot_names)
                        .and_then(|w| Ok((w, BootTimer::new()?)))
                        .map_err(|e| self.failed(&e))?;
                    waiting = Some(started);
                }
                Some((waiting, timer)) => {
                    let recheck = BootInstant::now() + SAFETY_RECHECK;
                    let wake_at = request.deadline.map_or(recheck, |d| d.min(recheck));
                    tokio::select! {
                        woken = waiting.released() => woken.map_err(|e| self.failed(&e))?,
                        slept = timer.sleep_until(Some(wake_at)) => slept.map_err(|e| self.failed(&e))?,
                        // Dropping the registration leaves the count of waiters at once.
                        () = cancel.as_mut() => return Ok(Acquired::Cancelled),
                    }
                }
            }
        }
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        self.snapshot()
            .and_then(|snapshot| self.status_in(&snapshot, name))
            .map_err(|e| self.failed(&e))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let snapshot = self.snapshot().map_err(|e| self.failed(&e))?;
        snapshot
            .names
            .iter()
            .filter(|(name, slots)| !slots.holders.is_empty() && name.as_str().starts_with(prefix))
            .map(|(name, _)| self.status_in(&snapshot, name))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| self.failed(&e))
    }

    async fn claim_interval(
        &self,
        _name: &LockName,
        _interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        Err(BackendError::Unsupported(
            "--min-interval is not available on this backend yet".into(),
        ))
    }

    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let status = self.status(name).await?;
        if status.holders.is_empty() {
            return Ok(0);
        }
        let pids: Vec<String> = status.holders.iter().map(|h| h.pid.to_string()).collect();
        Err(BackendError::Unsupported(format!(
            "cannot force-release {name:?} on {}: the kernel lock is held by pid {}, and only that process can drop it (it is released the moment the process exits: kill {})",
            self.describe(),
            pids.join(", pid "),
            pids.join(" ")
        )))
    }
}

/// Tries every slot once without blocking; the index of the one now locked, if any.
fn try_lock_any(slots: &[File]) -> io::Result<Option<usize>> {
    for (index, file) in slots.iter().enumerate() {
        match file.try_lock() {
            Ok(()) => return Ok(Some(index)),
            Err(TryLockError::WouldBlock) => continue,
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(None)
}

/// A waiter's registration (a shared lock on the name's wait file, counted by `status`) and its
/// wake-up source: inotify reports every close of a file opened for writing in the directory, and a
/// holder's lock is released exactly when its lock file is closed for the last time.
struct Waiting {
    _registration: File,
    inotify: AsyncFd<Pollable<Inotify>>,
    slot_names: HashSet<String>,
}

impl Waiting {
    fn start(dir: &StateDir, name: &LockName, slot_names: &[String]) -> io::Result<Self> {
        let registration = dir.open_rw(&paths::wait_file(name))?;
        registration.lock_shared()?;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(dir.path(), AddWatchFlags::IN_CLOSE_WRITE)?;
        Ok(Waiting {
            _registration: registration,
            inotify: crate::reactor::register(inotify)?,
            slot_names: slot_names.iter().cloned().collect(),
        })
    }

    /// Ends the wait: the waiter is no longer counted at once. The inotify instance is left open
    /// until the process exits: closing one makes the kernel wait for a grace period (measured
    /// here at 10-20 ms, with kernel work that slowed the command's start even when the close ran
    /// on another thread). At exit the lease has already been released, so the next holder does
    /// not wait for it.
    fn finish(self) {
        drop(self._registration);
        // Deregistered from the reactor, then deliberately not closed.
        std::mem::forget(self.inotify.into_inner());
    }

    /// Returns once one of our slot files has been closed by a writer (or events were lost).
    async fn released(&mut self) -> io::Result<()> {
        loop {
            let mut guard = self.inotify.readable().await?;
            match guard.get_inner().inner().read_events() {
                Ok(events) => {
                    let ours = events.iter().any(|event| {
                        event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || event
                                .name
                                .as_ref()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| self.slot_names.contains(n))
                    });
                    if ours {
                        return Ok(());
                    }
                }
                Err(Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
