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
use crate::clock::BootInstant;

/// Longest sleep between two tries when no release is announced; each try also renews the
/// waiter's heartbeat, so this must stay well below [`HEARTBEAT`].
pub const SAFETY_RECHECK: Duration = Duration::from_secs(1);
/// How long a waiter stays in line without trying again: a waiter that died or gave up without
/// leaving holds up the line for at most this long.
pub const HEARTBEAT: Duration = Duration::from_secs(3);
/// Pause between attempts to re-subscribe after the subscription broke.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);
/// Slack after a holder's lease should have expired, before looking again.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

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

/// When to look again without being woken: soon after the earliest lease could expire, at the
/// latest after [`SAFETY_RECHECK`], and never past the deadline.
pub fn recheck_at(soonest_expiry: Option<Duration>, deadline: Option<BootInstant>) -> BootInstant {
    let now = BootInstant::now();
    let wait = soonest_expiry.map_or(SAFETY_RECHECK, |left| {
        (left + EXPIRY_SLACK).min(SAFETY_RECHECK)
    });
    let at = now + wait;
    deadline.map_or(at, |d| d.min(at))
}
