//! [`Sleep`]: a waiter's doorbell on MySQL — a sleeping statement on the waiter's own (and only)
//! connection, which a release, a waiter leaving ahead of it or a newer `--supersede` waiter ends
//! early with `KILL QUERY` (see [`super::schema`] for who is woken and how the session is found).
//!
//! The sleep lasts until just before the waiting engine would look again anyway (soon after the
//! earliest lease could expire, at most a second), so the engine's own timer does not cut the
//! statement off and cost the connection. It does not start at all when the waiter was woken
//! since its last try (its wake-up count moved), so a wake-up that reached the session between two
//! statements is not lost. A waiter that gives up mid-sleep drops the statement and with it the
//! connection; it leaves the line on a fresh one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::connect::{Link, REQUEST_TIMEOUT};
use crate::backend::waiting::line::Doorbell;
use crate::clock::BootInstant;

/// Ended this long before the engine's own re-check, so that the answer arrives first.
const MARGIN: Duration = Duration::from_millis(20);
/// Shorter sleeps are not worth a statement: the engine's own timer is left to end them.
const SHORTEST: Duration = Duration::from_millis(5);

/// What a waiter's last try saw.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    /// Its wake-up count.
    pub rung: u64,
    /// When the engine will look again without being woken.
    pub recheck: BootInstant,
}

/// Each waiter's last [`Turn`], by owner.
pub type Turns = Arc<Mutex<HashMap<String, Turn>>>;

/// One waiter's doorbell.
pub struct Sleep {
    link: Arc<Link>,
    turns: Turns,
    name: String,
    owner: String,
}

impl Sleep {
    pub fn new(link: Arc<Link>, turns: Turns, name: String, owner: String) -> Self {
        Sleep {
            link,
            turns,
            name,
            owner,
        }
    }
}

#[async_trait]
impl Doorbell for Sleep {
    async fn rung(&mut self) -> bool {
        let turn = self
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&self.owner)
            .copied();
        let Some(turn) = turn else {
            // No try has put this waiter in line: look at once.
            return true;
        };
        let sleep = turn
            .recheck
            .saturating_since(BootInstant::now())
            .saturating_sub(MARGIN);
        if sleep < SHORTEST {
            std::future::pending::<()>().await;
        }
        let sql = self
            .link
            .sql()
            .wait(&self.name, &self.owner, turn.rung, sleep);
        match self.link.sleep(sleep + REQUEST_TIMEOUT, &sql).await {
            Ok(()) => true,
            Err(e) => {
                crate::debug!("the wait for a release broke ({e})");
                false
            }
        }
    }
}
