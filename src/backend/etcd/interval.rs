//! `--min-interval` on etcd, by the cluster's clock rather than any host's: a key
//! `lockrun/NAME/#interval`, attached to a lease as long as the interval, created in a
//! transaction only if it does not exist. While the key exists NAME ran less than the interval
//! ago; how long ago is the interval minus what its lease has left.
//!
//! The lease is granted with an id chosen here, sent together with the transaction (one round
//! trip; a transaction that reaches the cluster before the grant is sent again). A transaction
//! sent again because its first answer was lost finds the key on its own lease: that is a claim.
//! Leases count in whole seconds, so the interval is rounded up, and etcd raises a lease shorter
//! than its minimum (about 1.5 election timeouts, 2 s at its default timing). A new leader
//! restarts every lease's countdown from its full length (unless the cluster checkpoints leases),
//! so after an election the interval can last up to one whole interval longer: the error is
//! always towards "too soon", never towards a second run.
//!
//! How long ago a key was made is its lease's granted TTL minus what it has left, which etcd gives
//! in whole seconds: a run that finds the key within a second of its interval asks again until the
//! seconds tell (or the key is gone), rather than being refused a second past its interval. A
//! run's look before it waits reads the key and, when there is one, its lease's time to live, and
//! skips only when the seconds clearly say too soon.
//!
//! Runs of a name may pass different intervals: the key lives as long as the interval of the run
//! that made it. A run with a shorter interval that finds it older than its own interval takes
//! it over (a transaction conditional on the key's lease being the one read); a run with a
//! longer interval cannot see past the key's end, and goes ahead once it is gone.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::keys::Keys;
use super::lease::{grant, lease_id, revoke};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use crate::backend::waiting::policy::LEAVE_TIMEOUT;
use crate::backend::{BackendError, HolderInfo, IntervalClaim, Mode};
use crate::name::LockName;

/// Records that `name` runs now unless it did less than `interval` ago.
pub async fn claim(
    link: &Link,
    name: &LockName,
    interval: Duration,
) -> Result<IntervalClaim, BackendError> {
    let key = Keys::new(name).interval();
    // A key found whose lease is gone by the time it is asked about is an interval that ended
    // just then: once more.
    for _ in 0..2 {
        if let Some(claim) = try_claim(link, &key, interval).await? {
            return Ok(claim);
        }
    }
    Ok(IntervalClaim::TooSoon {
        ago: Duration::ZERO,
    })
}

/// How long ago `name` last ran, while its interval key lives (a claim now would find it too
/// soon); records nothing.
pub async fn ran_within(
    link: &Link,
    name: &LockName,
    interval: Duration,
) -> Result<Option<Duration>, BackendError> {
    let key = Keys::new(name).interval();
    let found = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let key = key.clone();
            async move { client.get(key, None).await }
        })
        .await?;
    match found.kvs().first() {
        // Only a clear "too soon": a run the seconds cannot place is for the claim to settle.
        Some(kv) => Ok(ran_ago(link, kv.lease())
            .await?
            .filter(|since| since.at_most < interval)
            .map(|since| since.at_least)),
        None => Ok(None),
    }
}

/// One try; `None` when the key found expired meanwhile.
async fn try_claim(
    link: &Link,
    key: &str,
    interval: Duration,
) -> Result<Option<IntervalClaim>, BackendError> {
    let lease = lease_id()?;
    let record = HolderInfo::current(None, Mode::Exclusive).encode();
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            record,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let (granted, claimed) = tokio::join!(grant(link, lease, interval), run(link, &txn));
    let granted = granted?;
    if granted > interval + Duration::from_secs(1) {
        crate::debug!(
            "the cluster raised the --min-interval lease to {}",
            crate::messages::duration(granted)
        );
    }
    let claimed = match claimed {
        // The transaction overtook the grant: now the lease exists.
        Err(failure @ Failure::Answered { .. }) if failure.lease_gone() => run(link, &txn).await,
        other => other,
    }?;
    let last = on_lease(&claimed);
    // A key on this run's own lease was created by this transaction, sent again after a member
    // that ran it answered too late.
    if claimed.succeeded() || last == Some(lease) {
        return Ok(Some(IntervalClaim::Claimed));
    }
    // Too soon: the lease just granted is not needed.
    if tokio::time::timeout(LEAVE_TIMEOUT, revoke(link, lease))
        .await
        .is_err()
    {
        crate::debug!("revoking the unused --min-interval lease took too long");
    }
    let Some(last) = last else {
        return Ok(None);
    };
    match settled(link, last, interval).await? {
        None => Ok(None),
        Some(since) if since.at_least >= interval => take_over(link, key, last, interval).await,
        // Too soon, or still too close to tell: the safe side.
        Some(since) => Ok(Some(IntervalClaim::TooSoon {
            ago: since.at_least,
        })),
    }
}

