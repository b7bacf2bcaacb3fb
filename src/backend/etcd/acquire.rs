//! Acquiring an etcd lease: grant a lease, join the line with a key attached to it, wait for one's
//! turn ([`super::turn`]), and confirm the lease is still alive before handing it over.
//!
//! The lease id is chosen here (random), so the grant and the join are sent together: when the
//! join reaches the cluster first it fails for want of the lease, and is sent again once the grant
//! is answered. The lease is counted from when the grant was sent, with the TTL the cluster granted
//! (it raises short ones to its minimum). A waiter keeps its lease alive in line, and once it
//! has its turn counts from its last confirmed keep-alive — or, when that is more than a third of
//! the TTL old (lockrun was paused, or the cluster slow), sends one and counts from it: a waiter
//! whose lease expired while queued never runs; it joins the line again (at the back) while its
//! deadline allows. A waiter that wins rewrites its record (the time it won, and that nothing it
//! waits for is ahead of it any more, for the waiter behind it) while its command starts; the
//! release waits for that write. A run that gives up (deadline, cancellation, a newer
//! `--supersede` waiter) or fails revokes its lease before returning (the key goes with it), so it
//! leaves no holder and no waiter behind; if the revoke cannot be sent within the leave timeout,
//! the lease expires within one TTL anyway. A pass that fails is final unless the cluster already
//! answered this run (a grant that came too late); then the waiter joins again after a pause,
//! riding the outage out as any waiter does.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::task::JoinHandle;

use super::keys::Keys;
use super::lease::{EtcdLease, grant, keep_alive, lease_id, revoke};
use super::line;
use super::link::{Link, REQUEST_TIMEOUT};
use super::plan::{Next, Plan};
use super::record::Record;
use super::turn::{Turn, Turned};
use super::waiting::Keeper;
use crate::backend::waiting::networked::Waits;
use crate::backend::waiting::policy::{LEAVE_TIMEOUT, OUTAGE_PAUSE, Outage};
use crate::backend::{
    AcquireRequest, Acquired, BackendError, Cancel, Grant, HolderInfo, Inspect, RenewError,
};
use crate::clock::BootInstant;

/// How many times a waiter whose lease expired in line joins again before giving up.
const MAX_REJOINS: u32 = 3;

/// How one pass through the line ended.
enum Outcome {
    /// A holder with this key (its create revision) and grant; `stamp` is the write of its
    /// record, still under way.
    Held {
        token: i64,
        grant: Grant,
        stamp: Option<JoinHandle<()>>,
    },
    /// Not a holder by the deadline.
    Busy,
    /// The lease expired while in line.
    LeaseLost,
    /// A newer `--supersede` waiter joined.
    Superseded(HolderInfo),
}

#[async_trait]
impl Waits for Link {
    /// Becomes a holder of `request.name`, waiting until the request's deadline or `cancel`.
    async fn wait(
        link: &Arc<Self>,
        _shown: &str,
        request: &AcquireRequest,
        mut cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        let keys = Keys::new(&request.name);
        let mut rejoins = 0;
        // A failed pass is final unless the cluster already answered this run (see
        // `AcquireRequest::answered`); then it is an outage, ridden out like any waiter's.
        let mut outage = Outage::for_request(request);
        loop {
            let lease = lease_id()?;
            let sent_at = BootInstant::now();
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
            let given_up = match outcome {
                Ok(Outcome::Held {
                    token,
                    grant,
                    stamp,
                }) => {
                    cleanup.lease = None;
                    let held =
                        EtcdLease::new(Arc::clone(link), keys.holder(lease), lease, token, grant);
                    return Ok(Acquired::Held(Box::new(held.stamped_by(stamp))));
                }
                Ok(Outcome::LeaseLost) => {
                    cleanup.lease = None;
                    outage.ok();
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
                    continue;
                }
                Ok(Outcome::Busy) => Ok(Acquired::Busy),
                Ok(Outcome::Superseded(newer)) => Ok(Acquired::Superseded(newer)),
                Err(e) => match outage.failed(e, sent_at, "join the line") {
                    Ok(()) => {
                        cleanup.now().await;
                        if request.expired() {
                            return Ok(Acquired::Busy);
                        }
                        tokio::select! {
                            () = tokio::time::sleep(OUTAGE_PAUSE) => continue,
                            () = cancel.as_mut() => return Ok(Acquired::Cancelled),
                        }
                    }
                    Err(e) => Err(e),
                },
            };
            // Every way of giving up revokes the lease first.
            cleanup.now().await;
            return given_up;
        }
    }

