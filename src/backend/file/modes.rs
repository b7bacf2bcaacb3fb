//! Keeping `--shared` holders apart from exclusive holders of the slots past 0. A reader holds a
//! share of slot 0's `flock`, which keeps out an exclusive holder of slot 0 only: an exclusive run
//! of `--limit` 2 or more may take slot 1 and up. So each of these two also marks itself in the
//! name's `NAME.modes` file — an open-file-description record lock (`F_OFD_SETLK`) reading one
//! byte: byte 0 for readers, byte 1 for exclusive holders past slot 0 — and, once its mark is in
//! place, asks the kernel whether the other side's byte could be locked for writing
//! (`F_OFD_GETLK`, which places nothing, so a look disturbs nobody's try). Of two runs that mark
//! at once, the later to look sees the earlier; a run that sees the other side lets go of its
//! mark and its slot and finds the lock busy. A dead holder's mark goes with its descriptor.
//!
//! Record locks and `flock` locks are independent on Linux: the marks never touch a slot's lock.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

use super::paths;
use super::state_dir::StateDir;
use crate::backend::Mode;
use crate::name::LockName;

/// Which of the two kinds of holder that must not meet a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// A `--shared` holder (of slot 0).
    Reader,
    /// An exclusive holder of a slot past 0.
    PastSlotZero,
}

impl Side {
    /// The side a holder of `slot` in `mode` is on; `None` for an exclusive holder of slot 0,
    /// whose `flock` alone keeps readers out.
    fn of(mode: Mode, slot: u32) -> Option<Side> {
        match (mode, slot) {
            (Mode::Shared, _) => Some(Side::Reader),
            (Mode::Exclusive, 0) => None,
            (Mode::Exclusive, _) => Some(Side::PastSlotZero),
        }
    }

    /// The byte of the modes file that marks this side.
    fn byte(self) -> i64 {
        match self {
            Side::Reader => 0,
            Side::PastSlotZero => 1,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Reader => Side::PastSlotZero,
            Side::PastSlotZero => Side::Reader,
        }
    }
}

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

impl ModeMark {
    /// Marks a holder that has just taken `slot` of `name` in `mode`, then looks for the other
    /// side.
    pub fn take(dir: &StateDir, name: &LockName, mode: Mode, slot: u32) -> io::Result<Marked> {
        let Some(side) = Side::of(mode, slot) else {
            return Ok(Marked::Alone(None));
        };
        let file_name = paths::modes_file(name);
        let file = dir.open_read(&file_name)?;
        let mark = byte_lock(libc::F_RDLCK, side.byte());
        match fcntl(file.as_fd(), FcntlArg::F_OFD_SETLK(&mark)) {
            Ok(_) => {}
            // Only a foreign process's write lock can refuse a read lock here.
            Err(Errno::EAGAIN | Errno::EACCES) => return Ok(Marked::OtherSideHolds),
            // A file system without record locks (some FUSE ones): the run goes ahead on the
            // slot's flock alone rather than not at all.
            Err(Errno::ENOLCK | Errno::EINVAL | Errno::EOPNOTSUPP) => {
                crate::debug!(
                    "no record locks in {}: readers are not kept apart from exclusive holders past slot 0",
                    dir.path().display()
                );
                return Ok(Marked::Alone(None));
            }
            Err(e) => return Err(dir.named(&file_name, e.into())),
        }
        let marked = ModeMark { file };
        let mut probe = byte_lock(libc::F_WRLCK, side.other().byte());
        fcntl(marked.file.as_fd(), FcntlArg::F_OFD_GETLK(&mut probe))
            .map_err(|e| dir.named(&file_name, e.into()))?;
        Ok(match i32::from(probe.l_type) {
            libc::F_UNLCK => Marked::Alone(Some(marked)),
            _ => Marked::OtherSideHolds,
        })
    }
}

impl Drop for ModeMark {
    /// Lets go explicitly, not by the close alone: a descriptor copied into a fork (the
    /// watchdog, until it closes its copies) would keep an open-file-description lock.
    fn drop(&mut self) {
        let _ = fcntl(
            self.file.as_fd(),
            FcntlArg::F_OFD_SETLK(&byte_lock(libc::F_UNLCK, 0)),
        );
    }
}

/// A record lock of `kind` on byte `byte` (`F_UNLCK` at 0: the whole file, as `l_len` 0 reaches
/// its end).
fn byte_lock(kind: i32, byte: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct, for which all-zero bytes are a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = match kind {
        libc::F_UNLCK => 0,
        _ => 1,
    };
    lock
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark for a holder of `slot` in `mode`: `Ok(mark)` (`None` if it needs none), or `Err`
    /// when the other side was seen.
    fn take(dir: &StateDir, mode: Mode, slot: u32) -> Result<Option<ModeMark>, ()> {
        let name = LockName::parse("mix").unwrap();
        match ModeMark::take(dir, &name, mode, slot).unwrap() {
            Marked::Alone(mark) => Ok(mark),
            Marked::OtherSideHolds => Err(()),
        }
    }

    #[test]
    fn readers_share_and_holders_past_slot_zero_share() {
        let (_tmp, dir) = StateDir::temporary();
        let readers = [take(&dir, Mode::Shared, 0), take(&dir, Mode::Shared, 0)];
        assert!(readers.iter().all(|r| matches!(r, Ok(Some(_)))));
        let (_tmp, dir) = StateDir::temporary();
        let writers = [
            take(&dir, Mode::Exclusive, 1),
            take(&dir, Mode::Exclusive, 2),
        ];
        assert!(writers.iter().all(|w| matches!(w, Ok(Some(_)))));
    }

    #[test]
    fn a_reader_and_a_holder_past_slot_zero_never_both_mark() {
        let (_tmp, dir) = StateDir::temporary();
        let reader = take(&dir, Mode::Shared, 0);
        assert!(take(&dir, Mode::Exclusive, 1).is_err());
        // Slot 0's exclusive holder needs no mark: its flock keeps the readers out.
        assert!(matches!(take(&dir, Mode::Exclusive, 0), Ok(None)));
        drop(reader);
        // The writer that backed off let go of its mark, or it would keep this reader out.
        assert!(matches!(take(&dir, Mode::Shared, 0), Ok(Some(_))));
        let writer = take(&dir, Mode::Exclusive, 1);
        assert!(matches!(writer, Ok(Some(_))));
        assert!(take(&dir, Mode::Shared, 0).is_err());
        drop(writer);
        assert!(matches!(take(&dir, Mode::Shared, 0), Ok(Some(_))));
    }
}
