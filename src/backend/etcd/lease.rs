//! [`EtcdLease`]: one etcd lease held by this run, kept alive and revoked by its id — the only
//! lease this run ever renews or revokes, so a stale holder never touches a newer holder's lease.
//! Also the lease requests themselves (grant with an id chosen here, keep-alive, revoke), which
//! waiting and `--min-interval` use too.
//!
//! Each renewal opens a keep-alive stream, sends one request and waits for its answer, then closes
//! the stream: an answer can never be taken for the answer to a later request, and a renewal
//! dropped half-way leaves nothing behind. It runs under its own deadline (a silent member would
//! hang a stream forever), a quarter of the lease, and counts from when it was sent. An answer that
//! the lease is gone (TTL ≤ 0, not found) is final; anything else is unconfirmed and retried. A
//! keep-alive always restores the TTL the cluster granted, so a renewal confirms that TTL.
//!
//! `release --force` revokes the holder's lease, which deletes its key: [`Lease::revoked`]
//! watches that key and reports its deletion, and the supervisor renews at once to find out (its
//! expiry is reported the same way). The watch is set up [`WATCH_AFTER`] after the supervisor
//! first polls it — after the command started, so the uncontended path pays nothing before the
//! command runs, and a command that ends sooner (a cron job with nothing to do) costs the cluster
//! no watch at all. It reads the key once the watch exists, so a forced release in between is
//! reported too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;

use super::line;
use super::link::{Failure, Link, REQUEST_TIMEOUT, is_lease_taken};
use super::watch::{Event, Watcher};
use crate::backend::waiting::policy::{LEAVE_TIMEOUT, SAFETY_RECHECK, random_bytes, renew_timeout};
use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};

/// How long a holder's command runs before the holder watches its key for a forced release.
const WATCH_AFTER: Duration = Duration::from_millis(100);

/// A lease held by this run.
pub struct EtcdLease {
    link: Arc<Link>,
    /// Its holder key, and that key's create revision.
    key: String,
    token: i64,
    id: i64,
    grant: Grant,
    /// The write of the record when a waiter won, still under way.
    stamp: Option<JoinHandle<()>>,
    /// Whether the holder key was seen gone: nothing more to announce.
    gone: AtomicBool,
}

impl EtcdLease {
    pub fn new(link: Arc<Link>, key: String, id: i64, token: i64, grant: Grant) -> Self {
        EtcdLease {
            link,
            key,
            token,
            id,
            grant,
            stamp: None,
            gone: AtomicBool::new(false),
        }
    }

    /// The same lease, whose release first waits for `stamp` (the record's write when a waiter
    /// won), so the waiter behind it reads what it wrote.
    pub fn stamped_by(self, stamp: Option<JoinHandle<()>>) -> Self {
        EtcdLease { stamp, ..self }
    }

    /// Watches the holder key for its deletion; `None` when it is gone already.
    async fn watch_own_key(&self) -> Result<Option<Watcher>, BackendError> {
        let watcher = Watcher::open(&self.link, self.key.as_bytes()).await?;
        let found = line::read(&self.link, std::slice::from_ref(&self.key)).await?;
        let mine = found.into_iter().next().flatten();
        Ok(mine
            .is_some_and(|kv| kv.create_revision() == self.token)
            .then_some(watcher))
    }
}

