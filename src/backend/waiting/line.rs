//! The waiting engine of the backends that keep an explicit line of waiters on the server (Redis,
//! PostgreSQL, …): a backend implements [`Line`] — one atomic try, leaving the line, a doorbell
//! that rings when it may be its turn — and [`wait_in_line`] waits for it (as the
//! [`crate::backend::Backend`] that [`super::networked::Networked`] makes of it), with everything
//! that is the same everywhere written once here:
//!
//! - the first try goes out before anything else (an uncontended lock costs one round trip);
//! - a waiter then subscribes to its doorbell and tries again at once, so a release between its
//!   first try and the subscription is never missed; after that it sleeps until the doorbell
//!   rings or the re-check is due (soon after the earliest lease could expire, at most
//!   [`SAFETY_RECHECK`] later: each try also renews the waiter's heartbeat in line);
//! - a try that fails before the backend ever answered is final (exit 69), later failures are
//!   ridden out for [`WAIT_OUTAGE`](super::policy::WAIT_OUTAGE);
//! - every way of giving up — the deadline, the caller's cancellation (a signal), being
//!   superseded, an outage — leaves the line before returning, within [`LEAVE_TIMEOUT`], so the
//!   next waiter is not held up by a ghost. Leaving also drops a slot the last try may have taken
//!   if its answer never arrived.

use std::time::Duration;

use async_trait::async_trait;

use super::policy::{HEARTBEAT, LEAVE_TIMEOUT, Nap, Outage, SAFETY_RECHECK, owner_id, recheck_at};
use crate::backend::{
    AcquireRequest, Acquired, BackendError, Cancel, Grant, HolderInfo, Inspect, Lease,
};
use crate::clock::BootInstant;

/// Pause before subscribing again after a doorbell broke or could not be set up.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// One contender for a name, fixed for its whole wait.
pub struct Ticket<'a> {
    pub request: &'a AcquireRequest,
    /// A random id, unique to this run: whose place in line, whose slot.
    pub owner: String,
    /// How long the place in line lasts without another try; zero for a single try that never
    /// joins the line.
    pub heartbeat: Duration,
}

impl Ticket<'_> {
    /// Whether this contender stands in line (it waits) rather than trying once.
    pub fn queues(&self) -> bool {
        !self.heartbeat.is_zero()
    }

    /// The holder record stored for `status`, stamped now.
    pub fn holder_json(&self) -> String {
        self.request.holder.stamped().encode()
    }
}

/// A slot that a try took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    pub token: u64,
    pub slot: u32,
    /// The lease length granted.
    pub ttl: Duration,
}

impl Taken {
    /// What was granted, counting the lease from `sent_at`.
    pub fn grant(self, sent_at: BootInstant) -> Grant {
        Grant {
            token: self.token,
            slot: self.slot,
            ttl: Some(self.ttl),
            sent_at,
        }
    }
}

/// What one try found.
#[derive(Debug)]
pub enum Attempt {
    Taken(Taken),
    /// Not this contender's turn (it is in line when it queues).
    Waiting {
        /// The shortest time a current lease has left, when known: worth looking again then.
        soonest_expiry: Option<Duration>,
        /// A newer `--supersede` waiter, when this one was superseded.
        superseded_by: Option<HolderInfo>,
    },
}

/// Rings when it may be a waiter's turn: a release, a waiter ahead leaving, a newer waiter that
/// supersedes this one. A hint, never a promise: the waiter always tries again to find out.
#[async_trait]
pub trait Doorbell: Send {
    /// Returns `true` when rung, `false` when the doorbell broke (it is then set up again later).
    async fn rung(&mut self) -> bool;
}

/// What a backend with a server-side line does; [`wait_in_line`] does the waiting.
#[async_trait]
pub trait Line: Send + Sync + 'static {
    /// One atomic try: take a free slot when it is this contender's turn, otherwise (when it
    /// queues) join the line or renew its heartbeat there.
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError>;

    /// Leaves the line, and drops any slot this contender holds (a try whose answer was lost may
    /// have taken one); wakes whoever is next.
    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError>;

    /// Sets up the doorbell for this contender.
    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError>;

    /// The lease for a slot this contender took with a try sent at `sent_at`.
    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease>;

    /// What the backend answers about names without holding them.
    fn inspect(&self) -> &dyn Inspect;
}

