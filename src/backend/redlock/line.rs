//! [`Redlock`]: the `redlock://` backend's line of waiters, kept on every master and ordered alike
//! on all of them: one try is a round of the acquire script on every master ([`grant`]); leaving
//! the line and the doorbell are the Redis backend's, on every master ([`Bells`]). The waiting
//! itself is the shared engine's.
//!
//! A contender that only tries once never stands in line, so contenders that split the masters
//! between them would all fail on a free name; such a try is made again, twice at most, after a
//! short random pause.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::bells::Bells;
use super::grant::{self, Place, Tried};
use super::lease::RedlockLease;
use super::masters::{Masters, STRAGGLERS};
use super::timing::drift;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::line::leave_call;
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::waiting::policy::{LEAVE_TIMEOUT, random_bytes};
use crate::backend::{BackendError, Inspect, Lease};
use crate::clock::BootInstant;

/// How many more times a single try is made when contenders split the masters.
const SPLIT_RETRIES: usize = 2;

/// N independent Redis masters, as a line of waiters.
pub struct Redlock {
    masters: Arc<Masters>,
    /// Each contender's place in line, by owner id.
    places: Mutex<HashMap<String, Place>>,
}

impl Redlock {
    pub fn new(masters: Masters) -> Self {
        Redlock {
            masters: Arc::new(masters),
            places: Mutex::new(HashMap::new()),
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, HashMap<String, Place>> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pause of 2 to 20 ms, different for each contender.
async fn jitter() {
    let byte = random_bytes::<1>().map_or(0, |b| b[0]);
    tokio::time::sleep(Duration::from_millis(2 + u64::from(byte) % 19)).await;
}

#[async_trait]
impl Line for Redlock {
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let mut place = self
            .places()
            .get(&ticket.owner)
            .copied()
            .unwrap_or_default();
        let mut tried = grant::attempt(&self.masters, ticket, &mut place).await;
        if !ticket.queues() {
            for _ in 0..SPLIT_RETRIES {
                if !matches!(tried, Ok(Tried { split: true, .. })) {
                    break;
                }
                jitter().await;
                tried = grant::attempt(&self.masters, ticket, &mut place).await;
            }
        }
        self.places().insert(ticket.owner.clone(), place);
        tried.map(|tried| tried.attempt)
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        self.places().remove(&ticket.owner);
        let round = self.masters.call::<i64>(&leave_call(ticket), LEAVE_TIMEOUT);
        self.masters.most_of(round, STRAGGLERS).await.map(drop)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let channel = Keys::new(&ticket.request.name).wake(&ticket.owner);
        Ok(Box::new(Bells::open(&self.masters, &channel).await?))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        self.places().remove(&ticket.owner);
        Box::new(RedlockLease::new(
            Arc::clone(&self.masters),
            Keys::new(&ticket.request.name),
            ticket.request.mode,
            ticket.owner.clone(),
            // The masters' clocks may run ahead of lockrun's by the drift: the lease is counted as
            // if asked for that much earlier, so that it is known to last its validity (TTL −
            // drift) and the command is told the TTL the masters grant.
            taken.grant(sent_at.saturating_sub(drift(taken.ttl))),
        ))
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.masters
    }
}
