//! [`Dynamo`]: the DynamoDB backend's line for the shared waiting engine. One try ([`Line::attempt`])
//! is: the blind first claim (one write: slot 0 or a shared hold, with nobody in line) — the
//! whole acquisition when the name is free; after that, a read of the lock item, and then, as the
//! item says, a claim in turn (taking over holders this waiter saw unchanged for a whole lease),
//! joining the line, a heartbeat of the waiter's ticket, giving up to a newer `--supersede`
//! waiter, or skipping waiters that died just ahead.
//!
//! DynamoDB cannot notify, so the doorbell is a timer ([`Poll`]): the head of the line and the
//! few just behind it (and everyone, while nobody holds and the line does not move: dead waiters
//! at the head) look again every [`HEAD_RECHECK`] (a release is seen that soon), the others
//! every `--renew` (TTL/3) or every second, whichever is shorter, jittered so that they do not
//! come in step. A handoff costs the server O(1) work: nobody is woken, and only the front of
//! the line looks often.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::claim::{self, Contender, Plan, Turn};
use super::item::{Seat, TicketItem};
use super::lease::{self, DynamoLease};
use super::link::{Failure, Link};
use super::queue::{self, BEAT_EVERY, Place};
use super::sightings::Sightings;
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::waiting::policy::{HEARTBEAT, SAFETY_RECHECK};
use crate::backend::{BackendError, HolderInfo, Inspect, Lease};
use crate::clock::BootInstant;
use crate::name::LockName;

/// How often the head of the line (and the few behind it) look again.
pub const HEAD_RECHECK: Duration = Duration::from_millis(100);
/// How many places behind the head also look every [`HEAD_RECHECK`]: they are next to claim (one
/// at a time: only the head may), so a run of readers or a freed semaphore fills up quickly.
const FAST_BEHIND: u64 = 2;
/// How many places behind the head watch the waiters ahead for one that died in line.
const WATCHERS: u64 = 2;
/// How often they read the tickets ahead.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// The most tickets ahead one watch reads (a longer run of dead waiters is skipped in steps).
const WATCH_WINDOW: u64 = 16;

/// A DynamoDB table, as a line of waiters.
pub struct Dynamo {
    link: Arc<Link>,
    /// Each acquisition's state between its tries, by owner id.
    waits: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Waiting>>>>,
}

/// One acquisition's state between its tries.
#[derive(Default)]
struct Waiting {
    /// The blind first claim was made.
    tried: bool,
    /// This waiter's ticket, once in line.
    ticket: Option<u64>,
    /// Its record as first written to the line: every beat writes the same, so that `status`
    /// shows since when it waits, not when it last beat.
    record: Option<String>,
    /// When its ticket was last written (joined or beaten), by the boot clock.
    beaten: Option<BootInstant>,
    /// The holders, as this waiter has seen them.
    holders: Sightings<Seat>,
    /// The waiters ahead, for the ones just behind the head.
    ahead: Sightings<u64>,
    watched: Option<BootInstant>,
    /// A seat a claim may have taken although its answer never came.
    unanswered: Option<Seat>,
    /// The ticket a claim in turn used: out of the line, its item is deleted on release.
    served: Option<u64>,
    /// Places ahead of this waiter at the last look, for the doorbell.
    place: Arc<AtomicU64>,
}

impl Dynamo {
    pub fn new(link: Link) -> Self {
        Dynamo {
            link: Arc::new(link),
            waits: Mutex::new(HashMap::new()),
        }
    }

