//! Keeping `--shared` holders apart from exclusive holders of the slots past 0. A reader holds a
//! share of slot 0's `flock`, which keeps out an exclusive holder of slot 0 only: an exclusive run
//! of `--limit` 2 or more may take slot 1 and up. So each of these two also marks itself in the
//! name's `NAME.modes` file with open-file-description record locks (`F_OFD_SETLK`, each reading
//! one byte), and looks for the other side with `F_OFD_GETLK`, which places nothing, so a look
//! disturbs nobody's try. The bytes:
//! - [`READERS`]: every reader, for as long as it holds;
//! - [`WRITERS`]: every exclusive holder past slot 0, for as long as it holds;
//! - [`DECIDING`]: such a writer for the instant between its look and its mark on [`WRITERS`].
//!
//! Readers win a tie, so that two runs that arrive together never both give up:
//! - A writer marks [`DECIDING`], and gives up if [`READERS`] is marked; otherwise it marks
//!   [`WRITERS`], then lets go of [`DECIDING`].
//! - A reader marks [`READERS`], waits (briefly) for a moment when no writer is deciding, then
//!   gives up only if [`WRITERS`] is marked.
//!
//! If both went ahead, the writer's look at [`READERS`] came before the reader's mark. Its
//! [`DECIDING`] mark was then already there, and stayed until after its [`WRITERS`] mark: the
//! reader, finding no writer deciding after its own mark, would have found [`WRITERS`] marked.
//! A dead holder's marks go with its descriptor. Record locks and `flock` locks are independent
//! on Linux: the marks never touch a slot's lock.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

use super::paths;
use super::state_dir::StateDir;
use crate::backend::Mode;
use crate::clock::BootInstant;
use crate::name::LockName;

/// The bytes of the modes file (see the module).
const READERS: i64 = 0;
const WRITERS: i64 = 1;
const DECIDING: i64 = 2;
/// How long a reader waits for a moment when no writer is deciding (each decides in
/// microseconds; one stopped in between would hold it forever), and how often it looks.
const DECIDING_WAIT: Duration = Duration::from_millis(50);
const DECIDING_LOOK: Duration = Duration::from_millis(1);

/// What came of marking a new holder.
pub enum Marked {
    /// The mark, to keep for as long as the lock is held (`None`: this holder needs none).
    Alone(Option<ModeMark>),
    /// The other side holds the name: let go of the slot, the lock is busy.
    OtherSideHolds,
}

/// A holder's mark in the modes file; let go when dropped.
pub struct ModeMark {
    file: File,
}

/// Whether a mark could be placed.
enum Placed {
    Yes,
    /// Another process write-locks the byte (nothing of lockrun's does).
    Refused,
    /// The file system has no record locks.
    Unsupported,
}

impl ModeMark {
    /// Marks a holder that has just taken `slot` of `name` in `mode`, and looks for the other
    /// side. An exclusive holder of slot 0 needs no mark: its `flock` alone keeps readers out.
    pub async fn take(
        dir: &StateDir,
        name: &LockName,
        mode: Mode,
        slot: u32,
    ) -> io::Result<Marked> {
        if mode == Mode::Exclusive && slot == 0 {
            return Ok(Marked::Alone(None));
        }
        let file_name = paths::modes_file(name);
        let mark = ModeMark {
            file: dir.open_read(&file_name)?,
        };
        let failed = |e: Errno| dir.named(&file_name, e.into());
        let first = match mode {
            Mode::Shared => READERS,
            Mode::Exclusive => DECIDING,
        };
        match mark.place(first).map_err(failed)? {
            Placed::Yes => {}
            Placed::Refused => return Ok(Marked::OtherSideHolds),
            Placed::Unsupported => {
                crate::debug!(
                    "no record locks in {}: readers are not kept apart from exclusive holders \
                     past slot 0",
                    dir.path().display()
                );
                return Ok(Marked::Alone(None));
            }
        }
        let alone = match mode {
            Mode::Exclusive => mark.decide_as_writer().map_err(failed)?,
            Mode::Shared => mark.look_as_reader().await.map_err(failed)?,
        };
        Ok(match alone {
            true => Marked::Alone(Some(mark)),
            false => Marked::OtherSideHolds,
        })
    }

    /// A writer, marked as deciding: marks itself a writer unless a reader is there.
    fn decide_as_writer(&self) -> Result<bool, Errno> {
        if self.marked_by_others(READERS)? {
            return Ok(false);
        }
        if !matches!(self.place(WRITERS)?, Placed::Yes) {
            return Ok(false);
        }
        self.set(libc::F_UNLCK, DECIDING)?;
        Ok(true)
    }

    /// A reader, marked: whether no writer holds, looked at once no writer is deciding.
    async fn look_as_reader(&self) -> Result<bool, Errno> {
        let deadline = BootInstant::now() + DECIDING_WAIT;
        while self.marked_by_others(DECIDING)? {
            if BootInstant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(DECIDING_LOOK).await;
        }
        Ok(!self.marked_by_others(WRITERS)?)
    }

