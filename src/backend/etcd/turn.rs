//! Waiting for one's turn in the line: the loop that follows a [`Plan`] — reading the line ahead
//! when it must, checking a hinted key, and otherwise sleeping on exactly the watches that can
//! make this waiter a holder (see [`super::plan`]) — until the plan says "hold", the deadline
//! passes, the lease is lost, or a newer `--supersede` waiter takes its place.
//!
//! Every key is watched before it is relied on: a key read before its watch was created is read
//! again after (one request for all such keys, with this waiter's own key and the `--supersede`
//! marker when they are new too), and a key found gone then counts as deleted. A read of the line
//! made after a key's watch exists proves it. While waiting, the waiter keeps the hints in its own
//! record up to date, so that the waiter behind it can follow it if it leaves.
//!
//! Failures are ridden out like the shared engine's: retried after a pause until they have gone on
//! for the outage limit, the lease kept alive meanwhile.

use std::collections::HashSet;
use std::sync::Arc;

use super::keys::Keys;
use super::line;
use super::link::Link;
use super::plan::{Next, Plan};
use super::record::{Hints, Record};
use super::waiting::{Keeper, Wake, wait_turn};
use super::watch::{Event, Watcher};
use crate::backend::waiting::policy::Outage;
use crate::backend::{AcquireRequest, BackendError, HolderInfo};
use crate::clock::{BootInstant, BootTimer};

/// How a wait for one's turn ended.
pub enum Turned {
    Hold,
    /// Not a holder by the deadline.
    Busy,
    /// The lease expired (or was revoked) while in line.
    LeaseLost,
    /// A newer `--supersede` waiter joined.
    Superseded(HolderInfo),
}

/// One waiter in line.
pub struct Turn<'a> {
    pub link: &'a Arc<Link>,
    pub keys: &'a Keys,
    pub request: &'a AcquireRequest,
    pub lease: i64,
    /// Its key's create revision.
    pub token: i64,
    pub record: &'a Record,
    pub plan: Plan,
    /// Whether it slept at least once (it did not hold at once).
    pub waited: bool,
    /// How many were ahead when it joined, for the first message.
    pub ahead_at_join: u64,
}

/// How a sleep ended.
enum Slept {
    Over(Turned),
    /// Look at the plan again.
    Again,
    /// Open the watcher again, then look.
    Rewatch,
}

/// What the loop keeps between two steps.
struct State {
    watcher: Option<Watcher>,
    /// Watched keys (ids) read after their watch was created.
    verified: HashSet<String>,
    /// Whether its own key and the marker were read since the watcher was opened.
    own_checked: bool,
    marker_checked: bool,
    /// The hints its record holds.
    noted: Hints,
    timer: Option<BootTimer>,
}

