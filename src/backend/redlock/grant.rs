//! One try to become a holder on a quorum of masters (Redlock's acquisition): the acquire script
//! goes to every master at once, each request with its own deadline; the try wins when a quorum
//! granted the same slot in this round and the time it took leaves the lease well inside its TTL
//! ([`timing::well_inside`]). It then writes the fencing token back ([`fence`], which also takes
//! the winner out of the line on the masters that did not grant it) before it counts as taken. A
//! round that wins no quorum backs out everywhere (the retreat script), keeping the caller's place
//! in line, so that holds no quorum backs never block anyone.
//!
//! A waiter's place is the same on every master: its ticket is the largest that the masters
//! proposed when it joined, passed on every later try ([`Place`]), so the head of the line is the
//! head on every master and its turn comes with a quorum that agrees. The slot to prefer is the one
//! most masters granted last time, so that the grants of a semaphore converge on one slot.

use std::collections::BTreeMap;
use std::time::Duration;

use super::fence;
use super::masters::{Masters, STRAGGLERS};
use super::scripts::{ACQUIRE, Call, RETREAT, line_keys};
use super::timing::{self, millis};
use crate::backend::redis::keys::Keys;
use crate::backend::redis::line::acquire_call;
use crate::backend::waiting::line::{Attempt, Taken, Ticket};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, HolderInfo, Mode};
use crate::clock::BootInstant;

/// How long a waiter's first round, once decided, still takes the other masters' answers.
const STRAGGLER_GRACE: Duration = Duration::from_millis(5);

/// A waiter's place in line, as agreed across the masters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The largest ticket any master proposed for it (0 before it joined).
    pub ticket: u64,
    /// The slot most masters granted it in its last round that won none.
    pub slot: Option<u32>,
}

/// How a try ended.
#[derive(Debug)]
pub struct Tried {
    pub attempt: Attempt,
    /// Grants came, but no quorum of them: contenders split the masters between them.
    pub split: bool,
}

/// One master's answer to the acquire script: granted (0/1), token, slot or shortest lease left
/// (ms, -1 when none), superseded (0/1), the newer waiter's record, ticket.
type Reply = (i64, i64, i64, i64, String, i64);

/// What the answers of one round add up to.
#[derive(Default)]
struct Tally {
    /// Grants per slot.
    granted: BTreeMap<u32, usize>,
    /// The largest token proposal of the round.
    highest: u64,
    ticket: u64,
    soonest: Option<Duration>,
    superseded_by: Option<String>,
    answered: usize,
    failures: Vec<(usize, BackendError)>,
}

impl Tally {
    fn add(&mut self, master: usize, answer: Result<Reply, BackendError>, endpoint: &str) {
        let (taken, token, slot, superseded, by, ticket) = match answer {
            Ok(reply) => reply,
            Err(e) => return self.failures.push((master, e)),
        };
        let (Ok(token), Ok(ticket)) = (u64::try_from(token), u64::try_from(ticket)) else {
            return self.failures.push((master, unexpected(endpoint)));
        };
        self.answered += 1;
        self.ticket = self.ticket.max(ticket);
        if taken == 1 {
            let Ok(slot) = u32::try_from(slot) else {
                return self.failures.push((master, unexpected(endpoint)));
            };
            *self.granted.entry(slot).or_default() += 1;
            self.highest = self.highest.max(token);
            return;
        }
        // `slot` is then the shortest lease left on that master, in ms, or -1.
        if let Ok(left) = u64::try_from(slot) {
            let left = Duration::from_millis(left);
            self.soonest = Some(self.soonest.map_or(left, |s| s.min(left)));
        }
        if superseded == 1 && self.superseded_by.is_none() {
            self.superseded_by = Some(by);
        }
    }

    fn grants(&self) -> usize {
        self.granted.values().sum()
    }

