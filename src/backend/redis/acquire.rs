//! Acquiring a Redis lease: one atomic try (the `acquire` script), and the waiting loop around it.
//!
//! A try either takes a free slot — when it is this caller's turn in line — with a fresh fencing
//! token, or (when waiting) puts the caller in line and renews its heartbeat. Between tries the
//! waiter sleeps until a release is announced or the safety re-check is due. A waiter that gives
//! up leaves the line; one that is dropped (Ctrl-C) is dropped from it when its heartbeat lapses.
//! The first try happens before subscribing, so an uncontended lock costs one round trip; the
//! subscription is followed by another try at once, so no release is missed.

use std::sync::Arc;
use std::time::Duration;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::keys::Keys;
use super::lease::RedisLease;
use super::scripts;
use super::waiting::Wakeups;
use crate::backend::queue::{HEARTBEAT, Nap, Outage, owner_id, recheck_at};
use crate::backend::{AcquireRequest, BackendError, Grant};
use crate::clock::BootInstant;

/// What one try found.
enum Attempt {
    Taken { token: u64, slot: u32 },
    Busy { soonest_expiry: Option<Duration> },
}

/// Becomes a holder of `request.name`, waiting until the request's deadline.
pub async fn acquire(
    link: &Arc<Link>,
    request: &AcquireRequest,
) -> Result<Option<RedisLease>, BackendError> {
    let keys = Keys::new(&request.name);
    let owner = owner_id()?;
    let ttl = Duration::from_millis(request.ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64);
    let waits = request.deadline.is_none_or(|d| d > BootInstant::now());
    let heartbeat = if waits { HEARTBEAT } else { Duration::ZERO };
    let mut wakeups = Wakeups::new(keys.channel());
    let mut nap = Nap::default();
    let mut outage = Outage::default();
    loop {
        let sent_at = BootInstant::now();
        let soonest_expiry = match attempt(link, request, &keys, &owner, ttl, heartbeat).await {
            Ok(Attempt::Taken { token, slot }) => {
                let grant = Grant {
                    token,
                    slot,
                    ttl: Some(ttl),
                    sent_at,
                };
                return Ok(Some(RedisLease::new(
                    Arc::clone(link),
                    keys.slot(slot),
                    keys.channel(),
                    owner,
                    grant,
                )));
            }
            Ok(Attempt::Busy { soonest_expiry }) => {
                outage.ok();
                soonest_expiry
            }
            Err(e) => {
                outage.failed(e, sent_at, "check the lock")?;
                None
            }
        };
        if request.deadline.is_some_and(|d| d <= BootInstant::now()) {
            if waits {
                leave(link, &keys, &owner).await;
            }
            return Ok(None);
        }
        if wakeups.subscribe(link).await {
            continue;
        }
        let wake_at = recheck_at(soonest_expiry, request.deadline);
        nap.until(wakeups.announced(), wake_at, link.endpoint())
            .await?;
    }
}

/// One run of the `acquire` script.
async fn attempt(
    link: &Link,
    request: &AcquireRequest,
    keys: &Keys,
    owner: &str,
    ttl: Duration,
    heartbeat: Duration,
) -> Result<Attempt, BackendError> {
    let holder =
        serde_json::to_string(&request.holder.stamped()).map_err(|e| BackendError::Failed {
            endpoint: link.endpoint().to_owned(),
            reason: format!("cannot encode the holder: {e}"),
        })?;
    let mut invocation = scripts::ACQUIRE.prepare_invoke();
    invocation
        .key(keys.meta())
        .key(keys.queue())
        .key(keys.beats());
    for slot in keys.slots(request.limit) {
        invocation.key(slot);
    }
    invocation
        .arg(owner)
        .arg(ttl.as_millis() as u64)
        .arg(request.limit)
        .arg(holder)
        .arg(heartbeat.as_millis() as u64);
    let reply: Vec<i64> = link.script(REQUEST_TIMEOUT, &invocation).await?;
    match reply.as_slice() {
        [1, token, slot] => Ok(Attempt::Taken {
            token: u64::try_from(*token).map_err(|_| unexpected(link, &reply))?,
            slot: u32::try_from(*slot).map_err(|_| unexpected(link, &reply))?,
        }),
        [0, _place, soonest] => Ok(Attempt::Busy {
            soonest_expiry: u64::try_from(*soonest).ok().map(Duration::from_millis),
        }),
        _ => Err(unexpected(link, &reply)),
    }
}

/// Leaves the line after giving up, so the next waiter need not wait for the heartbeat to lapse.
async fn leave(link: &Link, keys: &Keys, owner: &str) {
    let mut invocation = scripts::LEAVE.prepare_invoke();
    invocation
        .key(keys.queue())
        .key(keys.beats())
        .arg(owner)
        .arg(keys.channel());
    if let Err(e) = link.script::<i64>(REQUEST_TIMEOUT, &invocation).await {
        crate::debug!("cannot leave the line ({e}); it lapses by itself");
    }
}

fn unexpected(link: &Link, reply: &[i64]) -> BackendError {
    BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: format!("unexpected reply {reply:?} to the acquire script"),
    }
}