#[async_trait]
impl Lease for EtcdLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let ttl = self.grant.ttl.unwrap_or_default();
        keep_alive(&self.link, self.id, renew_timeout(ttl)).await?;
        Ok(Renewal { ttl: Some(ttl) })
    }

    async fn release(mut self: Box<Self>) -> Result<Released, BackendError> {
        if let Some(stamp) = self.stamp.take()
            && tokio::time::timeout(LEAVE_TIMEOUT, stamp).await.is_err()
        {
            crate::debug!("the record of when the lock was won took too long; releasing anyway");
        }
        Ok(match revoke(&self.link, self.id).await? {
            true => Released::Given,
            false => Released::AlreadyGone,
        })
    }

    async fn revoked(&self) -> Revocation {
        if self.gone.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        tokio::time::sleep(WATCH_AFTER).await;
        loop {
            match self.watch_own_key().await {
                Ok(None) => break,
                Ok(Some(mut watcher)) => match watcher.next().await {
                    Event::Deleted { .. } => break,
                    Event::Superseded(_) | Event::Broken => {
                        crate::debug!("the watch on the lease's key broke; watching again");
                    }
                },
                Err(e) => crate::debug!("cannot watch for a forced release ({e})"),
            }
            tokio::time::sleep(SAFETY_RECHECK).await;
        }
        self.gone.store(true, Ordering::Relaxed);
        Revocation::Announced
    }
}

/// Extends lease `id` to its full TTL, within `limit`.
pub async fn keep_alive(link: &Link, id: i64, limit: Duration) -> Result<(), RenewError> {
    let kept = link
        .call(limit, |mut client| async move {
            client.lease_keep_alive(id).await.map(drop)
        })
        .await;
    match kept {
        Ok(()) => Ok(()),
        Err(failure) if failure.lease_gone() => Err(RenewError::Lost(format!(
            "lease {id:x} is gone on {} (it expired, or was broken with release --force)",
            link.endpoints()
        ))),
        Err(failure) => Err(RenewError::Unconfirmed(failure.into())),
    }
}

/// Revokes lease `id` (its keys go with it); `false` if it was already gone.
pub async fn revoke(link: &Link, id: i64) -> Result<bool, BackendError> {
    let revoked = link
        .call(REQUEST_TIMEOUT, |mut client| async move {
            client.lease_revoke(id).await.map(drop)
        })
        .await;
    match revoked {
        Ok(()) => Ok(true),
        Err(failure @ Failure::Answered { .. }) if failure.lease_gone() => Ok(false),
        Err(failure) => Err(failure.into()),
    }
}

/// Grants lease `id` for at least `ttl` (whole seconds, rounded up); returns the granted TTL.
///
/// The id is this run's own (random, see [`lease_id`]), so a member that says a lease with it
/// exists already is answering a grant sent again after an earlier member took it but answered
/// too late: that lease is this run's, and its granted TTL is read instead.
pub async fn grant(link: &Link, id: i64, ttl: Duration) -> Result<Duration, BackendError> {
    let seconds = i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1);
    let (granted_ttl, error) = link
        .call(REQUEST_TIMEOUT, |mut client| async move {
            let options = etcd_client::LeaseGrantOptions::new().with_id(id);
            match client.lease_grant(seconds, Some(options)).await {
                Ok(granted) => Ok((granted.ttl(), granted.error().to_owned())),
                Err(e) if is_lease_taken(&e) => {
                    crate::debug!("lease {id:x} was granted by an earlier try; reading its TTL");
                    let lease = client.lease_time_to_live(id, None).await?;
                    Ok((lease.granted_ttl(), String::new()))
                }
                Err(e) => Err(e),
            }
        })
        .await?;
    let granted_ttl = u64::try_from(granted_ttl).unwrap_or(0);
    if granted_ttl == 0 || !error.is_empty() {
        return Err(BackendError::Failed {
            endpoint: link.endpoints(),
            reason: format!(
                "lease not granted: {}",
                Some(error.as_str())
                    .filter(|e| !e.is_empty())
                    .unwrap_or("no TTL in the answer")
            ),
        });
    }
    Ok(Duration::from_secs(granted_ttl))
}

/// A random positive lease id, so the grant and the join can be sent together.
pub fn lease_id() -> Result<i64, BackendError> {
    let bytes = random_bytes::<8>()?;
    // 62 bits: positive, and never zero (zero asks the cluster to choose).
    Ok(i64::from_le_bytes(bytes) & (i64::MAX >> 1) | 1)
}
