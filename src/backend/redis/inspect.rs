//! Reading and breaking Redis leases from the outside (`status`, `list` by `SCAN`, never `KEYS`,
//! so a large database is not blocked, and `release --force`), `--min-interval` (the look before
//! waiting and the claim) and the server's clock. The Redlock backend asks each of its masters the
//! same questions with the pieces here that read one server.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;

use super::connect::{Link, REQUEST_TIMEOUT, Request};
use super::keys::{self, Keys};
use super::scripts::{self, Call};
use crate::backend::inspect::held;
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, MAX_LIMIT,
    WaiterStatus,
};
use crate::name::LockName;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u32 = 1000;

/// A holder as the status script returns it: slot, token, record, milliseconds left.
type StoredHolder = (u32, u64, String, i64);

#[async_trait]
impl Inspect for Link {
    /// Who holds `name`, and who waits, in line order.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        let keys = Keys::new(name);
        let limit = known_limit(self, &keys).await?;
        let call = Call::new(&scripts::STATUS).keys(status_keys(&keys, limit));
        let (waiting, held): (Vec<String>, Vec<StoredHolder>) =
            call.run(self, REQUEST_TIMEOUT).await?;
        let holders = held
            .into_iter()
            .map(|(slot, token, info, left_ms)| {
                // -1: no expiry, which lockrun never sets; show it as none left rather than
                // forever.
                let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
                HolderStatus::new(HolderInfo::decode(info.as_bytes()), token, slot, left)
            })
            .collect();
        let queue = waiting
            .iter()
            .map(|record| WaiterStatus::new(HolderInfo::decode(record.as_bytes())))
            .collect();
        Ok(LockStatus::new(name, limit, holders, queue))
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let names = scan_names(self, prefix).await?;
        held(names, |name| async move { self.status(&name).await }).await
    }

    /// Drops every holder of `name`, tells each on its own channel, and wakes whoever is next;
    /// the token counter is untouched.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let keys = Keys::new(name);
        let limit = known_limit(self, &keys).await?;
        let dropped: u64 = force_release_call(&keys, limit)
            .run(self, REQUEST_TIMEOUT)
            .await?;
        Ok(usize::try_from(dropped).unwrap_or(usize::MAX))
    }

    /// `--min-interval`, by the server's clock (the `claim_interval` script).
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        let answer = claim_interval_call(name, interval, true)
            .run(self, REQUEST_TIMEOUT)
            .await?;
        Ok(match interval_verdict(answer) {
            None => IntervalClaim::Claimed,
            Some(ago) => IntervalClaim::TooSoon { ago },
        })
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let answer = claim_interval_call(name, interval, false)
            .run(self, REQUEST_TIMEOUT)
            .await?;
        Ok(interval_verdict(answer))
    }

    /// The server's wall clock (`TIME`), for the skew `lockrun drill` reports.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        Ok(Some(std::time::UNIX_EPOCH + clock(self).await?))
    }
}

/// The keys the status script takes, in its order, for a name whose holders declared `limit`.
pub fn status_keys(keys: &Keys, limit: u32) -> Vec<String> {
    let mut all = vec![
        keys.beats(),
        keys.readers(),
        keys.rinfo(),
        keys.queue(),
        keys.qinfo(),
    ];
    all.extend(keys.slots(limit));
    all
}

/// The force-release script's invocation for a name whose holders declared `limit`.
pub fn force_release_call(keys: &Keys, limit: u32) -> Call {
    Call::new(&scripts::FORCE_RELEASE)
        .key(keys.meta())
        .key(keys.queue())
        .key(keys.xqueue())
        .key(keys.readers())
        .key(keys.rinfo())
        .keys(keys.slots(limit))
        .arg(keys.wake_prefix())
        .arg(keys.revoke_prefix())
}

/// The `--min-interval` script's invocation: record a run of `name` unless the last one is
/// younger than `interval` (with `record` false, only say whether it would).
pub fn claim_interval_call(name: &LockName, interval: Duration, record: bool) -> Call {
    Call::new(&scripts::CLAIM_INTERVAL)
        .key(Keys::new(name).meta())
        .arg(u64::try_from(interval.as_micros()).unwrap_or(u64::MAX))
        .arg(u8::from(record))
}

/// The `--min-interval` script's answer: `None` when the run is (or would be) recorded, else how
/// long ago the last one was.
pub fn interval_verdict((claimed, ago_us): (i64, i64)) -> Option<Duration> {
    (claimed != 1).then(|| Duration::from_micros(u64::try_from(ago_us).unwrap_or(0)))
}

/// The names on this server that start with `prefix` and have a meta key, by `SCAN`.
pub async fn scan_names(link: &Link, prefix: &str) -> Result<BTreeSet<LockName>, BackendError> {
    let pattern = keys::meta_pattern(prefix);
    let mut names = BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, found): (u64, Vec<String>) =
            link.send(REQUEST_TIMEOUT, Request::Command(&scan)).await?;
        names.extend(
            found
                .iter()
                .filter_map(|key| keys::name_of_meta(key))
                .filter(|name| name.as_str().starts_with(prefix)),
        );
        if next == 0 {
            return Ok(names);
        }
        cursor = next;
    }
}

/// The largest `--limit` any holder of the name declared (1 if none did).
async fn known_limit(link: &Link, keys: &Keys) -> Result<u32, BackendError> {
    Ok(declared_limit(link, keys)
        .await?
        .unwrap_or(1)
        .clamp(1, MAX_LIMIT))
}

/// The largest `--limit` this server has recorded for the name, if any.
pub async fn declared_limit(link: &Link, keys: &Keys) -> Result<Option<u32>, BackendError> {
    let mut get = redis::cmd("HGET");
    get.arg(keys.meta()).arg("limit");
    link.send(REQUEST_TIMEOUT, Request::Command(&get)).await
}

/// The server's wall clock (`TIME`), as time since the Unix epoch.
pub async fn clock(link: &Link) -> Result<Duration, BackendError> {
    let (secs, micros): (u64, u64) = link
        .send(REQUEST_TIMEOUT, Request::Command(&redis::cmd("TIME")))
        .await?;
    Ok(Duration::from_secs(secs) + Duration::from_micros(micros))
}
