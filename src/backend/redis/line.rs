//! [`Redis`]: the Redis backend's line — one atomic try (the `acquire` script: take a free slot
//! or a shared hold when it is this caller's turn, or keep the caller in line with a fresh
//! heartbeat), leaving the line (the `leave` script, which also drops a hold a lost answer may
//! have given), and the doorbell (pub/sub on the waiter's own channel, on which only the waiters
//! whose turn it may be are woken). The waiting itself is the shared engine's.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::doorbell::Subscription;
use super::keys::{Keys, line_keys};
use super::lease::RedisLease;
use super::scripts::{self, Call};
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::{BackendError, HolderInfo, Inspect, Lease, Mode};
use crate::clock::BootInstant;

/// A Redis server, as a line of waiters.
pub struct Redis {
    link: Arc<Link>,
}

impl Redis {
    pub fn new(link: Link) -> Self {
        Redis {
            link: Arc::new(link),
        }
    }

    fn unexpected(&self, what: &str) -> BackendError {
        BackendError::Failed {
            endpoint: self.link.endpoint().to_owned(),
            reason: format!("unexpected reply to the {what} script"),
        }
    }
}

/// The lease length to ask for, in whole milliseconds (at least one).
fn ttl_ms(ttl: Duration) -> u64 {
    ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

/// An acquire script's invocation for `ticket`: the keys of the whole line and of every slot,
/// then the try itself (Redlock's acquire script takes the same first, and more after).
pub fn acquire_call(script: &'static Script, ticket: &Ticket<'_>) -> Call {
    let request = ticket.request;
    let keys = Keys::new(&request.name);
    Call::new(script)
        .keys(line_keys(&keys))
        .keys(keys.slots(request.limit))
        .arg(&ticket.owner)
        .arg(ttl_ms(request.ttl))
        .arg(request.limit)
        .arg(ticket.holder_json())
        .arg(ticket.heartbeat.as_millis() as u64)
        .arg(match request.mode {
            Mode::Exclusive => "x",
            Mode::Shared => "s",
        })
        .arg(if request.supersede { "1" } else { "0" })
        .arg(keys.wake_prefix())
}

/// The leave script's invocation for `ticket`: out of the line, and out of any slot a lost answer
/// gave it.
pub fn leave_call(ticket: &Ticket<'_>) -> Call {
    let keys = Keys::new(&ticket.request.name);
    Call::new(&scripts::LEAVE)
        .keys(line_keys(&keys))
        .keys(keys.slots(ticket.request.limit))
        .arg(&ticket.owner)
        .arg(keys.wake_prefix())
}

#[async_trait]
impl Line for Redis {
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let request = ticket.request;
        let (taken, token, slot, superseded, by): (i64, i64, i64, i64, String) =
            acquire_call(&scripts::ACQUIRE, ticket)
                .run(&self.link, REQUEST_TIMEOUT)
                .await?;
        if taken == 1 {
            return Ok(Attempt::Taken(Taken {
                token: u64::try_from(token).map_err(|_| self.unexpected("acquire"))?,
                slot: u32::try_from(slot).map_err(|_| self.unexpected("acquire"))?,
                ttl: Duration::from_millis(ttl_ms(request.ttl)),
            }));
        }
        // `slot` is then the shortest lease left, in ms, or -1.
        Ok(Attempt::Waiting {
            soonest_expiry: u64::try_from(slot).ok().map(Duration::from_millis),
            superseded_by: (superseded == 1).then(|| HolderInfo::decode(by.as_bytes())),
        })
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        leave_call(ticket)
            .run::<i64>(&self.link, REQUEST_TIMEOUT)
            .await
            .map(drop)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let channel = Keys::new(&ticket.request.name).wake(&ticket.owner);
        Ok(Box::new(Subscription::open(&self.link, &channel).await?))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        Box::new(RedisLease::new(
            Arc::clone(&self.link),
            Keys::new(&ticket.request.name),
            ticket.request.mode,
            ticket.owner.clone(),
            taken.grant(sent_at),
        ))
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}
