//! A held file lease: the locked lock file, the holder's record, and the checks that stand in for
//! renewal on a lock the kernel keeps for as long as the process lives.
//!
//! Two descriptors of the lock file: the one that holds the `flock` is opened read-only, and a
//! second, read-write one writes the record (exclusive holders) and is closed *after* the lock is
//! gone — whether lockrun releases or the kernel closes its descriptors at exit (in order, and the
//! lock's is the older). Its close is what waiters watch for ("closed after writing"), so a woken
//! waiter finds the lock already free; a read-only close wakes nobody, which also keeps waiters
//! that probe the lock files from waking each other. A shared holder writes its record into a file
//! of its own in the name's line directory instead (see `line`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::modes::ModeMark;
use super::state_dir::{FileId, StateDir};
use crate::backend::{
    BackendError, Grant, HolderInfo, Lease, Released, RenewError, Renewal, Revocation,
};
use crate::messages::io as io_reason;

/// What a holder records for `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    pub token: u64,
    pub slot: u32,
    pub limit: u32,
    pub ttl_ms: u64,
    #[serde(flatten)]
    pub holder: HolderInfo,
}

impl HolderRecord {
    /// Reads a record from a file; `None` if it is blank (released), empty or not (yet) complete.
    pub fn read(file: &File) -> Option<Self> {
        let mut buf = vec![0u8; MAX_RECORD];
        let len = file.read_at(&mut buf, 0).ok()?;
        serde_json::from_slice(buf[..len].trim_ascii_end()).ok()
    }

    /// Writes the record over the whole of `file` and returns the file's length. What is left of
    /// a longer earlier record (a holder that died, or the blanks of one released) is overwritten
    /// with spaces rather than cut off: a truncation is a journalled inode update that frees the
    /// block the next record allocates again (on ext4, blanking instead took an uncontended run
    /// from 3.21 to 2.96 ms). Only a file longer than any record is cut.
    fn write(&self, file: &File) -> io::Result<usize> {
        let mut json = serde_json::to_vec(self).map_err(io::Error::other)?;
        json.push(b'\n');
        let len = file.metadata()?.len();
        match usize::try_from(len) {
            Ok(len) if len <= MAX_RECORD => {
                json.resize(json.len().max(len), b' ');
                file.write_all_at(&json, 0)?;
            }
            _ => {
                file.write_all_at(&json, 0)?;
                file.set_len(json.len() as u64)?;
            }
        }
        Ok(json.len())
    }
}

/// The longest record a reader takes in.
const MAX_RECORD: usize = 8192;

/// How often a holder looks whether its lock file is still the one it locked, between renewals
/// (which look too, but only every `--renew`): a file removed or replaced under it (a temp-dir
/// cleaner, a careless `rm`) lets another process lock a new file of the same name, and this
/// bounds how long the two commands overlap. A look is one `fstatat`; a command shorter than
/// this never makes one.
const IDENTITY_LOOK: std::time::Duration = std::time::Duration::from_millis(100);

/// Overwrites the first `len` bytes of `file` with spaces: a record released, which readers find
/// blank.
fn blank(file: &File, len: usize) -> io::Result<()> {
    file.write_all_at(&vec![b' '; len], 0)
}

/// Where a holder's record lives.
enum RecordFile {
    /// In the lock file, through its read-write descriptor; the file's length.
    InLockFile(usize),
    /// A shared holder's own file in the line directory, which it keeps locked.
    Own {
        dir: StateDir,
        name: String,
        file: File,
    },
}

/// A lock file held by this process.
pub struct FileLease {
    dir: Arc<StateDir>,
    lock_name: String,
    /// Holds the `flock`; read-only.
    lock: File,
    /// A reader's or a holder past slot 0's mark (see `modes`), let go before the lock.
    mark: Option<ModeMark>,
    /// Read-write; closed last.
    bell: File,
    id: FileId,
    record: RecordFile,
    grant: Grant,
    /// What the acquisition left to be dropped once the command has started (a waiter's place in
    /// line and wake-up watches), or at the release if it never starts.
    later: Mutex<Option<Box<dyn Send>>>,
}

