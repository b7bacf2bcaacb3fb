//! A waiter's doorbell on PostgreSQL, of one of three kinds, chosen by where its connection leads:
//!
//! - [`Listening`]: the connection reaches the server directly. Once the waiter is near its turn
//!   (next, or a couple of places behind), it `LISTEN`s on its own channel (on its one
//!   connection, see [`super::session`]), and a release `NOTIFY`s only the waiters whose turn it
//!   may be, so one release never wakes the whole line. Further back it follows the line by
//!   looking ([`super::looker`]) rather than listening: PostgreSQL signals every listening
//!   connection of a database on every `NOTIFY` (each one then checks the channel), so a
//!   thousand listening waiters would make every release wake a thousand server processes.
//! - [`Looking`]: the connection goes through a transaction pooler (PgBouncer), where `LISTEN`
//!   cannot work — a notification reaches whichever client happens to be using that server
//!   connection at the time, or nobody. The waiter follows the line by looking, all the way to
//!   its turn.
//! - [`ListeningAside`]: the connection goes through a pooler, and the URL says where the server
//!   itself is (`listen=`). The waiter looks while far from its turn, and while near it in a line
//!   that moves fast; near it in a line that stands still, it opens a second connection, to the
//!   server itself, `LISTEN`s there and records its channel on its place in line, so a release
//!   wakes it as it wakes a direct waiter. That connection lasts only while the waiter is near
//!   its turn: it closes when the waiter takes its turn or gives up, so the server sees a few
//!   such connections per name, never one per waiter or per holder. Where it cannot listen (the
//!   address does not answer, leads to a pooler too, or to another database), lockrun says so
//!   once, and its waiters look instead for the next half minute before they try again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::link::{Link, REQUEST_TIMEOUT, Subscribed};
use super::looker::{Looker, Seen};
use super::schema;
use super::session::Heard;
use super::settings::Settings;
use crate::backend::waiting::line::Doorbell;
use crate::backend::waiting::policy::{HEARTBEAT, SAFETY_RECHECK};
use crate::clock::BootInstant;

/// Following the line by looking, for a waiter behind a pooler.
pub struct Looking(pub Looker);

#[async_trait]
impl Doorbell for Looking {
    async fn rung(&mut self) -> bool {
        self.0.follow(None).await.is_some()
    }
}

/// Looking while far from its turn, listening once near it, for a waiter connected directly.
pub struct Listening {
    looker: Looker,
    link: Arc<Link>,
    heard: Option<watch::Receiver<Heard>>,
}

impl Listening {
    pub fn new(link: Arc<Link>, looker: Looker) -> Self {
        Listening {
            looker,
            link,
            heard: None,
        }
    }
}

#[async_trait]
impl Doorbell for Listening {
    async fn rung(&mut self) -> bool {
        if let Some(heard) = self.heard.as_mut() {
            // Any notification: a turn, a newer --supersede waiter. Several coalesce into one.
            return heard.changed().await.is_ok();
        }
        match self.looker.follow(Some(Duration::ZERO)).await {
            None => return false,
            Some(Seen::Turn) => return true,
            Some(Seen::Near) => {}
        }
        let channel = schema::owner_channel(&self.looker.waiter.owner);
        match self.link.subscribe(&channel, None).await {
            Ok((Subscribed::Listening(heard), _)) => {
                self.heard = Some(heard);
                // A release may have come just before the subscription: try at once.
                true
            }
            // The connection changed under it: the engine sets a doorbell up again.
            Ok((Subscribed::Pooled, _)) => false,
            Err(e) => {
                crate::debug!("cannot listen for its turn ({})", e.error);
                false
            }
        }
    }
}

/// How long a waiter near its turn behind a pooler must have stood still before it opens a
/// connection to the server to listen there: in a line that moves faster, looking finds each turn
/// within milliseconds, and a connection per handoff (a server process started, and catalogs read,
/// for each) would cost the server more than the looks it saves.
const LISTEN_AFTER_STILL: Duration = Duration::from_millis(100);

/// How long after listening at the server itself failed a waiter tries there again (it looks
/// meanwhile): long enough that an address that cannot serve costs next to nothing, short enough
/// that a server back from a restart, or a lockrun back from a pause, soon listens again.
const LISTEN_RETRY: Duration = Duration::from_secs(30);

/// Longer than this between two tries, and a listening waiter's place may have lapsed (its
/// heartbeat ran out while it was paused, or its tries did not get through): a try renews the
/// heartbeat at most a re-check after the one before, so a gap this long leaves less than a
/// re-check of it.
const MAY_HAVE_LAPSED: Duration = HEARTBEAT.saturating_sub(SAFETY_RECHECK);

/// Where the waiters of a run behind a pooler may listen: the server itself (`listen=`).
pub struct Aside {
    settings: Settings,
    /// When listening there last failed: until [`LISTEN_RETRY`] later, waiters look instead.
    failed_at: Mutex<Option<Instant>>,
    /// Whether the failure was said (once per run).
    said: AtomicBool,
}

impl Aside {
    pub fn new(settings: Settings) -> Self {
        Aside {
            settings,
            failed_at: Mutex::new(None),
            said: AtomicBool::new(false),
        }
    }