impl Turn<'_> {
    /// Waits until the plan says "hold", keeping the lease alive with `keeper`.
    pub async fn wait(&mut self, keeper: &mut Keeper) -> Result<Turned, BackendError> {
        let mut state = State {
            watcher: None,
            verified: HashSet::new(),
            own_checked: false,
            marker_checked: false,
            noted: Hints::default(),
            timer: None,
        };
        let mut outage = Outage::in_line();
        let mut pause = false;
        loop {
            let next = self.plan.next();
            if next == Next::Hold {
                return Ok(Turned::Hold);
            }
            // A read or a check still settles whether it may hold at once (`--no-wait` too).
            if next == Next::Wait && self.request.expired() {
                return Ok(Turned::Busy);
            }
            let stepped = match pause {
                true => {
                    pause = false;
                    match self.sleep(None, keeper, &mut state.timer).await {
                        Ok(Slept::Over(turned)) => Ok(Some(turned)),
                        Ok(Slept::Again | Slept::Rewatch) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
                false => self.step(next, &mut state, keeper).await,
            };
            match stepped {
                Ok(Some(turned)) => return Ok(turned),
                Ok(None) => outage.ok(),
                Err(e) => {
                    outage.failed(e, BootInstant::now(), "watch the line")?;
                    state.watcher = None;
                    pause = true;
                }
            }
        }
    }

    /// One step towards the plan's `next`; `Some` when the wait is over.
    async fn step(
        &mut self,
        next: Next,
        state: &mut State,
        keeper: &mut Keeper,
    ) -> Result<Option<Turned>, BackendError> {
        if !self.request.waits() {
            // Trying once: a read settles it, with nothing to watch afterwards.
            return self.settle(next).await;
        }
        let own = self.keys.holder(self.lease).into_bytes();
        if state.watcher.is_none() {
            let mut watcher = Watcher::open(self.link, &own).await?;
            if self.request.supersede {
                watcher
                    .watch_marker(self.keys.supersede().as_bytes(), self.token)
                    .await?;
            }
            state.watcher = Some(watcher);
            state.verified.clear();
            state.own_checked = false;
            state.marker_checked = !self.request.supersede;
        }
        let watcher = state.watcher.as_mut().expect("opened above");
        match next {
            Next::Hold => Ok(Some(Turned::Hold)),
            Next::Look => {
                let depth = self.plan.depth();
                let (ahead, more) = line::look(self.link, self.keys, self.token, depth).await?;
                // Keys watched before this read are proven by it.
                let proven: HashSet<String> = ahead
                    .iter()
                    .filter(|a| watcher.watches(self.keys.holder_by_id(&a.id).as_bytes()))
                    .map(|a| a.id.clone())
                    .collect();
                self.plan.looked(ahead, more);
                state.verified = proven;
                Ok(None)
            }
            Next::Check(id) => {
                let key = self.keys.holder_by_id(&id);
                watcher.watch(&[key.clone().into_bytes()]).await?;
                let found = line::read(self.link, &[key]).await?;
                let found = found.into_iter().next().flatten();
                if found.is_some() {
                    state.verified.insert(id.clone());
                }
                let found = found.map(|kv| line::ahead_of(self.keys, &kv));
                self.plan.checked(&id, found);
                Ok(None)
            }
            Next::Wait => self.wait_step(state, keeper).await,
        }
    }

    /// [`Turn::step`] for a contender that tries once: reads without watching.
    async fn settle(&mut self, next: Next) -> Result<Option<Turned>, BackendError> {
        match next {
            Next::Hold => Ok(Some(Turned::Hold)),
            Next::Wait => Ok(Some(Turned::Busy)),
            Next::Look => {
                let depth = self.plan.depth();
                let (ahead, more) = line::look(self.link, self.keys, self.token, depth).await?;
                self.plan.looked(ahead, more);
                Ok(None)
            }
            Next::Check(id) => {
                let found = line::read(self.link, &[self.keys.holder_by_id(&id)]).await?;
                let found = found.into_iter().next().flatten();
                self.plan
                    .checked(&id, found.map(|kv| line::ahead_of(self.keys, &kv)));
                Ok(None)
            }
        }
    }

    /// Watches what the plan says, proves it, notes the hints, then sleeps.
    async fn wait_step(
        &mut self,
        state: &mut State,
        keeper: &mut Keeper,
    ) -> Result<Option<Turned>, BackendError> {
        let watcher = state.watcher.as_mut().expect("opened by step");
        let wanted: Vec<Vec<u8>> = self
            .plan
            .watched()
            .map(|id| self.keys.holder_by_id(id).into_bytes())
            .collect();
        watcher.watch(&wanted).await?;
        let own = self.keys.holder(self.lease).into_bytes();
        let stale: Vec<Vec<u8>> = watcher
            .watched()
            .filter(|key| *key != own.as_slice() && !wanted.iter().any(|w| w == key))
            .map(<[u8]>::to_vec)
            .collect();
        for key in stale {
            watcher.unwatch(&key).await;
        }
        if let Some(turned) = self.prove(state).await? {
            return Ok(Some(turned));
        }
        if self.plan.next() != Next::Wait {
            return Ok(None);
        }
        let hints = self.plan.hints();
        if hints != state.noted {
            let record = self.record.with_hints(&hints);
            if !line::note(self.link, self.keys, self.lease, self.token, &record).await? {
                return Ok(Some(Turned::LeaseLost));
            }
            state.noted = hints;
        }
        if !self.waited {
            crate::info!(
                "waiting for {} ({} ahead)",
                self.request.name,
                self.ahead_at_join
            );
            self.waited = true;
        }
        let watcher = state.watcher.as_mut().expect("opened by step");
        Ok(
            match self.sleep(Some(watcher), keeper, &mut state.timer).await? {
                Slept::Over(turned) => Some(turned),
                Slept::Again => None,
                Slept::Rewatch => {
                    state.watcher = None;
                    None
                }
            },
        )
    }

    /// Reads the watched keys not read since their watch was created (and the waiter's own key
    /// and the marker, when not read since the watcher opened); a key found gone counts as
    /// deleted. `Some` when the wait is over.
    async fn prove(&mut self, state: &mut State) -> Result<Option<Turned>, BackendError> {
        let unproven: Vec<String> = self
            .plan
            .watched()
            .filter(|id| !state.verified.contains(*id))
            .map(str::to_owned)
            .collect();
        let mut wanted: Vec<String> = unproven
            .iter()
            .map(|id| self.keys.holder_by_id(id))
            .collect();
        if !state.own_checked {
            wanted.push(self.keys.holder(self.lease));
        }
        if !state.marker_checked {
            wanted.push(self.keys.supersede());
        }
        if wanted.is_empty() {
            return Ok(None);
        }
        let mut found = line::read(self.link, &wanted).await?.into_iter();
        for id in unproven {
            match found.next().flatten() {
                Some(_) => {
                    state.verified.insert(id);
                }
                None => {
                    self.plan.deleted(&id, None);
                }
            }
        }
        if !state.own_checked {
            let mine = found.next().flatten();
            if mine.is_none_or(|kv| kv.create_revision() != self.token) {
                return Ok(Some(Turned::LeaseLost));
            }
            state.own_checked = true;
        }
        if !state.marker_checked {
            if let Some(kv) = found.next().flatten() {
                let (revision, newer) = line::marker_of(&kv);
                if revision > self.token {
                    return Ok(Some(Turned::Superseded(newer)));
                }
            }
            state.marker_checked = true;
        }
        Ok(None)
    }

    /// Sleeps until the watcher reports (without one: a pause), the deadline, or a keep-alive
    /// that needs a look, and takes in what woke it. `Some` when the wait is over.
    async fn sleep(
        &mut self,
        watcher: Option<&mut Watcher>,
        keeper: &mut Keeper,
        timer: &mut Option<BootTimer>,
    ) -> Result<Slept, BackendError> {
        let timer = timer.get_or_insert_with(BootTimer::for_waiting);
        let wake = wait_turn(self.link, watcher, keeper, timer, self.request.deadline).await?;
        Ok(match wake {
            Wake::Watched(Event::Deleted { key, last }) => {
                if key == self.keys.holder(self.lease).as_bytes() {
                    return Ok(Slept::Over(Turned::LeaseLost));
                }
                if let Some(id) = self.keys.id_of(&key) {
                    let hints = last.as_deref().and_then(Record::decode).map(|r| r.hints());
                    self.plan.deleted(id, hints);
                }
                Slept::Again
            }
            Wake::Watched(Event::Superseded(newer)) => Slept::Over(Turned::Superseded(newer)),
            // The stream or the member may be gone: watch and read again (on another member).
            Wake::Watched(Event::Broken) | Wake::Look => Slept::Rewatch,
            Wake::Deadline => Slept::Over(Turned::Busy),
            Wake::LeaseLost => Slept::Over(Turned::LeaseLost),
        })
    }
}