/// Where a new holder's record is to go.
pub enum RecordPlace {
    /// Into the lock file (an exclusive holder).
    LockFile,
    /// Into the file `name`, created in the line directory `dir` and kept locked (a shared
    /// holder).
    Line { dir: StateDir, name: String },
}

impl FileLease {
    /// A holder: `lock` holds a `flock` (exclusive or shared) on `lock_name`, with `mark` if it
    /// needs one; `record` is written to `place`.
    pub fn new(
        dir: Arc<StateDir>,
        lock_name: String,
        lock: File,
        mark: Option<ModeMark>,
        place: RecordPlace,
        grant: Grant,
        record: &HolderRecord,
    ) -> io::Result<Self> {
        let bell = above(&lock, dir.open_rw(&lock_name)?)?;
        let record = match place {
            RecordPlace::LockFile => RecordFile::InLockFile(record.write(&bell)?),
            RecordPlace::Line { dir: line, name } => {
                let file = line.create_new(&name)?;
                file.lock().map_err(|e| line.named(&name, e))?;
                record.write(&file)?;
                RecordFile::Own {
                    dir: line,
                    name,
                    file,
                }
            }
        };
        let id = FileId::of(&lock)?;
        Ok(FileLease {
            dir,
            lock_name,
            lock,
            mark,
            bell,
            id,
            record,
            grant,
            later: Mutex::new(None),
        })
    }

    /// Keeps `what` until the command has started (see [`Lease::started`]), or until the release
    /// if it never starts.
    pub fn keep_until_started(&mut self, what: Box<dyn Send>) {
        *self.later.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(what);
    }

    fn failed(&self, e: &io::Error) -> BackendError {
        BackendError::io(
            self.dir.path().join(&self.lock_name).display().to_string(),
            e,
        )
    }
}

/// `bell` as a descriptor numbered above `lock`'s, so that the kernel, closing a dying process's
/// descriptors in order, lets go of the lock before it closes the bell.
fn above(lock: &File, bell: File) -> io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if bell.as_raw_fd() > lock.as_raw_fd() {
        return Ok(bell);
    }
    let moved = nix::fcntl::fcntl(
        &bell,
        nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(lock.as_raw_fd() + 1),
    )?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(moved) })
}

