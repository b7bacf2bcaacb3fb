//! The state directory: created with private permissions, opened once, and every file in it
//! reached relative to that open directory with `O_NOFOLLOW`, so a symlink planted in it is never
//! followed and a renamed directory cannot redirect a lockrun that already started.
//!
//! A directory shared by a group (setgid, as README suggests: root and a common group, mode
//! 2770) gets files its group may lock whatever the creator's umask (0660), and subdirectories
//! that stay shared (2770). Every error names the file it is about.

use std::fs::{DirBuilder, File, TryLockError};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fstatat};

use crate::backend::BackendError;

/// Mode of directories lockrun creates: only the owner may enter.
const DIR_MODE: u32 = 0o700;
/// Mode of files lockrun creates (before the umask): owner and group may lock, for a shared,
/// group-owned directory given with `file:///DIR`.
const FILE_MODE: u32 = 0o660;

/// Refuses a directory that someone else could have planted or could rewrite: it must belong to
/// this user or root, and may be writable by everyone only with the sticky bit (as `/tmp` is).
/// Following a symlink to the directory is fine; the directory it leads to is what is checked.
fn check_trust(dir: &File) -> Result<(), String> {
    let meta = dir.metadata().map_err(|e| crate::messages::io(&e))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "refused: it is owned by uid {}, and lockrun only uses a state directory of its own user (uid {me}) or of root",
            meta.uid()
        ));
    }
    let mode = meta.mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "refused: it is world-writable (mode {:o}) without the sticky bit; make it 2770 with a common group, or 1777",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Identity of a file, to tell whether a path still names the inode a lock is held on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of an open file.
    pub fn of(file: &File) -> io::Result<Self> {
        let meta = file.metadata()?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// An open state directory (or one of its subdirectories).
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    fd: OwnedFd,
    /// Setgid: shared by a group, whose members must be able to lock every file.
    shared: bool,
}

