//! `--min-interval` on ZooKeeper, by the ensemble's clock: the leader stamps every write with its
//! wall-clock time (a znode's `mtime`), so no host's clock takes part.
//!
//! NAME's `run` znode (persistent) records when NAME last ran: its data holds that time in
//! milliseconds, or is empty when the time is the znode's own `mtime` (the write that claimed it).
//! A claim reads the znode, then *touches* it — a write that keeps the recorded time, made only
//! for the leader's `mtime`, "now" — and compares: less than the interval since the recorded time
//! (or a clock that went backwards) is too soon, and nothing is recorded. Otherwise a second write
//! empties the data, so the recorded time becomes that write's own `mtime`. Both writes are
//! conditional on the version read before them: a claim that raced with another starts over, and
//! then finds the other's. A run's look before it waits makes the same read and touch, and stops
//! there: the touch keeps the recorded time, so looking records nothing.

use std::time::Duration;

use zookeeper_client::{self as zk, CreateMode};

use super::link::{Link, REQUEST_TIMEOUT};
use super::paths::RUN;
use crate::backend::{BackendError, IntervalClaim};
use crate::name::LockName;

/// How many races a claim may lose before giving up.
const TRIES: u32 = 10;

/// Claims NAME's run now, on `client`, unless it last ran less than `interval` ago; with
/// `record` false, only says whether it would (the touch that reads the leader's clock is still
/// made: it keeps the recorded time).
pub async fn judge(
    link: &Link,
    client: &zk::Client,
    name: &LockName,
    interval: Duration,
    record: bool,
) -> Result<IntervalClaim, BackendError> {
    let path = link.paths.child(name, RUN);
    for _ in 0..TRIES {
        let tried = attempt(link, client, name, &path, interval, record).await;
        if let Some(claim) = tried.map_err(|e| link.failed(&e))? {
            return Ok(claim);
        }
    }
    Err(BackendError::Failed {
        endpoint: link.endpoints().to_owned(),
        reason: format!("too many runs of {name} claimed --min-interval at once"),
    })
}

/// One try; `None` when it raced with another writer.
async fn attempt(
    link: &Link,
    client: &zk::Client,
    name: &LockName,
    path: &str,
    interval: Duration,
    record: bool,
) -> Result<Option<IntervalClaim>, zk::Error> {
    let (data, stat) = match link.call(REQUEST_TIMEOUT, client.get_data(path)).await {
        Ok(read) => read,
        Err(zk::Error::NoNode) if !record => return Ok(Some(IntervalClaim::Claimed)),
        Err(zk::Error::NoNode) => {
            let options = link.options(CreateMode::Persistent);
            let mut created = link
                .call(REQUEST_TIMEOUT, client.create(path, &[], &options))
                .await;
            if matches!(created, Err(zk::Error::NoNode)) {
                link.make_dir(client, name).await?;
                created = link
                    .call(REQUEST_TIMEOUT, client.create(path, &[], &options))
                    .await;
            }
            return match created {
                Ok(_) => Ok(Some(IntervalClaim::Claimed)),
                Err(zk::Error::NodeExists) => Ok(None),
                Err(e) => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let last = last_run(&data, stat.mtime);
    let touch = last.to_string();
    let touched = link
        .call(
            REQUEST_TIMEOUT,
            client.set_data(path, touch.as_bytes(), Some(stat.version)),
        )
        .await;
    let now = match touched {
        Ok(stat) => stat,
        Err(zk::Error::BadVersion) => return Ok(None),
        Err(e) => return Err(e),
    };
    let ago_ms = now.mtime - last;
    if ago_ms < i64::try_from(interval.as_millis()).unwrap_or(i64::MAX) {
        return Ok(Some(IntervalClaim::TooSoon {
            ago: Duration::from_millis(u64::try_from(ago_ms).unwrap_or(0)),
        }));
    }
    if !record {
        return Ok(Some(IntervalClaim::Claimed));
    }
    let claimed = link
        .call(
            REQUEST_TIMEOUT,
            client.set_data(path, &[], Some(now.version)),
        )
        .await;
    match claimed {
        Ok(_) => Ok(Some(IntervalClaim::Claimed)),
        Err(zk::Error::BadVersion) => Ok(None),
        Err(e) => Err(e),
    }
}

/// When NAME last ran, in the leader's milliseconds: the recorded time, or the `mtime` of the
/// write that claimed it.
fn last_run(data: &[u8], mtime: i64) -> i64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(mtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_time_is_the_data_or_else_the_claims_mtime() {
        assert_eq!(last_run(b"1700000000123", 5), 1_700_000_000_123);
        assert_eq!(last_run(b"", 5), 5);
        assert_eq!(last_run(b"junk", 5), 5);
    }
}