    fn waits(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<Waiting>>>> {
        self.waits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self, owner: &str) -> Arc<tokio::sync::Mutex<Waiting>> {
        let mut waits = self.waits();
        let state = waits.entry(owner.to_owned()).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(Waiting {
                place: Arc::new(AtomicU64::new(u64::MAX)),
                ..Waiting::default()
            }))
        });
        Arc::clone(state)
    }

    /// One try, its failures unsorted.
    async fn step(&self, w: &mut Waiting, ticket: &Ticket<'_>) -> Result<Attempt, Failure> {
        let request = ticket.request;
        let c = contender(ticket);
        let link = &*self.link;
        if !w.tried {
            w.tried = true;
            if let Some(token) = self
                .claim(w, &c, &claim::first(&c), Turn::EmptyLine)
                .await?
            {
                return Ok(taken(token, Seat::new(c.mode, 0, c.owner), &c));
            }
        }
        let lock = queue::lock_item(link, &request.name).await?;
        let now = BootInstant::now();
        w.holders.observe(
            lock.holders
                .iter()
                .map(|h| (h.seat.clone(), claim::version(h))),
            now,
        );
        // A claim of this run's whose answer was lost: made sure of with a renewal, whose
        // sending starts the lease.
        if let Some(mine) = lock.held_by(&ticket.owner) {
            let seat = mine.seat.clone();
            if lease::renew(
                link,
                &request.name,
                &seat,
                &ticket.owner,
                super::link::REQUEST_TIMEOUT,
            )
            .await?
            {
                w.unanswered = None;
                self.out_of_line(w);
                return Ok(taken(mine.token, seat, &c));
            }
        }
        let record = w.record.get_or_insert_with(|| c.record.clone()).clone();
        let place = Place {
            name: &request.name,
            owner: &ticket.owner,
            record: &record,
            mode: request.mode,
            supersede: request.supersede,
        };
        let Some(mine) = w.ticket else {
            // Not in line: take a seat if nobody is, or (trying once) if nobody in line beats.
            let turn = if lock.line_empty() {
                Some(Turn::EmptyLine)
            } else if !ticket.queues()
                && queue::live_waiters(link, &request.name, &lock)
                    .await?
                    .is_empty()
            {
                Some(Turn::AsRead {
                    serving: lock.serving,
                    next: lock.next,
                })
            } else {
                None
            };
            if let Some(turn) = turn
                && let Some(plan) = claim::plan(&lock, &c, &w.holders, now)
                && let Some(token) = self.claim(w, &c, &plan, turn).await?
            {
                return Ok(taken(token, plan.seat, &c));
            }
            if ticket.queues() {
                self.join(w, &place).await?;
            }
            return Ok(waiting(None));
        };
        if lock.serving > mine {
            crate::debug!("the place in line lapsed (ticket {mine} was skipped); joining again");
            let _ = queue::forget(link, &request.name, mine, Some(&ticket.owner)).await;
            w.ticket = None;
            self.join(w, &place).await?;
            return Ok(waiting(None));
        }
        if w.beaten
            .is_none_or(|at| BootInstant::now().saturating_since(at) >= BEAT_EVERY)
        {
            let sent = BootInstant::now();
            if !queue::beat(link, &place, mine, &claim::new_rvn()).await? {
                crate::debug!("ticket {mine} is no longer this waiter's; joining again");
                w.ticket = None;
                self.join(w, &place).await?;
                return Ok(waiting(None));
            }
            w.beaten = Some(sent);
        }
        if request.supersede
            && lock.sup > mine
            && let Some(newer) = self.newer(&request.name, lock.sup).await?
        {
            return Ok(waiting(Some(HolderInfo::decode(newer.record.as_bytes()))));
        }
        if lock.serving == mine {
            if let Some(plan) = claim::plan(&lock, &c, &w.holders, now)
                && let Some(token) = self.claim(w, &c, &plan, Turn::Ticket(mine)).await?
            {
                self.out_of_line(w);
                // The claim moved the head on, maybe onto waiters that already left.
                let _ = queue::skip_left(link, &request.name, mine + 1).await;
                return Ok(taken(token, plan.seat, &c));
            }
            w.place.store(0, Ordering::Relaxed);
            return Ok(waiting(None));
        }
        let behind = mine - lock.serving;
        // Further back, a line that does not move while nobody holds means a run of dead waiters
        // longer than the watchers: watch too, and look again as often as the head.
        let stalled =
            behind > WATCHERS && lock.holders.iter().all(|h| claim::dead(h, &w.holders, now));
        if behind <= WATCHERS || stalled {
            self.watch_ahead(w, &request.name, lock.serving, mine)
                .await?;
        }
        let place = if stalled { 0 } else { behind };
        w.place.store(place, Ordering::Relaxed);
        Ok(waiting(None))
    }

    /// Sends a claim, remembering its seat until the answer says whether it was taken.
    async fn claim(
        &self,
        w: &mut Waiting,
        c: &Contender<'_>,
        plan: &Plan,
        turn: Turn,
    ) -> Result<Option<u64>, Failure> {
        w.unanswered = Some(plan.seat.clone());
        let won = claim::claim(&self.link, c, plan, turn).await?;
        w.unanswered = None;
        Ok(won)
    }

    /// Joins the line at its end.
    async fn join(&self, w: &mut Waiting, place: &Place<'_>) -> Result<(), Failure> {
        let sent = BootInstant::now();
        let (ticket, lock) = queue::join(&self.link, place).await?;
        w.ticket = Some(ticket);
        w.beaten = Some(sent);
        w.ahead = Sightings::default();
        w.place
            .store(ticket.saturating_sub(lock.serving), Ordering::Relaxed);
        Ok(())
    }

    /// After a claim in turn: the ticket is out of the line (the claim moved the head on); its
    /// item goes when the lease is released.
    fn out_of_line(&self, w: &mut Waiting) {
        w.served = w.ticket.take();
    }

    /// The newest `--supersede` waiter's ticket, when it is in line.
    async fn newer(&self, name: &LockName, ticket: u64) -> Result<Option<TicketItem>, Failure> {
        let found = queue::tickets(&self.link, name, ticket..=ticket).await?;
        Ok(found
            .into_iter()
            .find_map(|(_, t)| t)
            .filter(|t| !t.left && t.supersede))
    }

    /// Just behind the head (or further back, when the head stalls): reads the tickets ahead now
    /// and then, and skips the leading ones that left, or that stayed unchanged (or missing) for
    /// a whole heartbeat.
    async fn watch_ahead(
        &self,
        w: &mut Waiting,
        name: &LockName,
        serving: u64,
        mine: u64,
    ) -> Result<(), Failure> {
        if w.watched
            .is_some_and(|at| BootInstant::now().saturating_since(at) < WATCH_EVERY)
        {
            return Ok(());
        }
        w.watched = Some(BootInstant::now());
        let last = (mine - 1).min(serving + WATCH_WINDOW - 1);
        let ahead = queue::tickets(&self.link, name, serving..=last).await?;
        let now = BootInstant::now();
        let version = |t: &Option<TicketItem>| match t {
            None => "missing".to_owned(),
            Some(t) if t.left => "left".to_owned(),
            Some(t) => format!("{}/{}", t.owner, t.rvn),
        };
        w.ahead
            .observe(ahead.iter().map(|(n, t)| (*n, version(t))), now);
        let skip_to = ahead
            .iter()
            .find(|(n, t)| {
                let left = t.as_ref().is_some_and(|t| t.left);
                !left && !w.ahead.gone(n, &version(t), HEARTBEAT, now)
            })
            .map_or(last + 1, |(n, _)| *n);
        if skip_to > serving && queue::advance(&self.link, name, serving, skip_to).await? {
            crate::debug!("skipped {} waiter(s) gone from the line", skip_to - serving);
            for gone in serving..skip_to {
                let _ = queue::forget(&self.link, name, gone, None).await;
            }
        }
        Ok(())
    }
}