    /// Read-locks `byte`.
    fn place(&self, byte: i64) -> Result<Placed, Errno> {
        match self.set(libc::F_RDLCK, byte) {
            Ok(()) => Ok(Placed::Yes),
            Err(Errno::EAGAIN | Errno::EACCES) => Ok(Placed::Refused),
            Err(Errno::ENOLCK | Errno::EINVAL | Errno::EOPNOTSUPP) => Ok(Placed::Unsupported),
            Err(e) => Err(e),
        }
    }

    /// Sets a lock of `kind` on `byte` (`F_UNLCK`: lets it go).
    fn set(&self, kind: i32, byte: i64) -> Result<(), Errno> {
        fcntl(
            self.file.as_fd(),
            FcntlArg::F_OFD_SETLK(&range(kind, byte, 1)),
        )
        .map(drop)
    }

    /// Whether another description (another run) marks `byte`.
    fn marked_by_others(&self, byte: i64) -> Result<bool, Errno> {
        let mut probe = range(libc::F_WRLCK, byte, 1);
        fcntl(self.file.as_fd(), FcntlArg::F_OFD_GETLK(&mut probe))?;
        Ok(i32::from(probe.l_type) != libc::F_UNLCK)
    }
}

impl Drop for ModeMark {
    /// Lets go explicitly, not by the close alone: a descriptor copied into a fork (the
    /// watchdog, until it closes its copies) would keep an open-file-description lock.
    fn drop(&mut self) {
        // `l_len` 0: to the end of the file, every byte.
        let every = range(libc::F_UNLCK, 0, 0);
        let _ = fcntl(self.file.as_fd(), FcntlArg::F_OFD_SETLK(&every));
    }
}

/// A record lock of `kind` on `len` bytes from `start`.
fn range(kind: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct, for which all-zero bytes are a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    lock
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark for a holder of `slot` in `mode`: `Ok(mark)` (`None` if it needs none), or `Err`
    /// when the other side was seen.
    async fn take(dir: &StateDir, mode: Mode, slot: u32) -> Result<Option<ModeMark>, ()> {
        let name = LockName::parse("mix").unwrap();
        match ModeMark::take(dir, &name, mode, slot).await.unwrap() {
            Marked::Alone(mark) => Ok(mark),
            Marked::OtherSideHolds => Err(()),
        }
    }

    #[tokio::test]
    async fn readers_share_and_holders_past_slot_zero_share() {
        let (_tmp, dir) = StateDir::temporary();
        let readers = [
            take(&dir, Mode::Shared, 0).await,
            take(&dir, Mode::Shared, 0).await,
        ];
        assert!(readers.iter().all(|r| matches!(r, Ok(Some(_)))));
        let (_tmp, dir) = StateDir::temporary();
        let writers = [
            take(&dir, Mode::Exclusive, 1).await,
            take(&dir, Mode::Exclusive, 2).await,
        ];
        assert!(writers.iter().all(|w| matches!(w, Ok(Some(_)))));
    }

    #[tokio::test]
    async fn a_reader_and_a_holder_past_slot_zero_never_both_mark() {
        let (_tmp, dir) = StateDir::temporary();
        let reader = take(&dir, Mode::Shared, 0).await;
        assert!(take(&dir, Mode::Exclusive, 1).await.is_err());
        // Slot 0's exclusive holder needs no mark: its flock keeps the readers out.
        assert!(matches!(take(&dir, Mode::Exclusive, 0).await, Ok(None)));
        drop(reader);
        // The writer that backed off let go of its marks, or they would keep this reader out.
        assert!(matches!(take(&dir, Mode::Shared, 0).await, Ok(Some(_))));
        let writer = take(&dir, Mode::Exclusive, 1).await;
        assert!(matches!(writer, Ok(Some(_))));
        assert!(take(&dir, Mode::Shared, 0).await.is_err());
        drop(writer);
        assert!(matches!(take(&dir, Mode::Shared, 0).await, Ok(Some(_))));
    }

    #[tokio::test]
    async fn a_reader_waits_out_a_deciding_writer_and_wins_the_tie() {
        let (_tmp, dir) = StateDir::temporary();
        let name = LockName::parse("mix").unwrap();
        // A writer caught between its look and its mark.
        let deciding = ModeMark {
            file: dir.open_read(&paths::modes_file(&name)).unwrap(),
        };
        assert!(matches!(deciding.place(DECIDING), Ok(Placed::Yes)));
        let started = BootInstant::now();
        // Never done deciding (stopped, say): the reader gives up after its wait.
        assert!(take(&dir, Mode::Shared, 0).await.is_err());
        assert!(BootInstant::now().saturating_since(started) >= DECIDING_WAIT);
        // Done deciding while the reader waits, having seen it: the reader holds, the writer not.
        let reader = tokio::spawn(async move {
            let result = take(&dir, Mode::Shared, 0).await.map(|m| m.is_some());
            (result, dir)
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(deciding.marked_by_others(READERS).unwrap());
        drop(deciding);
        let (result, _dir) = reader.await.unwrap();
        assert_eq!(result, Ok(true));
    }
}
