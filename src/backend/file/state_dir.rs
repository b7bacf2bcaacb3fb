//! The state directory: created with private permissions, opened once, and every file in it
//! reached relative to that open directory with `O_NOFOLLOW`, so a symlink planted in it is never
//! followed and a renamed directory cannot redirect a lockrun that already started.

use std::fs::{DirBuilder, File};
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
            "refusing a state directory owned by uid {} (expected {me} or root)",
            meta.uid()
        ));
    }
    let mode = meta.mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "refusing a world-writable state directory without the sticky bit (mode {:o})",
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

/// An open state directory.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    fd: OwnedFd,
}

impl StateDir {
    /// Creates `path` (and missing parents) with private permissions if needed, then opens it.
    pub fn open(path: &Path) -> Result<Self, BackendError> {
        let unreachable = |e: io::Error| BackendError::Unreachable {
            endpoint: path.display().to_string(),
            reason: crate::messages::io(&e),
        };
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)
            .map_err(unreachable)?;
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unreachable(e.into()))?;
        check_trust(&File::from(fd.try_clone().map_err(unreachable)?)).map_err(|reason| {
            BackendError::Unreachable {
                endpoint: path.display().to_string(),
                reason,
            }
        })?;
        Ok(StateDir {
            path: path.to_owned(),
            fd,
        })
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

    /// Opens an existing `file_name` read-only; `Ok(None)` if it does not exist. Refuses symlinks.
    pub fn open_existing(&self, file_name: &str) -> io::Result<Option<File>> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match self.open_at(file_name, flags) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open_at(&self, file_name: &str, flags: OFlag) -> io::Result<File> {
        let fd = openat(
            &self.fd,
            file_name,
            flags,
            Mode::from_bits_truncate(FILE_MODE),
        )?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a regular file",
                    self.path.join(file_name).display()
                ),
            ));
        }
        Ok(file)
    }

    /// The identity of `file_name` as the directory names it now, or `None` if it is gone.
    pub fn file_id(&self, file_name: &str) -> io::Result<Option<FileId>> {
        match fstatat(&self.fd, file_name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileId {
                dev: st.st_dev,
                ino: st.st_ino,
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the directory's entries durable (after creating a file that must survive a crash).
    pub fn sync(&self) -> io::Result<()> {
        nix::unistd::fsync(&self.fd).map_err(io::Error::from)
    }

    /// The names of the files in the directory.
    pub fn file_names(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
}