    /// When waiters may try to listen there again; `None` when they may now.
    fn resting_until(&self) -> Option<Instant> {
        let failed_at = *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        failed_at
            .map(|at| at + LISTEN_RETRY)
            .filter(|&until| until > Instant::now())
    }

    /// Records that listening there failed (saying why, the first time): waiters look for a
    /// while.
    fn failed(&self, reason: &str) {
        *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        if !self.said.swap(true, Ordering::Relaxed) {
            crate::warn!(
                "cannot listen for its turn at {} ({reason}); following the line by looking",
                self.settings.endpoint
            );
        }
    }
}

/// A connection to the server itself, listening on the waiter's channel.
type Listener = (Link, watch::Receiver<Heard>);

/// Looking while far from its turn, listening on a connection of its own to the server itself
/// once near it in a line that stands still, for a waiter behind a pooler.
pub struct ListeningAside {
    aside: Arc<Aside>,
    looker: Looker,
    /// The listening connection being opened: the waiter keeps looking meanwhile.
    opening: Option<JoinHandle<Result<Listener, String>>>,
    /// Kept open while the doorbell lives.
    listening: Option<Listener>,
    /// How far from the head of the line the waiter's last try found it, once listening.
    distance: i64,
    /// When the doorbell last heard of a try, once listening.
    tried_at: BootInstant,
}

impl ListeningAside {
    pub fn new(aside: Arc<Aside>, looker: Looker) -> Self {
        ListeningAside {
            aside,
            looker,
            opening: None,
            listening: None,
            distance: 0,
            tried_at: BootInstant::now(),
        }
    }

    /// Starts opening the listening connection, on a task of its own.
    fn open(&self) -> JoinHandle<Result<Listener, String>> {
        let settings = self.aside.settings.clone();
        let name = self.looker.waiter.name.clone();
        let owner = self.looker.waiter.owner.clone();
        tokio::spawn(listen_aside(settings, name, owner))
    }
}

#[async_trait]
impl Doorbell for ListeningAside {
    async fn rung(&mut self) -> bool {
        if let Some((_, heard)) = self.listening.as_mut() {
            // Farther from the head than before, or long since the try before (alone in line,
            // it joins again at the head): its place lapsed (it was paused) and it joined again,
            // on a place that records no channel. The engine sets a doorbell up again, which
            // listens once near its turn.
            let distance = self.looker.last_try().distance;
            let now = BootInstant::now();
            let away = now.saturating_since(self.tried_at);
            if distance > self.distance || away > MAY_HAVE_LAPSED {
                return false;
            }
            self.distance = distance;
            self.tried_at = now;
            return heard.changed().await.is_ok();
        }
        loop {
            let Some(opening) = self.opening.as_mut() else {
                if let Some(until) = self.aside.resting_until() {
                    tokio::select! {
                        seen = self.looker.follow(None) => return seen.is_some(),
                        () = tokio::time::sleep_until(until) => continue,
                    }
                }
                match self.looker.follow(Some(LISTEN_AFTER_STILL)).await {
                    None => return false,
                    Some(Seen::Turn) => return true,
                    Some(Seen::Near) => self.opening = Some(self.open()),
                }
                continue;
            };
            tokio::select! {
                opened = opening => {
                    self.opening = None;
                    match opened {
                        Ok(Ok(listener)) => {
                            crate::debug!(
                                "listening for its turn at {}",
                                self.aside.settings.endpoint
                            );
                            self.listening = Some(listener);
                            self.distance = self.looker.last_try().distance;
                            self.tried_at = BootInstant::now();
                            // A release may have come before the channel was recorded.
                            return true;
                        }
                        Ok(Err(reason)) => self.aside.failed(&reason),
                        Err(_) => self.aside.failed("the connection task ended"),
                    }
                }
                seen = self.looker.follow(None) => return seen.is_some(),
            }
        }
    }
}

impl Drop for ListeningAside {
    fn drop(&mut self) {
        if let Some(opening) = self.opening.take() {
            opening.abort();
        }
    }
}

/// Connects to the server itself, listens on the waiter's channel there, and records the channel
/// on its place in line, in that order: a release that sees the channel finds it listening.
async fn listen_aside(settings: Settings, name: String, owner: String) -> Result<Listener, String> {
    let link = Link::open_listener(settings)
        .await
        .map_err(|e| e.reason().to_owned())?;
    let channel = schema::owner_channel(&owner);
    let heard = match link.subscribe(&channel, None).await {
        Ok((Subscribed::Listening(heard), _)) => heard,
        Ok((Subscribed::Pooled, _)) => {
            return Err("it leads to a pooler too, not to the server itself".into());
        }
        Err(e) => return Err(e.error.reason().to_owned()),
    };
    let recorded = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().set_channel,
            &[
                (&channel, Type::TEXT),
                (&name, Type::TEXT),
                (&owner, Type::TEXT),
            ],
        )
        .await
        .map_err(|e| e.error.reason().to_owned())?;
    if recorded.is_empty() {
        return Err("its place in line is not there: is it the database behind the pooler?".into());
    }
    Ok((link, heard))
}