    /// The slot granted most often (the lowest among equals).
    fn best(&self) -> Option<(u32, usize)> {
        self.granted
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(slot, count)| (*slot, *count))
    }

    /// The slot a quorum granted, if one did.
    fn winner(&self, quorum: usize) -> Option<u32> {
        self.best()
            .filter(|(_, count)| *count >= quorum)
            .map(|(slot, _)| slot)
    }

    /// Whether the answers still to come cannot change the outcome. A round no grant can win
    /// still needs a quorum of answers (or too few masters left to give them): with fewer, "wait
    /// your turn" and "no quorum answered" are not yet told apart.
    fn decided(&self, quorum: usize, outstanding: usize) -> bool {
        let best = self.best().map_or(0, |(_, count)| count);
        let answers_known = self.answered >= quorum || self.answered + outstanding < quorum;
        best >= quorum
            || (best + outstanding < quorum && answers_known)
            || self.superseded_by.is_some()
    }
}

fn unexpected(endpoint: &str) -> BackendError {
    BackendError::Failed {
        endpoint: endpoint.to_owned(),
        reason: "unexpected reply to the acquire script".into(),
    }
}

fn mode_arg(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "x",
        Mode::Shared => "s",
    }
}

/// One try for `ticket` at `place` (updated: the ticket agreed, the slot to prefer next).
pub async fn attempt(
    masters: &Masters,
    ticket: &Ticket<'_>,
    place: &mut Place,
) -> Result<Tried, BackendError> {
    let request = ticket.request;
    let keys = Keys::new(&request.name);
    let limit = renew_timeout(request.ttl);
    let call = acquire_call(&ACQUIRE, ticket)
        .arg(place.ticket)
        .arg(place.slot.map_or(-1, i64::from));
    let sent = BootInstant::now();
    let mut round = masters.call::<Reply>(&call, limit);
    let mut tally = Tally::default();
    while let Some((i, answer)) = round.next().await {
        tally.add(i, answer, masters.endpoint(i));
        if tally.decided(masters.quorum(), round.outstanding()) {
            break;
        }
    }
    // A waiter that just joined the line takes the tickets of the masters that answer at once
    // too, though the round is decided, so that its ticket is the largest of all from the start
    // (a slow master is not waited for). A won round does not wait: a later proposal above its
    // token only makes that master refuse the write-back, which a quorum of others accepts.
    if ticket.queues() && place.ticket == 0 && tally.winner(masters.quorum()).is_none() {
        while let Some((i, answer)) = round.next_within(STRAGGLER_GRACE).await {
            tally.add(i, answer, masters.endpoint(i));
        }
    }
    place.ticket = place.ticket.max(tally.ticket);
    let waiting = |soonest_expiry, superseded_by| Tried {
        attempt: Attempt::Waiting {
            soonest_expiry,
            superseded_by,
        },
        split: false,
    };

    if let Some(slot) = tally.winner(masters.quorum()) {
        if !timing::well_inside(request.ttl, sent) {
            crate::debug!(
                "a quorum granted the lease, but only after {} ms: backing out and trying again",
                BootInstant::now().saturating_since(sent).as_millis()
            );
            retreat(masters, ticket, &keys, place).await;
            return Ok(waiting(Some(Duration::ZERO), None));
        }
        let fenced = fence::write_back(
            masters,
            &keys,
            fence::Hold {
                owner: &ticket.owner,
                mode: request.mode,
                slot,
                limit: request.limit,
            },
            tally.highest,
            limit,
        )
        .await;
        return match fenced {
            Ok(token) => Ok(Tried {
                attempt: Attempt::Taken(Taken {
                    token,
                    slot,
                    ttl: Duration::from_millis(millis(request.ttl)),
                }),
                split: false,
            }),
            Err(e) => {
                retreat(masters, ticket, &keys, place).await;
                Err(e)
            }
        };
    }
    if let Some(by) = tally.superseded_by {
        // The engine leaves the line everywhere (which drops any hold of this round too).
        return Ok(waiting(
            tally.soonest,
            Some(HolderInfo::decode(by.as_bytes())),
        ));
    }
    let grants = tally.grants();
    if tally.answered < masters.quorum() {
        if grants > 0 {
            retreat(masters, ticket, &keys, place).await;
        }
        return Err(masters.no_quorum(tally.failures));
    }
    for (_, e) in &tally.failures {
        crate::debug!("{e}");
    }
    if grants > 0 {
        place.slot = tally.best().map(|(slot, _)| slot);
        retreat(masters, ticket, &keys, place).await;
    }
    Ok(Tried {
        split: grants > 0,
        ..waiting(tally.soonest, None)
    })
}

