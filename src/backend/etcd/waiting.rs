//! A waiter's sleep: watching for the deletions that may make it a holder, while keeping its own
//! lease (and so its place in line) alive.
//!
//! A waiter watches the deletions of its name's holder keys, from the current revision on, and
//! *then* reads the line: every deletion after that read is reported, and the waiter drops the
//! deleted keys from those it knows are ahead. Keys never join the line ahead of a waiter (a new
//! key has a higher create revision), so a deletion needs no new read: the handoff costs the event
//! and one keep-alive.
//!
//! Why not watch only the predecessor, as the etcd lock recipe does: such a watch starts at a past
//! revision, and etcd serves watches that start in the past from a loop that runs every 100 ms —
//! under contention, up to 100 ms per handoff, more when a predecessor is gone and the next one
//! must be watched. A watch from the current revision is served at once, and since a wake-up
//! costs a waiter no request, every waiter seeing every release of its name is cheap.
//!
//! A watch that ends or is cancelled, and a keep-alive that went unanswered (the member may be
//! gone: the next watch and read go to another one), are reasons to watch and read again. There
//! is no timed re-check: etcd delivers every event after the watch is created.

use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchStream};

use super::keys::Keys;
use super::lease::keep_alive;
use super::link::{Link, REQUEST_TIMEOUT};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, RenewError};
use crate::clock::{BootInstant, BootTimer};

/// Pause before trying again when the cluster cannot be asked at all.
pub const RETRY: Duration = Duration::from_millis(250);

/// Why the waiter woke.
pub enum Wake {
    /// These keys were deleted.
    Deleted(Vec<Vec<u8>>),
    /// The watch broke or the member may be gone: watch and read the line again.
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

/// Watches the deletions of `keys`' holder keys from now on; returns once etcd has created the
/// watch, so a read made after it misses nothing.
pub async fn watch(link: &Link, keys: &Keys) -> Result<WatchStream, BackendError> {
    let prefix = keys.holders();
    let options = WatchOptions::new()
        .with_prefix()
        .with_filters([WatchFilterType::NoPut]);
    let stream = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move {
                let mut stream = client.watch(prefix, Some(options)).await?;
                match stream.message().await? {
                    Some(created) if created.created() && !created.canceled() => Ok(stream),
                    _ => Err(etcd_client::Error::WatchError("watch not created".into())),
                }
            }
        })
        .await?;
    Ok(stream)
}

/// Sleeps until a deletion on `stream` (without a stream, for [`RETRY`]), the deadline, or a
/// keep-alive that needs a look.
pub async fn wait_turn(
    link: &Link,
    stream: Option<&mut WatchStream>,
    keeper: &mut Keeper,
    timer: &mut BootTimer,
    deadline: Option<BootInstant>,
) -> Result<Wake, BackendError> {
    let retry_at = stream.is_none().then(|| BootInstant::now() + RETRY);
    let mut stream = stream;
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
            message = async {
                match stream.as_mut() {
                    Some(stream) => stream.message().await,
                    None => std::future::pending().await,
                }
            } => match message {
                Ok(Some(response)) => {
                    if response.canceled() {
                        return Ok(Wake::Look);
                    }
                    let deleted: Vec<Vec<u8>> = response
                        .events()
                        .iter()
                        .filter(|event| event.event_type() == EventType::Delete)
                        .filter_map(|event| {
                            event.kv().map(|kv| kv.key().to_vec())
                        })
                        .collect();
                    if !deleted.is_empty() {
                        return Ok(Wake::Deleted(deleted));
                    }
                }
                // The watch ended or broke: watch and look again.
                Ok(None) | Err(_) => return Ok(Wake::Look),
            },
            slept = timer.sleep_until(wake_at) => slept.map_err(|e| BackendError::Failed {
                endpoint: link.endpoints(),
                reason: format!("timer failed: {e}"),
            })?,
        }
    }
}