/// The doorbell, and when it was last set up.
#[derive(Default)]
struct Bell {
    current: Option<Box<dyn Doorbell>>,
    last_try: Option<BootInstant>,
}

impl Bell {
    fn due(&self) -> bool {
        self.current.is_none()
            && self
                .last_try
                .is_none_or(|t| BootInstant::now().saturating_since(t) >= RESUBSCRIBE_AFTER)
    }

    async fn rung(&mut self) {
        match self.current.as_mut() {
            Some(bell) => {
                if !bell.rung().await {
                    crate::debug!("the wake-up channel broke");
                    self.current = None;
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// Waits in `line` (named `shown` in messages) for a slot of `request.name`.
pub async fn wait_in_line<L: Line + ?Sized>(
    line: &L,
    shown: &str,
    request: &AcquireRequest,
    mut cancel: Cancel<'_>,
) -> Result<Acquired, BackendError> {
    let ticket = Ticket {
        request,
        owner: owner_id()?,
        heartbeat: if request.waits() {
            HEARTBEAT
        } else {
            Duration::ZERO
        },
    };
    let mut bell = Bell::default();
    let mut nap = Nap::default();
    let mut outage = Outage::for_request(request);
    loop {
        // Taken just before the winning request is sent: the lease is counted from here.
        let sent_at = BootInstant::now();
        let attempt = tokio::select! {
            attempt = line.attempt(&ticket) => attempt,
            () = cancel.as_mut() => return give_up(line, &ticket, Acquired::Cancelled).await,
        };
        let soonest_expiry = match attempt {
            Ok(Attempt::Taken(taken)) => {
                return Ok(Acquired::Held(line.lease(&ticket, taken, sent_at)));
            }
            Ok(Attempt::Waiting {
                superseded_by: Some(newer),
                ..
            }) => return give_up(line, &ticket, Acquired::Superseded(newer)).await,
            Ok(Attempt::Waiting { soonest_expiry, .. }) => {
                outage.ok();
                soonest_expiry
            }
            Err(e) => match outage.failed(e, sent_at, "check the lock") {
                Ok(()) => None,
                Err(e) => {
                    if outage.answered() {
                        leave(line, &ticket).await;
                    }
                    return Err(e);
                }
            },
        };
        if request.expired() {
            return match ticket.queues() {
                true => give_up(line, &ticket, Acquired::Busy).await,
                false => Ok(Acquired::Busy),
            };
        }
        if bell.due() {
            bell.last_try = Some(BootInstant::now());
            let subscribed = tokio::select! {
                subscribed = line.doorbell(&ticket) => subscribed,
                () = cancel.as_mut() => return give_up(line, &ticket, Acquired::Cancelled).await,
            };
            match subscribed {
                Ok(doorbell) => {
                    bell.current = Some(doorbell);
                    // A release may have come between the try and the subscription.
                    continue;
                }
                Err(e) => crate::warn!(
                    "cannot subscribe to releases ({e}); checking every {}",
                    crate::messages::duration(SAFETY_RECHECK)
                ),
            }
        }
        let wake_at = recheck_at(soonest_expiry, request.deadline);
        tokio::select! {
            napped = nap.until(bell.rung(), wake_at, shown) => if let Err(e) = napped {
                leave(line, &ticket).await;
                return Err(e);
            },
            () = cancel.as_mut() => return give_up(line, &ticket, Acquired::Cancelled).await,
        }
    }
}

/// Leaves the line, then ends the wait with `outcome`.
async fn give_up<L: Line + ?Sized>(
    line: &L,
    ticket: &Ticket<'_>,
    outcome: Acquired,
) -> Result<Acquired, BackendError> {
    leave(line, ticket).await;
    Ok(outcome)
}

/// Leaves the line within [`LEAVE_TIMEOUT`]; on failure the place lapses by itself.
async fn leave<L: Line + ?Sized>(line: &L, ticket: &Ticket<'_>) {
    match tokio::time::timeout(LEAVE_TIMEOUT, line.leave(ticket)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => crate::debug!("cannot leave the line ({e}); the place lapses by itself"),
        Err(_) => crate::debug!("leaving the line took too long; the place lapses by itself"),
    }
}