#[async_trait]
impl Lease for FileLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    fn started(&self) {
        let later = self
            .later
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(later);
    }

    /// The kernel keeps the lock while this process lives, so there is nothing to extend; what can
    /// go wrong is the lock file being removed or replaced, after which another process can lock a
    /// new file of the same name. That is a lost lease.
    async fn renew(&self) -> Result<Renewal, RenewError> {
        match self.dir.file_id(&self.lock_name) {
            Ok(Some(id)) if id == self.id => Ok(Renewal { ttl: None }),
            Ok(_) => Err(RenewError::Lost(format!(
                "lock file {} was removed or replaced; another process may now hold the lock",
                self.dir.path().join(&self.lock_name).display()
            ))),
            Err(e) => Err(RenewError::Unconfirmed(self.failed(&e))),
        }
    }

    /// Resolves once the lock file is no longer the one this run locked, for the supervisor to
    /// renew (look) at once.
    async fn revoked(&self) -> Revocation {
        loop {
            tokio::time::sleep(IDENTITY_LOOK).await;
            if !matches!(self.dir.file_id(&self.lock_name), Ok(Some(id)) if id == self.id) {
                return Revocation::Announced;
            }
        }
    }

    /// Drops what waited for the command's start and the mark, blanks the record, lets go of the
    /// lock, then closes the read-write descriptor, which wakes the waiters, and lets the one woken
    /// run first. A lock file removed or replaced since the last look makes the release find the
    /// lease already gone.
    ///
    /// The lock is let go explicitly (`LOCK_UN`), not by closing its descriptor: the watchdog,
    /// forked after the lock was taken, holds copies of lockrun's descriptors until it first
    /// runs and closes them, and a `flock` lasts while any copy is open. Closing alone left the
    /// name held after lockrun had exited whenever a loaded machine had not run the watchdog yet
    /// (a `--no-wait` run right after found it busy).
    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let still_ours = matches!(self.dir.file_id(&self.lock_name), Ok(Some(id)) if id == self.id);
        let FileLease {
            lock,
            mark,
            bell,
            record,
            lock_name,
            dir,
            later,
            ..
        } = *self;
        drop(later);
        // The mark first: a waiter that the lock's release wakes must not find it still there.
        drop(mark);
        let cleared = match record {
            RecordFile::InLockFile(len) => blank(&bell, len),
            RecordFile::Own { dir, name, file } => {
                let removed = dir.remove(&name);
                let _ = file.unlock();
                drop(file);
                removed
            }
        };
        // Fails only for a descriptor that is not open, which this one is.
        let _ = lock.unlock();
        drop(lock);
        drop(bell);
        // The close just above wakes the next waiter, which the kernel most often queues on this
        // CPU, behind the rest of this run's exit (the watchdog's stand-down, the process's
        // teardown, about 0.2 ms): it goes first. With nobody waiting this returns at once.
        // SAFETY: takes no argument and touches no memory.
        unsafe { libc::sched_yield() };
        // A kernel lock is held until it is let go: it was this run's to the end, unless its file
        // went, and another run could lock a new one.
        let released = match still_ours {
            true => Released::Given,
            false => Released::AlreadyGone,
        };
        cleared
            .map(|()| released)
            .map_err(|e| BackendError::Failed {
                endpoint: dir.path().join(&lock_name).display().to_string(),
                reason: io_reason(&e),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Mode;

    fn record(note: Option<&str>) -> HolderRecord {
        HolderRecord {
            token: 7,
            slot: 0,
            limit: 1,
            ttl_ms: 15_000,
            holder: HolderInfo::current(note.map(str::to_owned), Mode::Exclusive),
        }
    }

    #[test]
    fn a_record_replaces_a_longer_one_whole() {
        let (_tmp, dir) = StateDir::temporary();
        let file = dir.open_rw("n.lock").unwrap();
        let long = record(Some(&"x".repeat(500))).write(&file).unwrap();
        let short = record(None);
        assert_eq!(short.write(&file).unwrap(), long, "padded, not cut");
        assert_eq!(HolderRecord::read(&file), Some(short));
    }

    #[test]
    fn a_blanked_record_reads_as_none_and_the_next_one_reads_whole() {
        let (_tmp, dir) = StateDir::temporary();
        let file = dir.open_rw("n.lock").unwrap();
        let len = record(Some("first")).write(&file).unwrap();
        blank(&file, len).unwrap();
        assert_eq!(HolderRecord::read(&file), None);
        let next = record(Some("second, and longer than the first"));
        assert!(next.write(&file).unwrap() > len);
        assert_eq!(HolderRecord::read(&file), Some(next));
    }

    /// A copy of the lock's descriptor left in another process (the watchdog, forked after the
    /// lock was taken, before it closes what it inherited; a `dup` shares the lock the same way)
    /// does not keep the name held once the lease is released.
    #[tokio::test]
    async fn a_released_lock_is_free_while_a_copy_of_its_descriptor_is_still_open() {
        let (_tmp, dir) = StateDir::temporary();
        let lock = dir.open_read("n.lock").unwrap();
        lock.try_lock().unwrap();
        let copy = lock.try_clone().unwrap();
        let grant = Grant {
            token: 7,
            slot: 0,
            ttl: None,
            sent_at: crate::clock::BootInstant::now(),
        };
        let dir = Arc::new(dir);
        let lease = FileLease::new(
            Arc::clone(&dir),
            "n.lock".into(),
            lock,
            None,
            RecordPlace::LockFile,
            grant,
            &record(None),
        )
        .unwrap();
        assert_eq!(Box::new(lease).release().await.unwrap(), Released::Given);
        let next = dir.open_read("n.lock").unwrap();
        assert!(next.try_lock().is_ok(), "the copy kept the lock");
        drop(copy);
    }

    #[test]
    fn a_file_longer_than_any_record_is_cut() {
        let (_tmp, dir) = StateDir::temporary();
        let file = dir.open_rw("n.lock").unwrap();
        file.write_all_at(&vec![b'{'; MAX_RECORD + 1], 0).unwrap();
        let short = record(None);
        let len = short.write(&file).unwrap();
        assert_eq!(file.metadata().unwrap().len(), len as u64);
        assert_eq!(HolderRecord::read(&file), Some(short));
    }
}