/// What a claim by `ticket` stores.
fn contender<'a>(ticket: &'a Ticket<'a>) -> Contender<'a> {
    let request = ticket.request;
    Contender {
        name: &request.name,
        owner: &ticket.owner,
        mode: request.mode,
        limit: match request.mode {
            crate::backend::Mode::Exclusive => request.limit.max(1),
            crate::backend::Mode::Shared => 1,
        },
        ttl: request.ttl.max(Duration::from_millis(1)),
        record: ticket.holder_json(),
    }
}

fn taken(token: u64, seat: Seat, c: &Contender<'_>) -> Attempt {
    Attempt::Taken(Taken {
        token,
        slot: seat.slot(),
        ttl: c.ttl,
    })
}

fn waiting(superseded_by: Option<HolderInfo>) -> Attempt {
    Attempt::Waiting {
        soonest_expiry: None,
        superseded_by,
    }
}

#[async_trait]
impl Line for Dynamo {
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let state = self.state(&ticket.owner);
        let mut w = state.lock().await;
        self.step(&mut w, ticket)
            .await
            .map_err(|f| self.link.error(f))
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        let Some(state) = self.waits().remove(&ticket.owner) else {
            return Ok(());
        };
        let w = state.lock().await;
        let name = &ticket.request.name;
        let gone = async {
            if let Some(seat) = &w.unanswered {
                lease::release(&self.link, name, seat, &ticket.owner).await?;
            }
            if let Some(mine) = w.ticket {
                queue::leave(&self.link, name, mine, &ticket.owner).await?;
            }
            Ok(())
        };
        gone.await.map_err(|f| self.link.error(f))
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let place = Arc::clone(&self.state(&ticket.owner).lock().await.place);
        let request = ticket.request;
        let fast_within = 1 + FAST_BEHIND;
        let seed = ticket
            .owner
            .bytes()
            .fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        Ok(Box::new(Poll {
            place,
            fast_within,
            slow: (request.ttl / 3).clamp(HEAD_RECHECK, SAFETY_RECHECK),
            rng: seed | 1,
        }))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        // The try that took the seat has returned: nothing else holds the state's lock.
        let served = self
            .waits()
            .remove(&ticket.owner)
            .and_then(|state| state.try_lock().ok().and_then(|w| w.served));
        let request = ticket.request;
        Box::new(DynamoLease {
            link: Arc::clone(&self.link),
            name: request.name.clone(),
            seat: Seat::new(request.mode, taken.slot, &ticket.owner),
            owner: ticket.owner.clone(),
            ticket: served,
            grant: taken.grant(sent_at),
        })
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}

/// A waiter's doorbell on DynamoDB: a jittered timer, quick near the head of the line.
struct Poll {
    place: Arc<AtomicU64>,
    fast_within: u64,
    slow: Duration,
    rng: u64,
}

impl Poll {
    /// A factor in `[low, high)`, from a xorshift generator.
    fn jitter(&mut self, low: f64, high: f64) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        low + (high - low) * ((self.rng >> 11) as f64 / (1u64 << 53) as f64)
    }
}

#[async_trait]
impl Doorbell for Poll {
    async fn rung(&mut self) -> bool {
        let wait = match self.place.load(Ordering::Relaxed) < self.fast_within {
            true => HEAD_RECHECK.mul_f64(self.jitter(0.75, 1.25)),
            false => self.slow.mul_f64(self.jitter(0.5, 1.0)),
        };
        tokio::time::sleep(wait).await;
        true
    }
}
