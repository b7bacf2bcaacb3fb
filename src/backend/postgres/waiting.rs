//! [`Wakeups`]: what a waiter sleeps on — `NOTIFY`s on the name's channel (a listening connection
//! of its own, whose notifications a small task keeps flowing), and the slow safety re-check that
//! covers what no notification announces (a holder that crashed and let its lease expire, a waiter
//! ahead whose heartbeat lapsed, a listening connection that broke).
//!
//! A notification is a hint, never a promise: after starting to listen the waiter always tries
//! again at once, because a release may have happened between its last try and the `LISTEN`.

use std::time::Duration;

use super::connect::{Link, Listener};
use crate::backend::queue::SAFETY_RECHECK;
use crate::clock::BootInstant;

/// Pause between attempts to listen again after the listening connection broke.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);
/// A waiter's subscription to one name's releases.
pub struct Wakeups {
    name: String,
    channel: String,
    listener: Option<Listener>,
    last_attempt: Option<BootInstant>,
}

impl Wakeups {
    pub fn new(name: String, channel: String) -> Self {
        Wakeups {
            name,
            channel,
            listener: None,
            last_attempt: None,
        }
    }

    /// Starts listening if not listening and not tried too recently; returns whether it just
    /// started (the caller then tries again at once).
    pub async fn listen(&mut self, link: &Link) -> bool {
        if self.listener.is_some()
            || self
                .last_attempt
                .is_some_and(|t| BootInstant::now().saturating_since(t) < RELISTEN_AFTER)
        {
            return false;
        }
        self.last_attempt = Some(BootInstant::now());
        match link.listen(&self.channel).await {
            Ok(listener) => {
                self.listener = Some(listener);
                true
            }
            Err(e) => {
                crate::warn!(
                    "cannot listen for releases ({e}); checking every {}",
                    humantime::format_duration(SAFETY_RECHECK)
                );
                false
            }
        }
    }

    /// Returns when a release of this name (or a waiter leaving its line) is announced; never,
    /// without a listener. A broken listener is dropped, to be renewed by [`Wakeups::listen`].
    pub async fn announced(&mut self) {
        let Some(listener) = self.listener.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match listener.notified().await {
                // Another name whose channel hashes alike.
                Some(payload) if payload != self.name => continue,
                Some(_) => {
                    listener.drain();
                    return;
                }
                None => {
                    crate::debug!("the listening connection broke");
                    self.listener = None;
                    return;
                }
            }
        }
    }
}
