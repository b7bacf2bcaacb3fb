//! Reading and breaking `redlock://` leases from the outside, and the fleet-wide run interval:
//! each asks every master at once and goes by what a quorum says.
//!
//! - `status`: a holder is shown when a quorum of masters holds it (matched by its owner id), with
//!   the token most of them carry (after the write-back, all) and the lease left until fewer than a
//!   quorum would still hold it; a waiter when a quorum has it in line, in ticket order.
//! - `list`: the names any master knows (by `SCAN`), each then read as above; a master that does
//!   not answer one name's look in time is not waited for by the next names' looks.
//! - `release --force`: on every master; each tells the holders on their own channels.
//! - `--min-interval`: each master decides by its own clock; the run goes ahead only when a quorum
//!   recorded it, so one master whose clock is off cannot cause a second run. The look before
//!   waiting skips only when a quorum says "too soon" (then no quorum could record the run).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;

use super::masters::{Masters, STRAGGLERS, Stragglers};
use super::scripts::{Call, STATUS};
use crate::backend::inspect::held;
use crate::backend::redis::connect::REQUEST_TIMEOUT;
use crate::backend::redis::inspect::{
    claim_interval_call, clock, declared_limit, force_release_call, interval_verdict, scan_names,
    status_keys,
};
use crate::backend::redis::keys::Keys;
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, MAX_LIMIT,
    WaiterStatus,
};
use crate::name::LockName;

/// One master's view: waiters `(id, ticket, record)` in line order, holders `(id, slot, token,
/// record, ms left)`.
type View = (
    Vec<(String, String, String)>,
    Vec<(String, u32, String, String, i64)>,
);

#[async_trait]
impl Inspect for Masters {
    /// Who holds `name` on a quorum of masters, and who waits there.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        status_noting(self, name, &Stragglers::default()).await
    }

    /// Every held name that starts with `prefix`, sorted by name: the names any master knows,
    /// each read on a quorum.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let prefix = prefix.to_owned();
        let round = self.send(move |link| {
            let prefix = prefix.clone();
            async move { scan_names(&link, &prefix).await }
        });
        // A master that does not answer a look within the grace (the scan, or one name's status)
        // is not waited for again by the later looks: a frozen master costs the list one grace.
        let stragglers = Stragglers::default();
        let stragglers = &stragglers;
        let names: BTreeSet<LockName> = self
            .most_of_noting(round, STRAGGLERS, stragglers)
            .await?
            .into_iter()
            .flat_map(|(_, names)| names)
            .collect();
        held(names, |name| async move {
            status_noting(self, &name, stragglers).await
        })
        .await
    }

    /// Drops every holder of `name` on every master, each told on its own channel; returns how
    /// many holders there were (the most any master had).
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let keys = Keys::new(name);
        let limit = known_limit(self, &keys, &Stragglers::default()).await?;
        let call = force_release_call(&keys, limit);
        let dropped = self
            .most_of(self.call::<u64>(&call, REQUEST_TIMEOUT), STRAGGLERS)
            .await?;
        let most = dropped.into_iter().map(|(_, n)| n).max().unwrap_or(0);
        Ok(usize::try_from(most).unwrap_or(usize::MAX))
    }

    /// `--min-interval`: each master records the run by its own clock unless its last record is
    /// younger than `interval`; claimed only when a quorum recorded it.
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        let call = claim_interval_call(name, interval, true);
        let mut round = self.call::<(i64, i64)>(&call, REQUEST_TIMEOUT);
        let (mut claimed, mut too_soon, mut failures) = (0, Vec::new(), Vec::new());
        while let Some((i, answer)) = round.next().await {
            match answer.map(interval_verdict) {
                Ok(None) => claimed += 1,
                Ok(Some(ago)) => too_soon.push(ago),
                Err(e) => failures.push((i, e)),
            }
            if claimed >= self.quorum() {
                return Ok(IntervalClaim::Claimed);
            }
            if too_soon.len() > self.len() - self.quorum() {
                break;
            }
        }
        match too_soon.into_iter().min() {
            // No quorum recorded this run: it does not go ahead.
            Some(ago) => Ok(IntervalClaim::TooSoon { ago }),
            None => Err(self.no_quorum(failures)),
        }
    }

    /// Too soon only when a quorum of masters says so: then no quorum could record this run.
    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let call = claim_interval_call(name, interval, false);
        let mut round = self.call::<(i64, i64)>(&call, REQUEST_TIMEOUT);
        let (mut too_soon, mut other) = (Vec::new(), 0);
        while let Some((_, answer)) = round.next().await {
            match answer.ok().and_then(interval_verdict) {
                Some(ago) => too_soon.push(ago),
                None => other += 1,
            }
            if too_soon.len() >= self.quorum() {
                return Ok(too_soon.into_iter().min());
            }
            if other > self.len() - self.quorum() {
                break;
            }
        }
        Ok(None)
    }

    /// The masters' wall clock (`TIME`): the median of those that answer, for the skew
    /// `lockrun drill` reports.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        let round = self.send(|link| async move { clock(&link).await });
        let mut times: Vec<Duration> = self
            .most_of(round, STRAGGLERS)
            .await?
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        times.sort();
        Ok(Some(std::time::UNIX_EPOCH + times[times.len() / 2]))
    }
}