impl StateDir {
    /// Creates `path` (and missing parents) with private permissions if needed, then opens it.
    pub fn open(path: &Path) -> Result<Self, BackendError> {
        let unreachable =
            |e: io::Error| BackendError::io(format!("the state directory {}", path.display()), &e);
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)
            .map_err(|e| match e.kind() {
                // What `create` reports for a path that is there and is not a directory.
                io::ErrorKind::AlreadyExists => BackendError::Failed {
                    endpoint: format!("the state directory {}", path.display()),
                    reason: "it exists and is not a directory".into(),
                },
                _ => unreachable(e),
            })?;
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unreachable(e.into()))?;
        let dir = File::from(fd.try_clone().map_err(unreachable)?);
        check_trust(&dir).map_err(|reason| BackendError::Failed {
            endpoint: format!("the state directory {}", path.display()),
            reason,
        })?;
        let shared = dir.metadata().map_err(unreachable)?.mode() & 0o2000 != 0;
        Ok(StateDir {
            path: path.to_owned(),
            fd,
            shared,
        })
    }

    /// The subdirectory `name`, created if missing (private, or shared like this one).
    pub fn subdir(&self, name: &str) -> io::Result<StateDir> {
        let mode = if self.shared { 0o2770 } else { DIR_MODE };
        match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(self.named(name, e.into())),
        }
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.named(name, e.into()))?;
        let sub = StateDir {
            path: self.path.join(name),
            fd,
            shared: self.shared,
        };
        if self.shared {
            sub.share(&File::from(sub.fd.try_clone()?), 0o2770);
        }
        Ok(sub)
    }

    /// The existing subdirectory `name`, or `None`.
    pub fn existing_subdir(&self, name: &str) -> io::Result<Option<StateDir>> {
        match openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(StateDir {
                path: self.path.join(name),
                fd,
                shared: self.shared,
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.named(name, e.into())),
        }
    }

    /// `e`, saying which file it is about.
    pub fn named(&self, file_name: &str, e: io::Error) -> io::Error {
        let text = format!(
            "{}: {}",
            self.path.join(file_name).display(),
            crate::messages::io(&e)
        );
        io::Error::new(e.kind(), Named { text, source: e })
    }

    /// Gives the group the `mode` bits a shared directory needs, whatever the umask took away.
    fn share(&self, file: &File, mode: u32) {
        if let Ok(meta) = file.metadata()
            && meta.mode() & mode != mode & 0o7777
            && meta.uid() == nix::unistd::geteuid().as_raw()
        {
            let _ = nix::sys::stat::fchmod(file, Mode::from_bits_truncate(meta.mode() | mode));
        }
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `file_name` for reading and writing, creating it if missing. Refuses symlinks.
    pub fn open_rw(&self, file_name: &str) -> io::Result<File> {
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        self.open_at(file_name, flags)
    }

    /// Opens `file_name` for reading and writing, creating it if missing, and takes its exclusive
    /// lock without waiting; `Ok(None)` while another process holds the lock. Refuses symlinks.
    pub fn open_locked(&self, file_name: &str) -> io::Result<Option<File>> {
        let file = self.open_rw(file_name)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(self.named(file_name, e)),
        }
    }

    /// Opens `file_name` read-only, creating it if missing (a lock file: `flock` needs no write
    /// access, and closing a read-only descriptor wakes nobody watching for writes). Refuses
    /// symlinks.
    pub fn open_read(&self, file_name: &str) -> io::Result<File> {
        let flags = OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        self.open_at(file_name, flags)
    }

    /// Opens an existing `file_name` read-only; `Ok(None)` if it does not exist. Refuses symlinks.
    pub fn open_existing(&self, file_name: &str) -> io::Result<Option<File>> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match self.open_at(file_name, flags) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates `file_name`, which must not exist yet, for reading and writing.
    pub fn create_new(&self, file_name: &str) -> io::Result<File> {
        let flags =
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        self.open_at(file_name, flags)
    }

    /// Opens `file_name` with `flags`, refusing anything but a regular file. Never waits: a FIFO
    /// planted under a lock file's name would block the open until a writer came (and a caught
    /// SIGTERM restarts it), and a terminal would become lockrun's own.
    fn open_at(&self, file_name: &str, flags: OFlag) -> io::Result<File> {
        let fd = openat(
            &self.fd,
            file_name,
            flags | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
            Mode::from_bits_truncate(FILE_MODE),
        )
        .map_err(|e| match e {
            // What O_NOFOLLOW refuses: a link, dangling or not, where a lockrun file belongs.
            nix::errno::Errno::ELOOP => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is a symbolic link, which lockrun does not follow in its state directory",
                    self.path.join(file_name).display()
                ),
            ),
            e => self.named(file_name, e.into()),
        })?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| self.named(file_name, e))?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a regular file",
                    self.path.join(file_name).display()
                ),
            ));
        }
        if self.shared && flags.contains(OFlag::O_CREAT) {
            self.share(&file, FILE_MODE);
        }
        Ok(file)
    }

    /// Renames `from` to `to` within this directory.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        nix::fcntl::renameat(&self.fd, from, &self.fd, to).map_err(|e| self.named(from, e.into()))
    }

    /// Removes `file_name`; one already gone is fine.
    pub fn remove(&self, file_name: &str) -> io::Result<()> {
        match nix::unistd::unlinkat(&self.fd, file_name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
            Err(e) => Err(self.named(file_name, e.into())),
        }
    }

    /// The identity of `file_name` as the directory names it now, or `None` if it is gone.
    pub fn file_id(&self, file_name: &str) -> io::Result<Option<FileId>> {
        match fstatat(&self.fd, file_name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileId {
                dev: st.st_dev,
                ino: st.st_ino,
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.named(file_name, e.into())),
        }
    }

    /// Makes the directory's entries durable (after creating a file that must survive a crash).
    pub fn sync(&self) -> io::Result<()> {
        nix::unistd::fsync(&self.fd).map_err(io::Error::from)
    }

    /// The names of the files in the directory.
    pub fn file_names(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(|e| self.named("", e))? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
}

/// An I/O error with the path it happened on in its text, keeping the error itself as its
/// source (so that what it was — out of descriptors, say — can still be told).
#[derive(Debug)]
struct Named {
    text: String,
    source: io::Error,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Named {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(test)]
impl StateDir {
    /// For unit tests: a new state directory, `state` inside a temporary directory that is
    /// removed when the returned guard is dropped.
    pub fn temporary() -> (tempfile::TempDir, StateDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(&tmp.path().join("state")).unwrap();
        (tmp, dir)
    }
}