/// Backs out of a round everywhere: drops this caller's holds, keeps (or takes) its place in line
/// at its agreed ticket. Waits for a quorum of masters, and then a little for the others; a master
/// that does not answer keeps a hold of this caller's until it expires, which blocks no quorum.
async fn retreat(masters: &Masters, ticket: &Ticket<'_>, keys: &Keys, place: &mut Place) {
    let request = ticket.request;
    let call = Call::new(&RETREAT)
        .keys(line_keys(keys))
        .keys(keys.slots(request.limit))
        .arg(&ticket.owner)
        .arg(ticket.holder_json())
        .arg(ticket.heartbeat.as_millis() as u64)
        .arg(mode_arg(request.mode))
        .arg(if request.supersede { "1" } else { "0" })
        .arg(keys.wake_prefix())
        .arg(place.ticket);
    let round = masters.call::<i64>(&call, renew_timeout(request.ttl));
    match masters.most_of(round, STRAGGLERS).await {
        Ok(tickets) => {
            for (_, t) in tickets {
                place.ticket = place.ticket.max(u64::try_from(t).unwrap_or(0));
            }
        }
        Err(e) => crate::debug!("cannot back out of a round that won no quorum ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(slot: i64, token: i64) -> Result<Reply, BackendError> {
        Ok((1, token, slot, 0, String::new(), 0))
    }

    fn refused(left: i64, ticket: i64) -> Result<Reply, BackendError> {
        Ok((0, 0, left, 0, String::new(), ticket))
    }

    #[test]
    fn a_quorum_of_one_slot_wins_and_the_highest_proposal_is_the_token() {
        let mut tally = Tally::default();
        tally.add(0, granted(0, 10), "a");
        assert!(!tally.decided(2, 2));
        tally.add(1, granted(0, 12), "b");
        assert!(tally.decided(2, 1));
        assert_eq!(tally.winner(2), Some(0));
        assert_eq!(tally.highest, 12);
    }

    #[test]
    fn grants_of_different_slots_are_no_quorum_and_the_most_granted_is_preferred() {
        let mut tally = Tally::default();
        tally.add(0, granted(1, 10), "a");
        tally.add(1, granted(0, 11), "b");
        tally.add(2, granted(1, 12), "c");
        assert_eq!(tally.winner(3), None);
        assert_eq!(tally.best(), Some((1, 2)));
        let mut tally = Tally::default();
        tally.add(0, granted(2, 10), "a");
        tally.add(1, granted(0, 11), "b");
        assert_eq!(tally.best(), Some((0, 1)));
    }

    #[test]
    fn refusals_decide_early_and_keep_the_largest_ticket_and_soonest_expiry() {
        let mut tally = Tally::default();
        tally.add(0, refused(500, 7), "a");
        assert!(!tally.decided(2, 2));
        tally.add(1, refused(200, 9), "b");
        assert!(tally.decided(2, 1));
        assert_eq!(tally.winner(2), None);
        assert_eq!(tally.ticket, 9);
        assert_eq!(tally.soonest, Some(Duration::from_millis(200)));
        tally.add(2, Err(BackendError::Unsupported("down".into())), "c");
        assert_eq!((tally.answered, tally.failures.len()), (2, 1));
    }

    #[test]
    fn a_failure_and_a_refusal_wait_for_the_last_master_to_tell_waiting_from_no_quorum() {
        let mut tally = Tally::default();
        tally.add(0, Err(BackendError::Unsupported("down".into())), "a");
        tally.add(1, refused(500, 7), "b");
        assert!(
            !tally.decided(2, 1),
            "one answer of three cannot say a quorum answered"
        );
        tally.add(2, refused(300, 8), "c");
        assert!(tally.decided(2, 0));
        assert_eq!(tally.answered, 2);
        let mut tally = Tally::default();
        tally.add(0, Err(BackendError::Unsupported("down".into())), "a");
        tally.add(1, Err(BackendError::Unsupported("down".into())), "b");
        assert!(
            tally.decided(2, 1),
            "two failures of three leave no quorum to wait for"
        );
    }
}