/// Who holds `name` on a quorum of masters, and who waits there; `stragglers` as in
/// [`Masters::most_of_noting`].
async fn status_noting(
    masters: &Masters,
    name: &LockName,
    stragglers: &Stragglers,
) -> Result<LockStatus, BackendError> {
    let keys = Keys::new(name);
    let limit = known_limit(masters, &keys, stragglers).await?;
    let call = Call::new(&STATUS).keys(status_keys(&keys, limit));
    let round = masters.call::<View>(&call, REQUEST_TIMEOUT);
    let views = masters
        .most_of_noting(round, STRAGGLERS, stragglers)
        .await?;
    let views: Vec<View> = views.into_iter().map(|(_, view)| view).collect();
    Ok(combine(name, limit, &views, masters.quorum()))
}

/// What a quorum of the masters' views agree on.
fn combine(name: &LockName, limit: u32, views: &[View], quorum: usize) -> LockStatus {
    #[derive(Default)]
    struct Seen {
        slots: Vec<u32>,
        tokens: Vec<u64>,
        record: String,
        left_ms: Vec<u64>,
    }
    let mut holders: BTreeMap<&str, Seen> = BTreeMap::new();
    let mut waiters: BTreeMap<&str, (usize, u64, &str)> = BTreeMap::new();
    for (line, held) in views {
        for (id, slot, token, record, left) in held {
            let seen = holders.entry(id).or_default();
            seen.slots.push(*slot);
            seen.tokens.push(token.parse().unwrap_or(0));
            seen.record.clone_from(record);
            seen.left_ms.push(u64::try_from(*left).unwrap_or(0));
        }
        for (id, ticket, record) in line {
            let entry = waiters.entry(id).or_insert((0, 0, record));
            entry.0 += 1;
            entry.1 = entry.1.max(ticket.parse().unwrap_or(0));
        }
    }
    let mut shown: Vec<HolderStatus> = holders
        .into_values()
        .filter(|seen| seen.slots.len() >= quorum)
        .map(|mut seen| {
            // Held on a quorum until the quorum-th longest lease runs out.
            seen.left_ms.sort_unstable_by(|a, b| b.cmp(a));
            let left = Duration::from_millis(seen.left_ms[quorum - 1]);
            HolderStatus::new(
                HolderInfo::decode(seen.record.as_bytes()),
                most_common(&seen.tokens),
                most_common(&seen.slots),
                left,
            )
        })
        .collect();
    shown.sort_by_key(|h| (h.slot, h.token));
    let mut line: Vec<(u64, &str, &str)> = waiters
        .into_iter()
        .filter(|(_, (count, _, _))| *count >= quorum)
        .map(|(id, (_, ticket, record))| (ticket, id, record))
        .collect();
    line.sort();
    let queue = line
        .into_iter()
        .map(|(_, _, record)| WaiterStatus::new(HolderInfo::decode(record.as_bytes())))
        .collect();
    LockStatus::new(name, limit, shown, queue)
}

/// The value seen most often (the largest among equals).
fn most_common<T: Ord + Copy>(values: &[T]) -> T {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(*v).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(v, _)| v)
        .expect("a holder is seen at least once")
}

/// The largest `--limit` any master has seen declared for the name (1 if none).
async fn known_limit(
    masters: &Masters,
    keys: &Keys,
    stragglers: &Stragglers,
) -> Result<u32, BackendError> {
    let round = masters.send(|link| {
        let keys = keys.clone();
        async move { declared_limit(&link, &keys).await }
    });
    let limits = masters
        .most_of_noting(round, STRAGGLERS, stragglers)
        .await?;
    let limit = limits.into_iter().filter_map(|(_, l)| l).max();
    Ok(limit.unwrap_or(1).clamp(1, MAX_LIMIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(id: &str, slot: u32, token: u64, left: i64) -> (String, u32, String, String, i64) {
        (id.into(), slot, token.to_string(), String::new(), left)
    }

    fn waiter(id: &str, ticket: u64) -> (String, String, String) {
        (id.into(), ticket.to_string(), String::new())
    }

    #[test]
    fn shows_only_what_a_quorum_holds_with_its_agreed_token_and_line_order() {
        let name = LockName::parse("n").unwrap();
        let views: Vec<View> = vec![
            (
                vec![waiter("w2", 20), waiter("w1", 10)],
                vec![holder("a", 0, 7, 900), holder("stray", 1, 9, 500)],
            ),
            (
                vec![waiter("w1", 10), waiter("w2", 20), waiter("w3", 30)],
                vec![holder("a", 0, 7, 800)],
            ),
            (vec![waiter("w2", 20)], vec![holder("a", 0, 8, 1000)]),
        ];
        let status = combine(&name, 2, &views, 2);
        assert_eq!(status.holders.len(), 1, "{status:?}");
        let a = &status.holders[0];
        assert_eq!((a.token, a.slot, a.expires_in_ms), (7, 0, 900));
        assert_eq!(status.waiters, 2);
        assert_eq!(status.limit, 2);
    }

    #[test]
    fn the_most_common_value_wins_and_ties_go_to_the_largest() {
        assert_eq!(most_common(&[5, 7, 5]), 5);
        assert_eq!(most_common(&[5, 7]), 7);
    }
}
