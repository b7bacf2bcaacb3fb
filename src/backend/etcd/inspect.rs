//! `status`, `list` and `release --force` on etcd: reading the line of a name (its holder keys in
//! create-revision order, the first `limit` holding), asking the cluster how long each holder's
//! lease has left, and revoking holders' leases.
//!
//! The limit shown is the largest `--limit` any key in the line declared (1 for an empty line).
//! A forced release revokes the holders' leases rather than deleting their keys: the keys and slots
//! go with the leases, and each holder finds its lease gone at its next keep-alive and stops its
//! command. Waiters keep their places.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};

use super::keys::{self, Keys, ROOT, Record};
use super::lease::revoke;
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use crate::backend::{BackendError, HolderInfo, HolderStatus, LockStatus};
use crate::name::LockName;

/// Who holds `name`, and how many wait.
pub async fn status(link: &Link, name: &LockName) -> Result<LockStatus, BackendError> {
    let (limit, holders, waiters) = line(link, name).await?;
    let mut shown = Vec::with_capacity(holders.len());
    for (position, kv) in holders.iter().enumerate() {
        let record = Record::decode(kv.value());
        let slot = record
            .as_ref()
            .and_then(|r| r.slot)
            .unwrap_or(u32::try_from(position).unwrap_or(0));
        let info = record.map_or_else(HolderInfo::unknown, |r| r.holder);
        let left = time_left(link, kv.lease()).await?;
        shown.push(HolderStatus::new(
            info,
            u64::try_from(kv.create_revision()).unwrap_or(0),
            slot,
            left,
        ));
    }
    shown.sort_by_key(|h| h.slot);
    Ok(LockStatus {
        name: name.to_string(),
        held: !shown.is_empty(),
        limit,
        waiters,
        holders: shown,
        queue: Vec::new(),
    })
}

/// Every held name that starts with `prefix`, sorted by name.
pub async fn list(link: &Link, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
    let start = format!("{ROOT}{prefix}");
    let found = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let start = start.clone();
            async move {
                client
                    .get(
                        start,
                        Some(GetOptions::new().with_prefix().with_keys_only()),
                    )
                    .await
            }
        })
        .await?;
    let names: BTreeSet<LockName> = found
        .kvs()
        .iter()
        .filter_map(|kv| keys::name_of_holder(kv.key()))
        .filter(|name| name.as_str().starts_with(prefix))
        .collect();
    let mut held = Vec::new();
    for name in names {
        let status = status(link, &name).await?;
        if status.held {
            held.push(status);
        }
    }
    Ok(held)
}

/// Revokes the lease of every holder of `name`; returns how many there were.
pub async fn force_release(link: &Link, name: &LockName) -> Result<usize, BackendError> {
    let (_, holders, _) = line(link, name).await?;
    let mut dropped = 0;
    for kv in &holders {
        if revoke(link, kv.lease()).await? {
            dropped += 1;
        }
    }
    Ok(dropped)
}

/// The declared limit, the holder keys (first `limit` in line) and the number of waiters.
async fn line(link: &Link, name: &LockName) -> Result<(u32, Vec<KeyValue>, u32), BackendError> {
    let prefix = Keys::new(name).holders();
    let mut found = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let prefix = prefix.clone();
            async move {
                client
                    .get(
                        prefix,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend),
                        ),
                    )
                    .await
            }
        })
        .await?;
    let mut kvs = found.take_kvs();
    let limit = kvs
        .iter()
        .filter_map(|kv| Record::decode(kv.value()))
        .map(|r| r.limit)
        .max()
        .unwrap_or(1)
        .max(1);
    let waiting = kvs.split_off(kvs.len().min(limit as usize));
    Ok((limit, kvs, u32::try_from(waiting.len()).unwrap_or(u32::MAX)))
}

/// How long lease `id` has left; zero if it is gone.
async fn time_left(link: &Link, id: i64) -> Result<Duration, BackendError> {
    let asked = link
        .call(REQUEST_TIMEOUT, |mut client| async move {
            client.lease_time_to_live(id, None).await
        })
        .await;
    match asked {
        Ok(answer) => Ok(Duration::from_secs(
            u64::try_from(answer.ttl()).unwrap_or(0),
        )),
        Err(failure @ Failure::Answered { .. }) if failure.lease_gone() => Ok(Duration::ZERO),
        Err(failure) => Err(failure.into()),
    }
}
