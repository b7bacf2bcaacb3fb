//! `status`, `list` and `release --force` on etcd (and, from [`interval`], `--min-interval`):
//! reading the line of a name (its holder keys in create-revision order), telling holders from
//! waiters by the rule every waiter applies to itself ([`holding`]), asking the cluster how long
//! each holder's lease has left, and revoking holders' leases.
//!
//! The limit shown is the largest `--limit` any key in the line declared (1 for an empty line).
//! A forced release revokes the holders' leases rather than deleting their keys: the keys and
//! slots go with the leases, each holder's watch on its own key reports the deletion at once (its
//! command is stopped after a renewal confirms the loss), and the waiters behind them are woken by
//! the same deletions. Waiters keep their places.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};

use super::interval;
use super::keys::{self, Keys, ROOT};
use super::lease::revoke;
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use super::record::Record;
use crate::backend::inspect::held;
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, Mode, WaiterStatus,
};
use crate::name::LockName;

#[async_trait]
impl Inspect for Link {
    /// Who holds `name`, and who waits, in line order.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        let line = line(self, name).await?;
        let records: Vec<Option<Record>> =
            line.iter().map(|kv| Record::decode(kv.value())).collect();
        let rules: Vec<(Mode, u32)> = records
            .iter()
            .map(|r| {
                r.as_ref()
                    .map_or((Mode::Exclusive, 1), |r| (r.holder.mode, r.limit))
            })
            .collect();
        let limit = rules.iter().map(|(_, limit)| *limit).max().unwrap_or(1);
        let mut holders = Vec::new();
        let mut queue = Vec::new();
        for (position, ((kv, record), holds)) in
            line.iter().zip(records).zip(holding(&rules)).enumerate()
        {
            let info = record
                .as_ref()
                .map_or_else(HolderInfo::unknown, |r| r.holder.clone());
            if !holds {
                queue.push(WaiterStatus::new(info));
                continue;
            }
            let slot = record
                .as_ref()
                .and_then(|r| r.slot)
                .unwrap_or(u32::try_from(position).unwrap_or(0));
            let left = time_left(self, kv.lease()).await?;
            holders.push(HolderStatus::new(
                info,
                u64::try_from(kv.create_revision()).unwrap_or(0),
                slot,
                left,
            ));
        }
        holders.sort_by_key(|h| h.slot);
        Ok(LockStatus::new(name, limit, holders, queue))
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let found = under(
            self,
            format!("{ROOT}{prefix}"),
            GetOptions::new().with_prefix().with_keys_only(),
        )
        .await?;
        let names: BTreeSet<LockName> = found
            .iter()
            .filter_map(|kv| keys::name_of_holder(kv.key()))
            .filter(|name| name.as_str().starts_with(prefix))
            .collect();
        held(names, |name| async move { self.status(&name).await }).await
    }

    /// Revokes the lease of every holder of `name`; returns how many there were. A lease found
    /// gone by its revoke counts too: it held when the line was read (it expired since, or the
    /// revoke was sent again after a member applied it and answered too late).
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let line = line(self, name).await?;
        let rules: Vec<(Mode, u32)> = line
            .iter()
            .map(|kv| {
                Record::decode(kv.value())
                    .map_or((Mode::Exclusive, 1), |r| (r.holder.mode, r.limit))
            })
            .collect();
        let mut dropped = 0;
        for (kv, holds) in line.iter().zip(holding(&rules)) {
            if holds {
                revoke(self, kv.lease()).await?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        interval::claim(self, name, interval).await
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        interval::ran_within(self, name, interval).await
    }
}

/// Which keys of a line (their mode and declared limit, in line order) hold: an exclusive key
/// when fewer than its limit are ahead of it and none of them is shared, a shared key when no
/// exclusive key is ahead of it.
pub fn holding(line: &[(Mode, u32)]) -> Vec<bool> {
    let (mut writers, mut readers) = (0usize, 0usize);
    line.iter()
        .map(|&(mode, limit)| {
            let ahead = writers + readers;
            let holds = match mode {
                Mode::Exclusive => readers == 0 && ahead < limit.max(1) as usize,
                Mode::Shared => writers == 0,
            };
            match mode {
                Mode::Exclusive => writers += 1,
                Mode::Shared => readers += 1,
            }
            holds
        })
        .collect()
}

/// The holder keys of `name`, in line order.
async fn line(link: &Link, name: &LockName) -> Result<Vec<KeyValue>, BackendError> {
    let in_line_order = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    under(link, Keys::new(name).holders(), in_line_order).await
}

/// The keys under `prefix`, read with `options` (a prefix read).
async fn under(
    link: &Link,
    prefix: String,
    options: GetOptions,
) -> Result<Vec<KeyValue>, BackendError> {
    let mut found = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { client.get(prefix, Some(options)).await }
        })
        .await?;
    Ok(found.take_kvs())
}

/// How long lease `id` has left; zero if it is gone.
pub async fn time_left(link: &Link, id: i64) -> Result<Duration, BackendError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const X: Mode = Mode::Exclusive;
    const S: Mode = Mode::Shared;

    #[test]
    fn readers_at_the_head_hold_together_until_a_writer() {
        let line = [(S, 1), (S, 1), (X, 1), (S, 1)];
        assert_eq!(holding(&line), [true, true, false, false]);
    }

    #[test]
    fn a_writer_holds_alone_at_the_head() {
        assert_eq!(holding(&[(X, 1), (S, 1), (X, 1)]), [true, false, false]);
        assert_eq!(holding(&[]), Vec::<bool>::new());
    }

    #[test]
    fn a_semaphore_holds_its_first_limit_keys() {
        let line = [(X, 3), (X, 3), (X, 3), (X, 3)];
        assert_eq!(holding(&line), [true, true, true, false]);
        assert_eq!(holding(&[(S, 1), (X, 3)]), [true, false]);
    }
}
