//! `--min-interval` on DynamoDB: "NAME ran at server time T" in the lock item's `last`, written by
//! a conditional `UpdateItem` that succeeds only if the `last` stored is at least the interval
//! before now — where *now* and *T* are both DynamoDB's own clock, read from the `Date` header of
//! its responses (whole seconds), never a host's. Conditions cannot read a clock, so the claimer
//! brings the time, from the answer it just got (its acquisition), plus the boot-clock time
//! since: the server's time then lies within one second after the date it sent. The rule is kept
//! on the safe side of that second both ways: `last` is stored as the latest the time can be,
//! and compared against the earliest. So two runs are never recorded less than the interval
//! apart (up to the round trip of the write), however skewed the hosts' clocks; a run may be
//! refused up to a second or two early. A `last` ahead of the server's time (its clock went
//! back) counts as too soon. A run's look before it waits reads `last` and judges it the same way,
//! writing nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::expr::Update;
use super::item;
use super::link::{Link, REQUEST_TIMEOUT};
use super::queue;
use super::write;
use crate::backend::{BackendError, IntervalClaim};
use crate::name::LockName;

/// Records that `name` runs now unless it last ran less than `interval` ago.
pub async fn claim(
    link: &Link,
    name: &LockName,
    interval: Duration,
) -> Result<IntervalClaim, BackendError> {
    if link.server_now().is_none() {
        super::inspect::server_time(link).await?;
    }
    let (earliest, latest) = link
        .server_now()
        .ok_or_else(|| link.failed("the server's answers carry no Date header".into()))?;
    let earliest = ms(earliest);
    let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    let mut u = Update::default();
    let last = u.expr.name(item::LAST);
    let stored = u.expr.num(ms(latest));
    let cutoff = u.expr.num(earliest.saturating_sub(interval_ms));
    u.set(format!("{last} = {stored}"));
    u.condition(format!(
        "attribute_not_exists({last}) OR {last} <= {cutoff}"
    ));
    if earliest < interval_ms {
        // The server's clock says it is before the interval could have passed since 1970.
        u.condition(format!("attribute_not_exists({last})"));
    }
    let claimed = write::update(link, item::lock_key(name), &u, REQUEST_TIMEOUT)
        .await
        .map_err(|f| link.error(f))?;
    if claimed {
        return Ok(IntervalClaim::Claimed);
    }
    let lock = queue::lock_item(link, name)
        .await
        .map_err(|f| link.error(f))?;
    let ago = lock.last.map_or(0, |last| earliest.saturating_sub(last));
    Ok(IntervalClaim::TooSoon {
        ago: Duration::from_millis(ago),
    })
}

/// How long ago `name` last ran, if less than `interval` by the same rule as [`claim`] (the
/// earliest the server's time can be); records nothing.
pub async fn ran_within(
    link: &Link,
    name: &LockName,
    interval: Duration,
) -> Result<Option<Duration>, BackendError> {
    let lock = queue::lock_item(link, name)
        .await
        .map_err(|f| link.error(f))?;
    let Some(last) = lock.last else {
        return Ok(None);
    };
    let (earliest, _) = link
        .server_now()
        .ok_or_else(|| link.failed("the server's answers carry no Date header".into()))?;
    let ago = Duration::from_millis(ms(earliest).saturating_sub(last));
    Ok((ago < interval).then_some(ago))
}

fn ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
