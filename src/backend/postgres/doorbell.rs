//! A waiter's doorbell on PostgreSQL, of one of two kinds, chosen by where its connection leads:
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

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use super::link::{Link, Subscribed};
use super::looker::{Looker, Seen};
use super::schema;
use super::session::Heard;
use crate::backend::waiting::line::Doorbell;

/// Following the line by looking, for a waiter behind a pooler.
pub struct Looking(pub Looker);

#[async_trait]
impl Doorbell for Looking {
    async fn rung(&mut self) -> bool {
        self.0.follow(false).await.is_some()
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
        match self.looker.follow(true).await {
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
