//! A waiter's doorbell on PostgreSQL, of one of two kinds, chosen by where its connection leads:
//!
//! - [`Notified`]: the connection reaches the server directly. The waiter `LISTEN`s on its own
//!   channel (on its one connection, see [`super::session`]), and a release `NOTIFY`s only the
//!   waiters whose turn it may be, so one release never wakes the whole line.
//! - [`Polled`]: the connection goes through a transaction pooler (PgBouncer), where `LISTEN`
//!   cannot work: a notification reaches whichever client happens to be using that server
//!   connection at the time, or nobody. The waiter looks instead, with one cheap read-only
//!   statement (`peek_v2`), at a pace set by where it stands: a waiter that a release would wake
//!   looks every tenth of the time it has been in that place (at least every 5 ms, at most every
//!   200 ms), so a handoff costs a few milliseconds after a short hold and at most a tenth of a
//!   long one; the few waiters just behind it look less often, to notice soon that they moved up;
//!   and the rest of the line does not look at all (the engine's one-second re-check tells them
//!   where they stand). The load is O(1) per name, whatever the line's length.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::failure::Failure;
use super::link::{Link, REQUEST_TIMEOUT};
use super::session::Heard;
use crate::backend::waiting::line::Doorbell;

/// How often a waiter that a release would wake looks, at most and at least.
const NEXT_FASTEST: Duration = Duration::from_millis(5);
const NEXT_SLOWEST: Duration = Duration::from_millis(200);
/// How often a waiter one place behind those looks, at most (further back: proportionally less).
const BEHIND_FASTEST: Duration = Duration::from_millis(20);
/// How often any other waiter that looks does so, at least.
const BEHIND_SLOWEST: Duration = Duration::from_secs(1);
/// How often a `--supersede` waiter looks, at least: a newer one makes it give up within a second.
const SUPERSEDE_SLOWEST: Duration = Duration::from_millis(250);
/// Waiters this many places (beyond the slots) from the head look; those further back do not.
pub const LOOKING_PLACES: i32 = 4;

/// Notifications on the waiter's own channel.
pub struct Notified {
    heard: watch::Receiver<Heard>,
}

impl Notified {
    pub fn new(heard: watch::Receiver<Heard>) -> Self {
        Notified { heard }
    }
}

#[async_trait]
impl Doorbell for Notified {
    async fn rung(&mut self) -> bool {
        // Any notification: a turn, a newer --supersede waiter. Several coalesce into one ring.
        self.heard.changed().await.is_ok()
    }
}

/// What the waiter's last try found: the name's epoch, and where the waiter stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub epoch: i64,
    pub standing: Standing,
}

/// Where a waiter stands in line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// A release would wake it.
    pub next: bool,
    /// Live waiters ahead of it, counted up to the limit plus [`LOOKING_PLACES`].
    pub ahead: i32,
}

/// The fixed facts of one waiter that polls.
pub struct Waiter {
    pub name: String,
    pub owner: String,
    pub limit: i32,
    pub shared: bool,
    pub supersede: bool,
}

/// One look's result.
struct Peek {
    epoch: i64,
    in_line: bool,
    superseded: bool,
    standing: Standing,
}

/// Looking at the line, for a waiter behind a pooler.
pub struct Polled {
    link: Arc<Link>,
    waiter: Waiter,
    /// The waiter's tries, as they happen.
    view: watch::Receiver<View>,
    /// A look in flight: kept across calls, so a ring cut short never abandons a statement half
    /// way (that would cost the connection).
    look: Option<JoinHandle<Result<Peek, Failure>>>,
    /// Where it stood at the last look or try, and since when.
    standing: Standing,
    since: Instant,
}

impl Polled {
    pub fn new(link: Arc<Link>, waiter: Waiter, mut view: watch::Receiver<View>) -> Self {
        let standing = view.borrow_and_update().standing;
        Polled {
            link,
            waiter,
            view,
            look: None,
            standing,
            since: Instant::now(),
        }
    }

    /// Records where the waiter stands now.
    fn stand(&mut self, standing: Standing) {
        if standing != self.standing {
            self.standing = standing;
            self.since = Instant::now();
        }
    }

    /// How long until the next look; `None` when the waiter is too far back to look.
    fn pause(&self) -> Option<Duration> {
        let relative = self.since.elapsed() / 10;
        let s = self.standing;
        if s.next {
            return Some(relative.clamp(NEXT_FASTEST, NEXT_SLOWEST));
        }
        let places = (s.ahead - self.waiter.limit + 1).max(1);
        let fastest = BEHIND_FASTEST * u32::try_from(places).unwrap_or(u32::MAX);
        if self.waiter.supersede {
            Some(relative.clamp(fastest.min(SUPERSEDE_SLOWEST), SUPERSEDE_SLOWEST))
        } else if places > LOOKING_PLACES {
            None
        } else {
            Some(relative.clamp(fastest, BEHIND_SLOWEST))
        }
    }

    /// Starts a look on a task of its own.
    fn start_look(&self) -> JoinHandle<Result<Peek, Failure>> {
        let link = Arc::clone(&self.link);
        let name = self.waiter.name.clone();
        let owner = self.waiter.owner.clone();
        let cap = self.waiter.limit + LOOKING_PLACES;
        let (limit, shared) = (self.waiter.limit, self.waiter.shared);
        tokio::spawn(async move {
            let rows = link
                .query(
                    REQUEST_TIMEOUT,
                    &link.sql().peek,
                    &[
                        (&name, Type::TEXT),
                        (&owner, Type::TEXT),
                        (&cap, Type::INT4),
                    ],
                )
                .await?;
            let row = rows.first().ok_or_else(|| link.unexpected("a look"))?;
            let epoch: Option<i64> = row.try_get(0).map_err(|_| link.unexpected("a look"))?;
            let in_line: Option<bool> = row.try_get(1).map_err(|_| link.unexpected("a look"))?;
            let ahead: Option<i32> = row.try_get(2).map_err(|_| link.unexpected("a look"))?;
            let writer_ahead: Option<bool> =
                row.try_get(3).map_err(|_| link.unexpected("a look"))?;
            let superseded: Option<bool> = row.try_get(4).map_err(|_| link.unexpected("a look"))?;
            let ahead = ahead.unwrap_or(0);
            Ok(Peek {
                epoch: epoch.unwrap_or(0),
                in_line: in_line.unwrap_or(false),
                superseded: superseded.unwrap_or(false),
                standing: Standing {
                    next: match shared {
                        true => !writer_ahead.unwrap_or(false),
                        false => ahead < limit,
                    },
                    ahead,
                },
            })
        })
    }
}

#[async_trait]
impl Doorbell for Polled {
    async fn rung(&mut self) -> bool {
        loop {
            if self.look.is_none() {
                if self.view.has_changed().unwrap_or(false) {
                    let standing = self.view.borrow_and_update().standing;
                    self.stand(standing);
                }
                match self.pause() {
                    None => {
                        if self.view.changed().await.is_err() {
                            return false;
                        }
                        continue;
                    }
                    Some(pause) => tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        changed = self.view.changed() => match changed {
                            Ok(()) => continue,
                            Err(_) => return false,
                        },
                    },
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
                    return false;
                }
                Err(_) => return false,
            };
            // Gone from the line (its heartbeat lapsed), replaced by a newer --supersede waiter,
            // or something changed that may make it its turn: a try will tell.
            if !peek.in_line
                || peek.superseded
                || (peek.standing.next && peek.epoch != self.view.borrow().epoch)
            {
                return true;
            }
            self.stand(peek.standing);
        }
    }
}
