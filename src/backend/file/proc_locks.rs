//! Reading the kernel's table of `flock` locks (`/proc/locks`), so `status` and `list` can tell
//! who holds a lock file without touching the lock — taking even a shared lock to probe would make
//! a concurrent `--no-wait` acquirer fail.

use std::collections::HashMap;
use std::io;

use super::state_dir::FileId;

/// The most passes over `/proc/locks` one read of the table makes. The kernel hands the table out
/// a page per `read` call, finding its place again by counting entries; a lock released between
/// two calls moves the entries after it back by one, so one pass can miss a lock that was held
/// throughout (measured under churn: about one pass in a hundred). Passes repeat until two agree,
/// and the table is their union, so a lock is missed only if every pass missed it.
const MAX_PASSES: usize = 5;

/// The exclusive `flock` locks held (not waited for) on this host, by file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LockTable {
    exclusive: HashMap<FileId, u32>,
}

impl LockTable {
    /// Reads `/proc/locks` (see [`MAX_PASSES`]).
    pub fn read() -> io::Result<Self> {
        Self::read_passes(|| std::fs::read_to_string("/proc/locks"))
    }

    /// The union of passes of `pass` until two in a row agree, or [`MAX_PASSES`]; a lock seen in
    /// a later pass is taken with the pid that pass shows.
    fn read_passes(mut pass: impl FnMut() -> io::Result<String>) -> io::Result<Self> {
        let mut union = LockTable::default();
        let mut last: Option<LockTable> = None;
        for _ in 0..MAX_PASSES {
            let table = Self::parse(&pass()?);
            union.exclusive.extend(&table.exclusive);
            if last.as_ref() == Some(&table) {
                break;
            }
            last = Some(table);
        }
        Ok(union)
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

    #[test]
    fn a_lock_one_pass_missed_is_taken_from_the_next_and_passes_stop_when_two_agree() {
        let passes = [
            "1: FLOCK  ADVISORY  WRITE 1 fd:01:1 0 EOF\n",
            "1: FLOCK  ADVISORY  WRITE 1 fd:01:1 0 EOF\n2: FLOCK  ADVISORY  WRITE 2 fd:01:2 0 EOF\n",
            "1: FLOCK  ADVISORY  WRITE 1 fd:01:1 0 EOF\n2: FLOCK  ADVISORY  WRITE 2 fd:01:2 0 EOF\n",
            "3: FLOCK  ADVISORY  WRITE 3 fd:01:3 0 EOF\n",
        ];
        let mut made = 0;
        let table = LockTable::read_passes(|| {
            made += 1;
            Ok(passes[made - 1].to_owned())
        })
        .unwrap();
        assert_eq!(made, 3, "the third pass agreed with the second");
        let id = |ino| FileId {
            dev: libc::makedev(0xfd, 1),
            ino,
        };
        assert_eq!(table.exclusive_holder(id(2)), Some(2));
        assert_eq!(table.exclusive_holder(id(3)), None);
        let mut made = 0;
        let churning = LockTable::read_passes(|| {
            made += 1;
            Ok(format!(
                "1: FLOCK  ADVISORY  WRITE {made} fd:01:{made} 0 EOF\n"
            ))
        })
        .unwrap();
        assert_eq!(made, MAX_PASSES);
        assert_eq!(churning.exclusive_holder(id(1)), Some(1));
    }

    /// Other locks taken and released all the while (as on a busy host) must not hide one that
    /// stays held: a single pass misses it about once in a hundred reads.
    #[test]
    fn a_lock_held_throughout_is_always_seen_while_others_churn() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let steady = std::fs::File::create(dir.path().join("steady")).unwrap();
        steady.lock().unwrap();
        let id = FileId::of(&steady).unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (dir, done) = (dir.path(), &done);
                scope.spawn(move || {
                    let files: Vec<std::fs::File> = (0..100)
                        .map(|k| std::fs::File::create(dir.join(format!("churn-{t}-{k}"))).unwrap())
                        .collect();
                    while !done.load(Ordering::Relaxed) {
                        files.iter().for_each(|f| f.lock().unwrap());
                        files.iter().for_each(|f| f.unlock().unwrap());
                    }
                });
            }
            let started = std::time::Instant::now();
            let mut reads = 0;
            let mut missed = 0;
            while started.elapsed() < std::time::Duration::from_millis(1500) {
                reads += 1;
                if LockTable::read().unwrap().exclusive_holder(id).is_none() {
                    missed += 1;
                }
            }
            done.store(true, Ordering::Relaxed);
            assert_eq!(
                missed, 0,
                "a lock held throughout was missed in {missed} of {reads} reads"
            );
        });
    }
}
