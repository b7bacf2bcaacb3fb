//! Acquiring an etcd lease: grant a lease, join the line with a key attached to it, wait for a
//! place among the first `limit`, and confirm the lease is still alive before handing it over.
//!
//! The lease id is chosen here (random), so the grant and the join are sent together: when the
//! join reaches the cluster first it fails for want of the lease, and is sent again once the grant
//! is answered. The lease is counted from when the grant was sent, with the TTL the cluster granted
//! (it raises short ones to its minimum). A waiter keeps its lease alive in line, and once it
//! has a place counts from its last confirmed keep-alive — or, when that is more than a third of
//! the TTL old (lockrun was paused, or the cluster slow), sends one and counts from it: a waiter
//! whose lease expired while queued never runs; it joins the line again (at the back) while its
//! deadline allows. A run that gives up (deadline, cancellation) or fails revokes its lease before
//! returning (the key goes with it), so it leaves no holder and no waiter behind; if the revoke
//! cannot be sent within the leave timeout, the lease expires within one TTL anyway.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::WatchStream;

use super::keys::{Keys, Record};
use super::lease::{EtcdLease, keep_alive, revoke};
use super::line::{self, Line};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use super::waiting::{self, Keeper, Wake};
use crate::backend::waiting::policy::{LEAVE_TIMEOUT, Outage, random_bytes};
use crate::backend::{AcquireRequest, Acquired, BackendError, Cancel, Grant, RenewError};
use crate::clock::{BootInstant, BootTimer};

/// How many times a waiter whose lease expired in line joins again before giving up.
const MAX_REJOINS: u32 = 3;

/// How one pass through the line ended.
enum Outcome {
    Held(Grant),
    /// Not a holder by the deadline.
    Busy,
    /// The lease expired while in line.
    LeaseLost,
}

/// Becomes a holder of `request.name`, waiting until the request's deadline or `cancel`.
pub async fn acquire(
    link: &Arc<Link>,
    request: &AcquireRequest,
    mut cancel: Cancel<'_>,
) -> Result<Acquired, BackendError> {
    let keys = Keys::new(&request.name);
    let mut rejoins = 0;
    loop {
        let lease = lease_id()?;
        let mut cleanup = Revoke {
            link: Arc::clone(link),
            lease: Some(lease),
        };
        let outcome = tokio::select! {
            outcome = queue(link, request, &keys, lease) => outcome,
            () = cancel.as_mut() => {
                cleanup.now().await;
                return Ok(Acquired::Cancelled);
            }
        };
        match outcome {
            Ok(Outcome::Held(grant)) => {
                cleanup.lease = None;
                return Ok(Acquired::Held(Box::new(EtcdLease::new(
                    Arc::clone(link),
                    lease,
                    grant,
                ))));
            }
            Ok(Outcome::Busy) => {
                cleanup.now().await;
                return Ok(Acquired::Busy);
            }
            Ok(Outcome::LeaseLost) => {
                cleanup.lease = None;
                if request.expired() {
                    return Ok(Acquired::Busy);
                }
                if rejoins == MAX_REJOINS {
                    return Err(BackendError::Failed {
                        endpoint: link.endpoints(),
                        reason: "the lease keeps expiring while waiting in line".into(),
                    });
                }
                rejoins += 1;
                crate::warn!("the lease expired while waiting in line; joining the line again");
            }
            Err(e) => {
                cleanup.now().await;
                return Err(e);
            }
        }
    }
}

/// Grants lease `id` for at least `ttl` (whole seconds, rounded up); returns the granted TTL.
async fn grant(link: &Link, id: i64, ttl: Duration) -> Result<Duration, BackendError> {
    let seconds = i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1);
    let granted = link
        .call(REQUEST_TIMEOUT, |mut client| async move {
            client
                .lease_grant(
                    seconds,
                    Some(etcd_client::LeaseGrantOptions::new().with_id(id)),
                )
                .await
        })
        .await?;
    let granted_ttl = u64::try_from(granted.ttl()).unwrap_or(0);
    if granted_ttl == 0 || !granted.error().is_empty() {
        return Err(BackendError::Failed {
            endpoint: link.endpoints(),
            reason: format!(
                "lease not granted: {}",
                Some(granted.error())
                    .filter(|e| !e.is_empty())
                    .unwrap_or("no TTL in the answer")
            ),
        });
    }
    Ok(Duration::from_secs(granted_ttl))
}

