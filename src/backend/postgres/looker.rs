//! [`Looker`]: a waiter following the line without being woken — one cheap read-only statement
//! (`peek_v2`) at a time, paced by [`super::pace`], each on a task of its own so that a look cut
//! short (the engine's own re-check came first) never abandons a statement half way, which would
//! cost the connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::failure::Failure;
use super::link::{Link, REQUEST_TIMEOUT};
use super::pace::{EXACT_PLACES, Standing, View, ViewColumns, Waiter, pause};

/// Where `peek_v2`'s answer carries the waiter's view of the line.
const PEEK_VIEW: ViewColumns = ViewColumns {
    epoch: 0,
    ahead: 2,
    distance: 4,
    handoff: 6,
    since_release: 7,
};

/// What a look (or the waiter's try) showed.
pub enum Seen {
    /// A try is called for: it may be the waiter's turn, a newer `--supersede` waiter replaced
    /// it, or it is no longer in line.
    Turn,
    /// It came near its turn (only when asked).
    Near,
}

/// One look's result.
struct Peek {
    in_line: bool,
    superseded: bool,
    view: View,
}

/// A waiter that looks at the line.
pub struct Looker {
    link: Arc<Link>,
    pub waiter: Waiter,
    /// The waiter's tries, as they happen.
    tries: watch::Receiver<View>,
    /// A look in flight: kept across calls (see the module's header).
    look: Option<JoinHandle<Result<Peek, Failure>>>,
    /// The latest of the last try and the last look, and when it was seen.
    seen: View,
    seen_at: Instant,
    /// When the waiter last moved up in line, or became next.
    moved_at: Instant,
}

impl Looker {
    pub fn new(link: Arc<Link>, waiter: Waiter, mut tries: watch::Receiver<View>) -> Self {
        let seen = *tries.borrow_and_update();
        let now = Instant::now();
        Looker {
            link,
            waiter,
            tries,
            look: None,
            seen,
            seen_at: now,
            moved_at: now,
        }
    }

    /// Records what a try or a look found.
    fn see(&mut self, view: View) {
        let (old, new) = (self.seen.standing, view.standing);
        if new.next != old.next || new.ahead < old.ahead {
            self.moved_at = Instant::now();
        }
        self.seen = view;
        self.seen_at = Instant::now();
    }

    /// Where the waiter's last try found it.
    pub fn last_try(&self) -> Standing {
        self.tries.borrow().standing
    }

    /// Whether the waiter is near its turn, by what it saw last.
    pub fn near(&self) -> bool {
        self.waiter.near(&self.seen.standing)
    }

    /// Looks at the line until a try is called for, or (with `until_near = Some(still)`) the
    /// waiter is near its turn and has not moved up for `still`; `None` when a look failed (the
    /// connection broke: the engine sets the doorbell up again later).
    pub async fn follow(&mut self, until_near: Option<Duration>) -> Option<Seen> {
        loop {
            if self.look.is_none() {
                if self.tries.has_changed().unwrap_or(false) {
                    let view = *self.tries.borrow_and_update();
                    self.see(view);
                }
                if until_near.is_some_and(|still| self.moved_at.elapsed() >= still) && self.near() {
                    return Some(Seen::Near);
                }
                let pause = pause(
                    &self.seen,
                    &self.waiter,
                    self.seen_at.elapsed(),
                    self.moved_at.elapsed(),
                );
                if !self.wait(pause).await? {
                    continue;
                }
                self.look = Some(self.start_look());
            }
            let looked = match self.look.as_mut() {
                Some(look) => look.await,
                None => continue,
            };
            self.look = None;
            let peek = match looked {
                Ok(Ok(peek)) => peek,
                Ok(Err(e)) => {
                    crate::debug!("cannot look at the line ({})", e.error);
                    return None;
                }
                Err(_) => return None,
            };
            // Gone from the line (its heartbeat lapsed), replaced by a newer --supersede waiter,
            // or next with something changed since its last try: a try will tell.
            let tried_epoch = self.tries.borrow().epoch;
            if !peek.in_line
                || peek.superseded
                || (peek.view.standing.next && peek.view.epoch != tried_epoch)
            {
                return Some(Seen::Turn);
            }
            self.see(peek.view);
        }
    }

    /// Sleeps `pause` (forever when `None`), or until the waiter tries again; `Some(true)` when
    /// it is time to look, `Some(false)` when a try came first, `None` when the tries ended.
    async fn wait(&mut self, pause: Option<Duration>) -> Option<bool> {
        match pause {
            None => self.tries.changed().await.ok().map(|()| false),
            Some(pause) => tokio::select! {
                () = tokio::time::sleep(pause) => Some(true),
                changed = self.tries.changed() => changed.ok().map(|()| false),
            },
        }
    }

    /// Starts a look on a task of its own.
    fn start_look(&self) -> JoinHandle<Result<Peek, Failure>> {
        let link = Arc::clone(&self.link);
        let name = self.waiter.name.clone();
        let owner = self.waiter.owner.clone();
        let cap = self.waiter.limit + EXACT_PLACES;
        let (limit, shared) = (self.waiter.limit, self.waiter.shared);
        tokio::spawn(async move {
            let rows = link
                .query_often(
                    REQUEST_TIMEOUT,
                    &link.sql().peek,
                    &[
                        (&name, Type::TEXT),
                        (&owner, Type::TEXT),
                        (&cap, Type::INT4),
                    ],
                )
                .await?;
            let unexpected = |_| link.unexpected("a look");
            let row = rows.first().ok_or_else(|| link.unexpected("a look"))?;
            let in_line: Option<bool> = row.try_get(1).map_err(unexpected)?;
            let writer_ahead: Option<bool> = row.try_get(3).map_err(unexpected)?;
            let superseded: Option<bool> = row.try_get(5).map_err(unexpected)?;
            let next = |ahead| match shared {
                true => !writer_ahead.unwrap_or(false),
                false => ahead < limit,
            };
            Ok(Peek {
                in_line: in_line.unwrap_or(false),
                superseded: superseded.unwrap_or(false),
                view: View::read(row, &PEEK_VIEW, next).map_err(unexpected)?,
            })
        })
    }
}
