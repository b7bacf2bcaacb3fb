//! Reading and breaking Redis leases from the outside: `status`, `list` (by `SCAN`, never `KEYS`,
//! so a large database is not blocked) and `release --force`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::keys::{self, Keys};
use super::scripts;
use crate::backend::{BackendError, HolderInfo, HolderStatus, LockStatus, MAX_LIMIT, WaiterStatus};
use crate::name::LockName;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u32 = 1000;

/// A holder as the status script returns it: slot, token, record, milliseconds left.
type StoredHolder = (u32, u64, String, i64);

/// Who holds `name`, and who waits, in line order.
pub async fn status(link: &Link, name: &LockName) -> Result<LockStatus, BackendError> {
    let keys = Keys::new(name);
    let limit = known_limit(link, &keys).await?;
    let mut invocation = scripts::STATUS.prepare_invoke();
    invocation
        .key(keys.beats())
        .key(keys.readers())
        .key(keys.rinfo())
        .key(keys.queue())
        .key(keys.qinfo());
    for slot in keys.slots(limit) {
        invocation.key(slot);
    }
    let (waiting, held): (Vec<String>, Vec<StoredHolder>) =
        link.script(REQUEST_TIMEOUT, &invocation).await?;
    let holders = held
        .into_iter()
        .map(|(slot, token, info, left_ms)| {
            // -1: no expiry, which lockrun never sets; show it as none left rather than forever.
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
pub async fn list(link: &Link, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
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
        let (next, found): (u64, Vec<String>) = link.command(REQUEST_TIMEOUT, &scan).await?;
        names.extend(
            found
                .iter()
                .filter_map(|key| keys::name_of_meta(key))
                .filter(|name| name.as_str().starts_with(prefix)),
        );
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut held = Vec::new();
    for name in names {
        let status = status(link, &name).await?;
        if status.held {
            held.push(status);
        }
    }
    Ok(held)
}

/// Drops every holder of `name`, tells each on its own channel, and wakes whoever is next; the
/// token counter is untouched.
pub async fn force_release(link: &Link, name: &LockName) -> Result<usize, BackendError> {
    let keys = Keys::new(name);
    let limit = known_limit(link, &keys).await?;
    let mut invocation = scripts::FORCE_RELEASE.prepare_invoke();
    invocation
        .key(keys.meta())
        .key(keys.queue())
        .key(keys.xqueue())
        .key(keys.readers())
        .key(keys.rinfo());
    for slot in keys.slots(limit) {
        invocation.key(slot);
    }
    invocation.arg(keys.wake_prefix()).arg(keys.revoke_prefix());
    let dropped: u64 = link.script(REQUEST_TIMEOUT, &invocation).await?;
    Ok(usize::try_from(dropped).unwrap_or(usize::MAX))
}

/// The largest `--limit` any holder of the name declared (1 if none did).
async fn known_limit(link: &Link, keys: &Keys) -> Result<u32, BackendError> {
    let mut get = redis::cmd("HGET");
    get.arg(keys.meta()).arg("limit");
    let limit: Option<u32> = link.command(REQUEST_TIMEOUT, &get).await?;
    Ok(limit.unwrap_or(1).clamp(1, MAX_LIMIT))
}

/// The server's wall clock (`TIME`), for the skew `lockrun drill` reports.
pub async fn server_time(link: &Link) -> Result<std::time::SystemTime, BackendError> {
    let (secs, micros): (u64, u64) = link.command(REQUEST_TIMEOUT, &redis::cmd("TIME")).await?;
    Ok(std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}