/// Grants `lease`, joins the line with it and waits for a place among the first `limit`.
async fn queue(
    link: &Arc<Link>,
    request: &AcquireRequest,
    keys: &Keys,
    lease: i64,
) -> Result<Outcome, BackendError> {
    let limit = request.limit.max(1);
    let record = Record {
        holder: request.holder.stamped(),
        limit,
        slot: (limit == 1).then_some(0),
    };
    let sent_at = BootInstant::now();
    let (granted, joined) = tokio::join!(
        grant(link, lease, request.ttl),
        line::join(link, keys, lease, &record)
    );
    let ttl = granted?;
    let joined = match joined {
        // The join overtook the grant: now the lease exists.
        Err(failure @ Failure::Answered { .. }) if failure.lease_gone() => {
            crate::debug!("the join overtook the grant; joining again");
            line::join(link, keys, lease, &record).await
        }
        other => other,
    };
    let Some(mut line) = joined? else {
        return Ok(Outcome::LeaseLost);
    };
    let mut waited = false;
    let mut keeper = Keeper::new(lease, ttl, sent_at);
    let mut timer: Option<BootTimer> = None;
    let mut stream: Option<WatchStream> = None;
    let mut backoff = false;
    let mut outage = Outage::in_line();
    let own_key = keys.holder(lease).into_bytes();
    // `line.ahead` only ever holds too many keys (keys leave the line, none join ahead), so a
    // stale line keeps this run waiting, never lets it through early.
    while line.ahead.len() >= limit as usize {
        if request.expired() {
            return Ok(Outcome::Busy);
        }
        if !waited {
            crate::info!("waiting for {} ({} ahead)", request.name, line.ahead.len());
            waited = true;
        }
        if stream.is_none() && !backoff {
            // Watch first, then read: every deletion after the read is reported.
            let watched = match waiting::watch(link, keys).await {
                Ok(watch) => line::read(link, keys, lease)
                    .await
                    .map(|read| (watch, read)),
                Err(e) => Err(e),
            };
            match watched {
                Ok((watch, Some(read))) => {
                    outage.ok();
                    stream = Some(watch);
                    line = read;
                    continue;
                }
                Ok((_, None)) => return Ok(Outcome::LeaseLost),
                Err(e) => {
                    outage.failed(e, BootInstant::now(), "watch the line")?;
                    backoff = true;
                }
            }
        }
        let timer = match timer.as_mut() {
            Some(timer) => timer,
            None => timer.insert(BootTimer::new().map_err(|e| BackendError::Failed {
                endpoint: link.endpoints(),
                reason: format!("cannot create a timer: {e}"),
            })?),
        };
        match waiting::wait_turn(link, stream.as_mut(), &mut keeper, timer, request.deadline)
            .await?
        {
            Wake::Deleted(gone) => {
                if gone.contains(&own_key) {
                    return Ok(Outcome::LeaseLost);
                }
                line.ahead.retain(|key| !gone.contains(key));
            }
            Wake::Look => {
                stream = None;
                backoff = false;
            }
            Wake::Deadline => return Ok(Outcome::Busy),
            Wake::LeaseLost => return Ok(Outcome::LeaseLost),
        }
    }
    drop(stream);
    let token = token_of(link, &line)?;
    if !waited && limit == 1 {
        return Ok(Outcome::Held(Grant {
            token,
            slot: 0,
            ttl: Some(ttl),
            sent_at,
        }));
    }
    // A waiter's lease may have run out in line. The lease is proven alive until the last
    // confirmed keep-alive's send time plus the TTL; when that was long ago, confirm it again.
    let mut confirmed_at = keeper.confirmed;
    let confirm = waited && BootInstant::now().saturating_since(confirmed_at) > ttl / 3;
    if confirm {
        confirmed_at = BootInstant::now();
    }
    let (kept, slot) = tokio::join!(
        async {
            match confirm {
                true => keep_alive(link, lease, REQUEST_TIMEOUT).await,
                false => Ok(()),
            }
        },
        async {
            match limit {
                1 => Ok(Some(0)),
                _ => line::claim_slot(link, keys, lease, &line, &record, limit).await,
            }
        },
    );
    match kept {
        Ok(()) => {}
        Err(RenewError::Lost(_)) => return Ok(Outcome::LeaseLost),
        Err(RenewError::Unconfirmed(e)) => return Err(e),
    }
    let Some(slot) = slot? else {
        return Ok(Outcome::LeaseLost);
    };
    if limit == 1 {
        // The record still says when this run joined the line; fix it while the command starts.
        let (link, keys, record) = (Arc::clone(link), keys.clone(), record.clone());
        tokio::spawn(async move { line::stamp(&link, &keys, lease, line.token, &record).await });
    }
    Ok(Outcome::Held(Grant {
        token,
        slot,
        ttl: Some(ttl),
        sent_at: confirmed_at,
    }))
}

fn token_of(link: &Link, line: &Line) -> Result<u64, BackendError> {
    u64::try_from(line.token).map_err(|_| BackendError::Failed {
        endpoint: link.endpoints(),
        reason: format!("unexpected create revision {}", line.token),
    })
}

/// A random positive lease id, so the grant and the join can be sent together.
fn lease_id() -> Result<i64, BackendError> {
    let bytes = random_bytes::<8>()?;
    // 62 bits: positive, and never zero (zero asks the cluster to choose).
    Ok(i64::from_le_bytes(bytes) & (i64::MAX >> 1) | 1)
}

/// Revokes a lease that did not become a holder, before the acquisition returns, within the
/// leave timeout (a lease whose revoke cannot be sent in time expires by itself).
struct Revoke {
    link: Arc<Link>,
    lease: Option<i64>,
}

impl Revoke {
    async fn now(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        match tokio::time::timeout(LEAVE_TIMEOUT, revoke(&self.link, lease)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => crate::debug!("cannot revoke the lease ({e}); it expires by itself"),
            Err(_) => crate::debug!("revoking the lease took too long; it expires by itself"),
        }
    }
}
