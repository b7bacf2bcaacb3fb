//! Reading and breaking Redis leases from the outside: `status`, `list` (by `SCAN`, never `KEYS`,
//! so a large database is not blocked) and `release --force`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::keys::{self, Keys};
use super::scripts;
use crate::backend::{BackendError, HolderInfo, HolderStatus, LockStatus, MAX_LIMIT};
use crate::name::LockName;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u32 = 1000;

/// Who holds `name`, and how many wait.
pub async fn status(link: &Link, name: &LockName) -> Result<LockStatus, BackendError> {
    let keys = Keys::new(name);
    let limit = known_limit(link, &keys).await?;
    let mut invocation = scripts::STATUS.prepare_invoke();
    invocation.key(keys.beats());
    for slot in keys.slots(limit) {
        invocation.key(slot);
    }
    let (waiters, held): (u32, Vec<(u32, u64, String, i64)>) =
        link.script(REQUEST_TIMEOUT, &invocation).await?;
    let holders: Vec<HolderStatus> = held
        .into_iter()
        .map(|(slot, token, info, left_ms)| {
            let info = HolderInfo::decode(info.as_bytes());
            // -1: no expiry, which lockrun never sets; show it as none left rather than forever.
            let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
            HolderStatus::new(info, token, slot, left)
        })
        .collect();
    Ok(LockStatus {
        name: name.to_string(),
        held: !holders.is_empty(),
        limit,
        waiters,
        holders,
        queue: Vec::new(),
    })
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

/// Drops every holder of `name`; the token counter is untouched.
pub async fn force_release(link: &Link, name: &LockName) -> Result<usize, BackendError> {
    let keys = Keys::new(name);
    let limit = known_limit(link, &keys).await?;
    let mut invocation = scripts::FORCE_RELEASE.prepare_invoke();
    for slot in keys.slots(limit) {
        invocation.key(slot);
    }
    invocation.arg(keys.channel());
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