    fn inspector(&self) -> &dyn Inspect {
        self
    }
}

/// Grants `lease`, joins the line with it and waits for its turn.
async fn queue(
    link: &Arc<Link>,
    request: &AcquireRequest,
    keys: &Keys,
    lease: i64,
) -> Result<Outcome, BackendError> {
    let limit = request.limit.max(1);
    let record = Record::new(request.holder.stamped(), limit, (limit == 1).then_some(0));
    let mut plan = Plan::new(request.mode, limit);
    let depth = plan.depth();
    let sent_at = BootInstant::now();
    let (granted, joined) = tokio::join!(
        grant(link, lease, request.ttl),
        line::join(link, keys, lease, &record, depth, request.supersede)
    );
    let ttl = granted?;
    let joined = match joined {
        // The join overtook the grant: now the lease exists.
        Err(failure) if failure.lease_gone() => {
            crate::debug!("the join overtook the grant; joining again");
            line::join(link, keys, lease, &record, depth, request.supersede).await
        }
        other => other,
    };
    let joined = match joined {
        Ok(Some(joined)) => joined,
        // The lease is gone: the cluster said so (still, after the join above: lockrun stood
        // still past its TTL between the grant and the join), or the key is not there. Join
        // again with a new one.
        Ok(None) => return Ok(Outcome::LeaseLost),
        Err(failure) if failure.lease_gone() => return Ok(Outcome::LeaseLost),
        Err(failure) => return Err(failure.into()),
    };
    let token = joined.token;
    if let Some((ahead, more)) = joined.ahead {
        plan.looked(ahead, more);
    }
    if plan.next() == Next::Hold && limit == 1 {
        // The uncontended path: one round trip, nothing more before the command starts.
        return Ok(Outcome::Held {
            token,
            grant: Grant {
                token: token_of(link, token)?,
                slot: 0,
                ttl: Some(ttl),
                sent_at,
            },
            stamp: None,
        });
    }
    let mut keeper = Keeper::new(lease, ttl, sent_at);
    let mut turn = Turn {
        link,
        keys,
        request,
        lease,
        token,
        record: &record,
        plan,
        waited: false,
        ahead_at_join: joined.waiting,
    };
    match turn.wait(&mut keeper).await? {
        Turned::Hold => {}
        Turned::Busy => return Ok(Outcome::Busy),
        Turned::LeaseLost => return Ok(Outcome::LeaseLost),
        Turned::Superseded(newer) => return Ok(Outcome::Superseded(newer)),
    }
    let waited = turn.waited;
    // What the waiter behind this one learns when this key goes: nothing it waited for is ahead.
    let won = record.stamped_with(&turn.plan.hints());
    // A waiter's lease may have run out in line. The lease is proven alive until the last
    // confirmed keep-alive's send time plus the TTL; when that was long ago, confirm it again.
    let mut confirmed_at = if waited { keeper.confirmed } else { sent_at };
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
                _ => {
                    let ahead = joined.waiting;
                    line::claim_slot(link, keys, lease, token, &joined.slots, &won, limit, ahead)
                        .await
                }
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
    // With --limit the slot's write carried the record; otherwise write it while the command
    // starts.
    let stamp = (limit == 1).then(|| {
        let (link, keys) = (Arc::clone(link), keys.clone());
        tokio::spawn(async move {
            if let Err(e) = line::note(&link, &keys, lease, token, &won).await {
                crate::debug!("cannot record when the lock was won: {e}");
            }
        })
    });
    Ok(Outcome::Held {
        token,
        grant: Grant {
            token: token_of(link, token)?,
            slot,
            ttl: Some(ttl),
            sent_at: confirmed_at,
        },
        stamp,
    })
}

fn token_of(link: &Link, revision: i64) -> Result<u64, BackendError> {
    u64::try_from(revision).map_err(|_| BackendError::Failed {
        endpoint: link.endpoints(),
        reason: format!("unexpected create revision {revision}"),
    })
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