/// How long settling a run that etcd's whole seconds cannot place (ran about the interval ago)
/// may take: the seconds decide within one, or the lease ends (etcd revokes an expired lease
/// within about half a second); past this, the run counts as too soon.
const SETTLE_LIMIT: Duration = Duration::from_secs(3);

/// How often an unsettled run's lease is asked about again.
const SETTLE_POLL: Duration = Duration::from_millis(200);

/// How long ago the interval lease `last` was granted, asked again until it tells whether that
/// was at least `interval` ago or less (or [`SETTLE_LIMIT`] ran out); `None` once it is gone.
async fn settled(
    link: &Link,
    last: i64,
    interval: Duration,
) -> Result<Option<Since>, BackendError> {
    let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
    loop {
        let since = ran_ago(link, last).await?;
        match since {
            Some(s) if s.at_most >= interval && s.at_least < interval => {
                if tokio::time::Instant::now() + SETTLE_POLL > deadline {
                    return Ok(since);
                }
                tokio::time::sleep(SETTLE_POLL).await;
            }
            _ => return Ok(since),
        }
    }
}

/// Replaces the key that lease `last` keeps, older than this run's `interval`, with one on a new
/// lease of `interval`; `None` when the key changed meanwhile (another run took it first).
async fn take_over(
    link: &Link,
    key: &str,
    last: i64,
    interval: Duration,
) -> Result<Option<IntervalClaim>, BackendError> {
    let lease = lease_id()?;
    grant(link, lease, interval).await?;
    let record = HolderInfo::current(None, Mode::Exclusive).encode();
    let txn = Txn::new()
        .when([Compare::lease(key, CompareOp::Equal, last)])
        .and_then([TxnOp::put(
            key,
            record,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let answer = run(link, &txn).await?;
    // Sent again after a lost answer, the transaction finds the key on this run's own lease.
    let replaced = answer.succeeded() || on_lease(&answer) == Some(lease);
    let unused = match replaced {
        true => last,
        false => lease,
    };
    if tokio::time::timeout(LEAVE_TIMEOUT, revoke(link, unused))
        .await
        .is_err()
    {
        crate::debug!("revoking an unused --min-interval lease took too long");
    }
    Ok(replaced.then_some(IntervalClaim::Claimed))
}

/// How long ago an interval lease was granted, as closely as etcd tells: between `at_least` and
/// `at_most`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Since {
    at_least: Duration,
    at_most: Duration,
}

impl Since {
    /// From the lease's granted TTL and the whole seconds it has left, which etcd truncates
    /// towards zero: `left` 3 is 3 to 4 s left, 0 is between 1 s left and 1 s past its end, and
    /// -2 is 2 to 3 s past it.
    fn from_ttl(granted: i64, left: i64) -> Since {
        let seconds = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
        let (least, most) = match left {
            1.. => (granted - left - 1, granted - left),
            0 => (granted - 1, granted + 1),
            _ => (granted - left, granted - left + 1),
        };
        Since {
            at_least: seconds(least),
            at_most: seconds(most),
        }
    }
}

/// How long ago the interval lease `id` was granted: its granted TTL minus what it has left.
/// `None` when the lease is gone (the interval ended meanwhile).
async fn ran_ago(link: &Link, id: i64) -> Result<Option<Since>, BackendError> {
    let asked = link
        .call(REQUEST_TIMEOUT, |mut client| async move {
            client.lease_time_to_live(id, None).await
        })
        .await;
    match asked {
        // etcd answers a lease it does not know with a TTL of -1 and none granted, rather than an
        // error: gone just now, the interval is over.
        Ok(answer) if answer.granted_ttl() <= 0 => Ok(None),
        Ok(answer) => Ok(Some(Since::from_ttl(answer.granted_ttl(), answer.ttl()))),
        Err(failure @ Failure::Answered { .. }) if failure.lease_gone() => Ok(None),
        Err(failure) => Err(failure.into()),
    }
}

/// The lease of the key a transaction's `get` found, if it found one.
fn on_lease(answer: &TxnResponse) -> Option<i64> {
    answer.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.lease()),
        _ => None,
    })
}

async fn run(link: &Link, txn: &Txn) -> Result<TxnResponse, Failure> {
    link.call(REQUEST_TIMEOUT, |mut client| {
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn since(granted: i64, left: i64) -> (u64, u64) {
        let s = Since::from_ttl(granted, left);
        (s.at_least.as_secs(), s.at_most.as_secs())
    }

    #[test]
    fn whole_seconds_left_bound_the_time_since_the_grant_both_ways() {
        assert_eq!(since(10, 10), (0, 0));
        assert_eq!(since(10, 3), (6, 7));
        assert_eq!(since(2, 1), (0, 1));
        // Within a second of its end, either side.
        assert_eq!(since(2, 0), (1, 3));
        assert_eq!(since(2, -1), (3, 4));
        assert_eq!(since(2, -5), (7, 8));
    }
}
