//! [`Redis`]: the Redis backend's line — one atomic try (the `acquire` script: take a free slot
//! when it is this caller's turn, or keep the caller in line with a fresh heartbeat), leaving the
//! line (the `leave` script, which also drops a slot a lost answer may have given), and the
//! doorbell (pub/sub on the name's channel). The waiting itself is the shared engine's.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::doorbell::Subscription;
use super::inspect;
use super::keys::Keys;
use super::lease::RedisLease;
use super::scripts;
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::{BackendError, Grant, IntervalClaim, Lease, LockStatus};
use crate::clock::BootInstant;
use crate::name::LockName;

/// A Redis server, as a line of waiters.
pub struct Redis {
    link: Arc<Link>,
    shown: String,
}

impl Redis {
    pub fn new(link: Link, shown: &str) -> Self {
        Redis {
            link: Arc::new(link),
            shown: shown.to_owned(),
        }
    }

    fn unexpected(&self, reply: &[i64]) -> BackendError {
        BackendError::Failed {
            endpoint: self.link.endpoint().to_owned(),
            reason: format!("unexpected reply {reply:?} to the acquire script"),
        }
    }
}

/// The lease length to ask for, in whole milliseconds (at least one).
fn ttl_ms(ttl: Duration) -> u64 {
    ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

#[async_trait]
impl Line for Redis {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let request = ticket.request;
        let keys = Keys::new(&request.name);
        let mut invocation = scripts::ACQUIRE.prepare_invoke();
        invocation
            .key(keys.meta())
            .key(keys.queue())
            .key(keys.beats());
        for slot in keys.slots(request.limit) {
            invocation.key(slot);
        }
        invocation
            .arg(&ticket.owner)
            .arg(ttl_ms(request.ttl))
            .arg(request.limit)
            .arg(ticket.holder_json())
            .arg(ticket.heartbeat.as_millis() as u64);
        let reply: Vec<i64> = self.link.script(REQUEST_TIMEOUT, &invocation).await?;
        match reply.as_slice() {
            [1, token, slot] => Ok(Attempt::Taken(Taken {
                token: u64::try_from(*token).map_err(|_| self.unexpected(&reply))?,
                slot: u32::try_from(*slot).map_err(|_| self.unexpected(&reply))?,
                ttl: Duration::from_millis(ttl_ms(request.ttl)),
            })),
            [0, _place, soonest] => Ok(Attempt::Waiting {
                soonest_expiry: u64::try_from(*soonest).ok().map(Duration::from_millis),
                superseded_by: None,
            }),
            _ => Err(self.unexpected(&reply)),
        }
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        let keys = Keys::new(&ticket.request.name);
        let mut invocation = scripts::LEAVE.prepare_invoke();
        invocation.key(keys.queue()).key(keys.beats());
        for slot in keys.slots(ticket.request.limit) {
            invocation.key(slot);
        }
        invocation.arg(&ticket.owner).arg(keys.channel());
        self.link
            .script::<i64>(REQUEST_TIMEOUT, &invocation)
            .await
            .map(drop)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let channel = Keys::new(&ticket.request.name).channel();
        Ok(Box::new(Subscription::open(&self.link, &channel).await?))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        let keys = Keys::new(&ticket.request.name);
        Box::new(RedisLease::new(
            Arc::clone(&self.link),
            keys.slot(taken.slot),
            keys.channel(),
            ticket.owner.clone(),
            Grant {
                token: taken.token,
                slot: taken.slot,
                ttl: Some(taken.ttl),
                sent_at,
            },
        ))
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        inspect::status(&self.link, name).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        inspect::list(&self.link, prefix).await
    }

    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        inspect::force_release(&self.link, name).await
    }

    async fn claim_interval(
        &self,
        _name: &LockName,
        _interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        Err(BackendError::Unsupported(
            "--min-interval is not available on this backend yet".into(),
        ))
    }

    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        inspect::server_time(&self.link).await.map(Some)
    }
}
