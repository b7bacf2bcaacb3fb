//! Lock probes: how a waiter without an inotify instance is still woken at once. A probe is a
//! small thread blocked in `flock` on one file — a ticket file ahead in line (locked by its waiter
//! for as long as that waiter stands there), or a lock file (locked by its holder) — which the
//! kernel wakes the moment that lock goes, whether its owner let go or died. The probe lets go at
//! once (it never keeps a lock: a ticket's liveness is tested with a shared lock, which a probe's
//! shared lock does not disturb, and a lock file is only ever taken by the waiter's own try) and
//! rings the waiter's bell.
//!
//! A probe that is no longer wanted (the waiter moved on) stays blocked until its lock goes, then
//! rings a bell nobody waits for; the waiter keeps at most [`MAX_PROBES`] at once.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Probes in flight per waiter, at most; past that, the waiter looks at its re-check times.
pub const MAX_PROBES: usize = 64;
/// A probe's stack: it makes one system call and returns.
const PROBE_STACK: usize = 64 * 1024;

/// How a probe waits for a file's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Until nobody holds it at all (what an exclusive try needs).
    Free,
    /// Until nobody holds it exclusively (what a shared try, or a look at a ticket, needs).
    NotExclusive,
}

/// One waiter's probes and the bell they ring.
#[derive(Default)]
pub struct Probes {
    bell: Arc<Notify>,
    in_flight: Arc<Mutex<HashSet<PathBuf>>>,
}

impl Probes {
    /// Probes `path` (opened as `file`) unless a probe of it is in flight already; `false` when
    /// there are already [`MAX_PROBES`] in flight or no thread could be started.
    pub fn probe(&self, path: &Path, file: File, wanted: Wanted) -> bool {
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            if in_flight.contains(path) {
                return true;
            }
            if in_flight.len() >= MAX_PROBES {
                return false;
            }
            in_flight.insert(path.to_owned());
        }
        let (bell, in_flight, owned) = (
            Arc::clone(&self.bell),
            Arc::clone(&self.in_flight),
            path.to_owned(),
        );
        let started = std::thread::Builder::new()
            .name("lockrun-probe".into())
            .stack_size(PROBE_STACK)
            .spawn(move || {
                let went = wait_for_lock(&file, wanted);
                drop(file);
                in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&owned);
                // A lock that cannot be waited for rings nothing (the waiter's re-check covers
                // it), so a failing probe never spins.
                if went {
                    bell.notify_one();
                }
            });
        match started {
            Ok(_) => true,
            Err(e) => {
                crate::debug!("cannot start a lock probe: {e}");
                self.in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(path);
                false
            }
        }
    }

    /// Returns once a probe has rung (or rang since the last call).
    pub async fn rung(&self) {
        self.bell.notified().await;
    }
}

/// Blocks until the lock of `file` can be had as `wanted`, takes it, and lets it go at once;
/// `false` if the lock cannot be waited for.
fn wait_for_lock(file: &File, wanted: Wanted) -> bool {
    loop {
        let locked = match wanted {
            Wanted::Free => file.lock(),
            Wanted::NotExclusive => file.lock_shared(),
        };
        match locked {
            Ok(()) => {
                // Closing the file would let go as well; this says so where it happens.
                let _ = file.unlock();
                return true;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                crate::debug!("a lock probe cannot wait: {e}");
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn file_in(dir: &Path, name: &str) -> (PathBuf, File) {
        let path = dir.join(name);
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        (path, file)
    }

    /// A file in a new directory locked by `lock`, and a probe of it for `wanted`.
    fn probing(
        lock: fn(&File) -> io::Result<()>,
        wanted: Wanted,
    ) -> (tempfile::TempDir, PathBuf, File, Probes) {
        let dir = tempfile::tempdir().unwrap();
        let (path, held) = file_in(dir.path(), "lock");
        lock(&held).unwrap();
        let probes = Probes::default();
        assert!(probes.probe(&path, File::open(&path).unwrap(), wanted));
        (dir, path, held, probes)
    }

    async fn rings(probes: &Probes) -> bool {
        tokio::time::timeout(Duration::from_secs(5), probes.rung())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_probe_rings_when_the_lock_goes_and_never_keeps_it() {
        let (_dir, path, held, probes) = probing(File::lock, Wanted::Free);
        let early = tokio::time::timeout(Duration::from_millis(200), probes.rung()).await;
        assert!(early.is_err(), "rang while the lock was held");
        drop(held);
        assert!(rings(&probes).await, "rang once the lock went");
        let other = File::open(&path).unwrap();
        assert!(other.try_lock().is_ok(), "the probe kept the lock");
    }

    #[tokio::test]
    async fn a_shared_lock_does_not_hold_up_a_probe_for_not_exclusive() {
        let (_dir, _path, _shared, probes) = probing(File::lock_shared, Wanted::NotExclusive);
        assert!(rings(&probes).await, "rang at once");
    }

    #[test]
    fn one_probe_per_file_and_at_most_max_probes() {
        let dir = tempfile::tempdir().unwrap();
        let probes = Probes::default();
        let mut held = Vec::new();
        for k in 0..MAX_PROBES {
            let (path, file) = file_in(dir.path(), &format!("f{k}"));
            file.lock().unwrap();
            held.push(file);
            assert!(probes.probe(&path, File::open(&path).unwrap(), Wanted::Free));
            assert!(probes.probe(&path, File::open(&path).unwrap(), Wanted::Free));
        }
        let (path, _) = file_in(dir.path(), "one-more");
        assert!(!probes.probe(&path, File::open(&path).unwrap(), Wanted::Free));
    }
}
