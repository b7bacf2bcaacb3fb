//! A waiter's sleep: until one of its watches reports (see [`super::watch`]), its deadline, or a
//! keep-alive of its own lease (and so of its place in line) that needs a look — while keeping
//! that lease alive every third of its TTL.
//!
//! A watch that ends or is cancelled, and a keep-alive that went unanswered (the member may be
//! gone: the next watches and reads go to another one), are reasons to watch and read again.
//! There is no timed re-check: etcd delivers every event after a watch is created.

use std::time::Duration;

use super::lease::keep_alive;
use super::link::Link;
use super::watch::{Event, Watcher};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, RenewError};
use crate::clock::{BootInstant, BootTimer};

/// Pause before trying again when the cluster cannot be asked at all.
pub const RETRY: Duration = Duration::from_millis(250);

/// Why the waiter woke.
pub enum Wake {
    /// The watch stream reported something.
    Watched(Event),
    /// The member may be gone, or the pause after a failure is over: watch and read again.
    Look,
    /// The deadline passed.
    Deadline,
    /// The cluster said the waiter's lease is gone.
    LeaseLost,
}

/// Keeps a waiting run's lease alive: when the next keep-alive is due.
pub struct Keeper {
    pub lease: i64,
    pub ttl: Duration,
    /// When the last request that the cluster confirmed for this lease was sent.
    pub confirmed: BootInstant,
    next: BootInstant,
}

impl Keeper {
    /// A keeper for a lease last confirmed by a request sent at `sent_at`.
    pub fn new(lease: i64, ttl: Duration, sent_at: BootInstant) -> Self {
        Keeper {
            lease,
            ttl,
            confirmed: sent_at,
            next: sent_at + ttl / 3,
        }
    }

    /// Sends a keep-alive if one is due; `Some` wake when its outcome needs a look.
    async fn tend(&mut self, link: &Link) -> Option<Wake> {
        if BootInstant::now() < self.next {
            return None;
        }
        let sent = BootInstant::now();
        match keep_alive(link, self.lease, renew_timeout(self.ttl)).await {
            Ok(()) => {
                self.confirmed = sent;
                self.next = sent + self.ttl / 3;
                None
            }
            Err(RenewError::Lost(_)) => Some(Wake::LeaseLost),
            Err(RenewError::Unconfirmed(e)) => {
                crate::warn!("cannot keep the place in line ({e}); retrying");
                self.next = BootInstant::now() + RETRY;
                Some(Wake::Look)
            }
        }
    }
}

/// Sleeps until `watcher` reports (without one, for [`RETRY`]), the deadline, or a keep-alive
/// that needs a look.
pub async fn wait_turn(
    link: &Link,
    watcher: Option<&mut Watcher>,
    keeper: &mut Keeper,
    timer: &mut BootTimer,
    deadline: Option<BootInstant>,
) -> Result<Wake, BackendError> {
    let retry_at = watcher.is_none().then(|| BootInstant::now() + RETRY);
    let mut watcher = watcher;
    loop {
        if let Some(wake) = keeper.tend(link).await {
            return Ok(wake);
        }
        let now = BootInstant::now();
        if deadline.is_some_and(|d| d <= now) {
            return Ok(Wake::Deadline);
        }
        if retry_at.is_some_and(|r| r <= now) {
            return Ok(Wake::Look);
        }
        let wake_at = [Some(keeper.next), deadline, retry_at]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            event = async {
                match watcher.as_mut() {
                    Some(watcher) => watcher.next().await,
                    None => std::future::pending().await,
                }
            } => return Ok(Wake::Watched(event)),
            slept = timer.sleep_until(wake_at) => slept.map_err(|e| BackendError::Failed {
                endpoint: link.endpoints(),
                reason: format!("timer failed: {}", crate::messages::io(&e)),
            })?,
        }
    }
}
