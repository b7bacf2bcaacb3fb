//! [`Wakeups`]: what a waiter sleeps on — the name's release channel (pub/sub, a connection of
//! its own), and the slow safety re-check that covers what no message announces (a holder that
//! crashed and let its lease expire, a subscription that broke).
//!
//! The subscription is a hint, never a promise: after subscribing, the waiter always tries again
//! at once, because a release may have happened between its last try and the subscription.

use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;

use super::connect::Link;
use crate::backend::queue::SAFETY_RECHECK;
use crate::clock::BootInstant;

/// Pause between attempts to re-subscribe after the subscription broke.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);
/// A waiter's subscription to one name's releases.
pub struct Wakeups {
    channel: String,
    pubsub: Option<PubSub>,
    last_attempt: Option<BootInstant>,
}

impl Wakeups {
    pub fn new(channel: String) -> Self {
        Wakeups {
            channel,
            pubsub: None,
            last_attempt: None,
        }
    }

    /// Subscribes if not subscribed and not tried too recently; returns whether a new
    /// subscription was made (the caller then tries again at once).
    pub async fn subscribe(&mut self, link: &Link) -> bool {
        if self.pubsub.is_some()
            || self
                .last_attempt
                .is_some_and(|t| BootInstant::now().saturating_since(t) < RESUBSCRIBE_AFTER)
        {
            return false;
        }
        self.last_attempt = Some(BootInstant::now());
        match link.subscribe(&self.channel).await {
            Ok(pubsub) => {
                self.pubsub = Some(pubsub);
                true
            }
            Err(e) => {
                crate::warn!(
                    "cannot subscribe to releases ({e}); checking every {}",
                    humantime::format_duration(SAFETY_RECHECK)
                );
                false
            }
        }
    }

    /// Returns when a release (or a waiter leaving the line) is announced; never, without a
    /// subscription. A broken subscription is dropped, to be renewed by [`Wakeups::subscribe`].
    pub async fn announced(&mut self) {
        let Some(pubsub) = self.pubsub.as_mut() else {
            return std::future::pending().await;
        };
        if pubsub.on_message().next().await.is_none() {
            crate::debug!("the release subscription broke");
            self.pubsub = None;
        }
    }
}
