//! `--min-interval` on the file backend: `NAME.interval` records when the name last ran, under
//! the file's lock. One host has one clock worth trusting for this: within a boot the boot clock
//! (monotonic, unmoved by wall-clock steps, counting through suspend); across a reboot the wall
//! clock. A record from the future (the wall clock went back) counts as too soon, never as a free
//! pass. A run's look before it waits reads the record without the lock and writes nothing.

use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::fence::boot_id;
use super::retry::{self, Patience};
use super::state_dir::StateDir;
use crate::backend::IntervalClaim;
use crate::clock::BootInstant;

/// A run's time, on both clocks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    boot_id: String,
    since_boot: Duration,
    wall: Duration,
}

impl Stamp {
    fn now() -> Stamp {
        Stamp {
            boot_id: boot_id().unwrap_or_default(),
            since_boot: BootInstant::now().since_boot(),
            wall: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }

    fn encode(&self) -> String {
        format!(
            "{} {} {}\n",
            if self.boot_id.is_empty() {
                "-"
            } else {
                &self.boot_id
            },
            self.since_boot.as_nanos(),
            self.wall.as_nanos()
        )
    }

    fn decode(text: &str) -> Option<Stamp> {
        let mut fields = text.split_whitespace();
        let boot_id = fields.next()?.to_owned();
        let nanos = |f: Option<&str>| f?.parse::<u64>().ok().map(Duration::from_nanos);
        Some(Stamp {
            boot_id: if boot_id == "-" {
                String::new()
            } else {
                boot_id
            },
            since_boot: nanos(fields.next())?,
            wall: nanos(fields.next())?,
        })
    }

    /// How long before `now` this stamp was taken; `None` when it is from the future.
    fn age(&self, now: &Stamp) -> Option<Duration> {
        if !self.boot_id.is_empty() && self.boot_id == now.boot_id {
            now.since_boot.checked_sub(self.since_boot)
        } else {
            now.wall.checked_sub(self.wall)
        }
    }
}

/// How often a claim whose record another process has locked tries again.
const CLAIM_RETRY: Duration = Duration::from_millis(5);

/// Records a run of the name whose record file is `file_name`, unless the last is younger than
/// `interval`. The record's lock is held for an instant by each claim; a claim that finds it
/// taken tries again every [`CLAIM_RETRY`] without blocking the runtime's thread, so that a
/// process paused while holding it delays this run without making it deaf to its signals.
pub async fn claim(
    dir: &StateDir,
    file_name: &str,
    interval: Duration,
) -> io::Result<IntervalClaim> {
    let waiting = || crate::debug!("another run is recording itself in {file_name}; trying again");
    let claimed = retry::until_free(
        Patience::unbounded(CLAIM_RETRY),
        || judge(dir, file_name, interval),
        waiting,
    );
    Ok(claimed
        .await?
        .expect("unbounded tries end only with the lock"))
}

/// How long ago the name whose record file is `file_name` last ran, if less than `interval`.
///
/// Records nothing and takes no lock: a look is made by a run that found the name held, and
/// must never keep the holder's claim waiting (as a look paused while it held the record's lock
/// would, and a blocked lock would also keep this run from its signals). A claim empties the
/// record and writes it whole, so a read that meets one half done finds no record, or one cut
/// short: unreadable, or older than it is (a number missing its last digits). Neither is ever
/// "too soon" by mistake, and the claim made once the name is held decides.
pub fn ran_within(
    dir: &StateDir,
    file_name: &str,
    interval: Duration,
) -> io::Result<Option<Duration>> {
    let Some(file) = dir.open_existing(file_name)? else {
        return Ok(None);
    };
    let mut buf = [0u8; 128];
    let len = file.read_at(&mut buf, 0)?;
    Ok(match verdict(&buf[..len], &Stamp::now(), interval) {
        IntervalClaim::TooSoon { ago } => Some(ago),
        IntervalClaim::Claimed => None,
    })
}

/// Records a run now, under the record's lock, unless the last is younger than `interval`;
/// `None` when another process holds the lock.
fn judge(dir: &StateDir, file_name: &str, interval: Duration) -> io::Result<Option<IntervalClaim>> {
    let Some(file) = dir.open_locked(file_name)? else {
        return Ok(None);
    };
    let mut buf = [0u8; 128];
    let len = file.read_at(&mut buf, 0)?;
    let now = Stamp::now();
    let verdict = verdict(&buf[..len], &now, interval);
    if verdict == IntervalClaim::Claimed {
        file.set_len(0)?;
        file.write_all_at(now.encode().as_bytes(), 0)?;
    }
    Ok(Some(verdict))
}

/// Whether the run `record` tells of is at least `interval` before `now` (no record, or one
/// that cannot be read, is no run).
fn verdict(record: &[u8], now: &Stamp, interval: Duration) -> IntervalClaim {
    let last = std::str::from_utf8(record).ok().and_then(Stamp::decode);
    match last.map(|last| last.age(now)) {
        None => IntervalClaim::Claimed,
        Some(Some(ago)) if ago >= interval => IntervalClaim::Claimed,
        Some(ago) => IntervalClaim::TooSoon {
            ago: ago.unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_claim_within_the_interval_is_too_soon() {
        let (_tmp, dir) = StateDir::temporary();
        let minute = Duration::from_secs(60);
        assert_eq!(ran_within(&dir, "n.interval", minute).unwrap(), None);
        assert_eq!(
            claim(&dir, "n.interval", minute).await.unwrap(),
            IntervalClaim::Claimed
        );
        let ago = ran_within(&dir, "n.interval", minute).unwrap();
        assert!(ago.is_some_and(|ago| ago < minute), "{ago:?}");
        assert!(matches!(
            claim(&dir, "n.interval", minute).await.unwrap(),
            IntervalClaim::TooSoon { .. }
        ));
        assert_eq!(
            claim(&dir, "n.interval", Duration::from_nanos(1))
                .await
                .unwrap(),
            IntervalClaim::Claimed
        );
    }

    #[tokio::test]
    async fn a_look_takes_no_lock_and_creates_nothing() {
        let (_tmp, dir) = StateDir::temporary();
        let minute = Duration::from_secs(60);
        assert_eq!(ran_within(&dir, "n.interval", minute).unwrap(), None);
        assert!(dir.open_existing("n.interval").unwrap().is_none());
        claim(&dir, "n.interval", minute).await.unwrap();
        let held = dir.open_rw("n.interval").unwrap();
        held.lock().unwrap();
        let (looked, answer) = std::sync::mpsc::channel();
        let dir = std::sync::Arc::new(dir);
        let looker = std::sync::Arc::clone(&dir);
        std::thread::spawn(move || {
            let _ = looked.send(ran_within(&looker, "n.interval", minute).unwrap());
        });
        let ago = answer
            .recv_timeout(Duration::from_secs(10))
            .expect("the look waited for the record's lock");
        assert!(ago.is_some_and(|ago| ago < minute), "{ago:?}");
    }

    #[tokio::test]
    async fn a_claim_waits_for_a_locked_record_without_blocking_the_runtime() {
        let (_tmp, dir) = StateDir::temporary();
        let held = dir.open_rw("n.interval").unwrap();
        held.lock().unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let claiming = claim(&dir, "n.interval", Duration::from_secs(60));
        tokio::pin!(claiming);
        let runtime_went_on = tokio::select! {
            _ = &mut claiming => false,
            () = tokio::time::sleep(Duration::from_millis(50)) => true,
        };
        assert!(
            runtime_went_on,
            "the claim blocked the runtime, or did not wait for the lock"
        );
        assert_eq!(claiming.await.unwrap(), IntervalClaim::Claimed);
        release.join().unwrap();
    }

    #[test]
    fn a_record_cut_short_is_never_too_soon() {
        let now = Stamp {
            boot_id: "b".into(),
            since_boot: Duration::from_secs(1_000),
            wall: Duration::from_secs(50_000),
        };
        let minute = Duration::from_secs(60);
        for boot in ["b", "a"] {
            let old = Stamp {
                boot_id: boot.into(),
                since_boot: Duration::from_secs(100),
                wall: Duration::from_secs(40_000),
            }
            .encode();
            assert_eq!(
                verdict(old.as_bytes(), &now, minute),
                IntervalClaim::Claimed
            );
            for cut in 0..old.len() {
                assert_eq!(
                    verdict(&old.as_bytes()[..cut], &now, minute),
                    IntervalClaim::Claimed,
                    "{:?}",
                    &old[..cut]
                );
            }
        }
    }

    #[test]
    fn ages_use_the_boot_clock_within_a_boot_and_refuse_the_future() {
        let at = |boot: &str, since: u64, wall: u64| Stamp {
            boot_id: boot.into(),
            since_boot: Duration::from_secs(since),
            wall: Duration::from_secs(wall),
        };
        // Same boot: the wall clock's jump back by an hour changes nothing.
        assert_eq!(
            at("b", 100, 10_000).age(&at("b", 160, 6_400)),
            Some(Duration::from_secs(60))
        );
        // Another boot: the wall clock decides; a record from the future is no age at all.
        assert_eq!(
            at("a", 100, 1_000).age(&at("b", 5, 1_030)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(at("a", 100, 2_000).age(&at("b", 5, 1_000)), None);
        assert_eq!(Stamp::decode(&at("b", 1, 2).encode()), Some(at("b", 1, 2)));
    }
}
