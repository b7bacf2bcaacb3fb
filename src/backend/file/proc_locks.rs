//! Reading the kernel's table of `flock` locks (`/proc/locks`), so `status` and `list` can tell
//! who holds a lock file without touching the lock — taking even a shared lock to probe would make
//! a concurrent `--no-wait` acquirer fail.

use std::collections::HashMap;
use std::io;

use super::state_dir::FileId;

/// The exclusive `flock` locks held (not waited for) on this host, by file.
#[derive(Debug, Default)]
pub struct LockTable {
    exclusive: HashMap<FileId, u32>,
}

impl LockTable {
    /// Reads `/proc/locks`.
    pub fn read() -> io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string("/proc/locks")?))
    }

    /// Parses the text of `/proc/locks`. Lines look like
    /// `3: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF`; blocked requests carry `->` and are
    /// skipped; the device is `major:minor` in hex.
    pub fn parse(text: &str) -> Self {
        let mut table = LockTable::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, kind, _, mode, pid, device, ..] = fields.as_slice() else {
                continue;
            };
            if *kind != "FLOCK" {
                continue;
            }
            let (Some(id), Ok(pid)) = (parse_device(device), pid.parse::<i64>()) else {
                continue;
            };
            let pid = u32::try_from(pid).unwrap_or(0);
            if *mode == "WRITE" {
                table.exclusive.insert(id, pid);
            }
        }
        table
    }

    /// The pid holding an exclusive lock on `id` (0 when the kernel does not say), if any.
    pub fn exclusive_holder(&self, id: FileId) -> Option<u32> {
        self.exclusive.get(&id).copied()
    }
}

fn parse_device(field: &str) -> Option<FileId> {
    let mut parts = field.split(':');
    let major = u32::from_str_radix(parts.next()?, 16).ok()?;
    let minor = u32::from_str_radix(parts.next()?, 16).ok()?;
    let ino = parts.next()?.parse().ok()?;
    Some(FileId {
        dev: libc::makedev(major, minor),
        ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_held_locks_and_skips_blocked_ones() {
        let table = LockTable::parse(
            "1: FLOCK  ADVISORY  WRITE 4242 fd:01:77 0 EOF\n\
             1: -> FLOCK  ADVISORY  WRITE 4243 fd:01:77 0 EOF\n\
             2: FLOCK  ADVISORY  READ 10 fd:01:78 0 EOF\n\
             3: FLOCK  ADVISORY  READ 11 fd:01:78 0 EOF\n\
             4: POSIX  ADVISORY  WRITE 12 fd:01:79 0 EOF\n\
             5: OFDLCK ADVISORY  READ  -1 00:05:80 0 EOF\n",
        );
        let id = |ino| FileId {
            dev: libc::makedev(0xfd, 1),
            ino,
        };
        assert_eq!(table.exclusive_holder(id(77)), Some(4242));
        assert_eq!(table.exclusive_holder(id(78)), None);
        assert_eq!(table.exclusive_holder(id(79)), None);
        assert_eq!(table.exclusive_holder(id(80)), None);
    }
}
