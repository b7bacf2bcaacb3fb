//! [`EtcdLease`]: one etcd lease held by this run, kept alive and revoked by its id — the only
//! lease this run ever renews or revokes, so a stale holder never touches a newer holder's lease.
//!
//! Each renewal opens a keep-alive stream, sends one request and waits for its answer, then closes
//! the stream: an answer can never be taken for the answer to a later request, and a renewal
//! dropped half-way leaves nothing behind. It runs under its own deadline (a silent member would
//! hang a stream forever), a quarter of the lease, and counts from when it was sent. An answer that
//! the lease is gone (TTL ≤ 0, not found) is final; anything else is unconfirmed and retried. A
//! keep-alive always restores the TTL the cluster granted, so a renewal confirms that TTL.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::link::{Failure, Link, REQUEST_TIMEOUT};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, Grant, Lease, RenewError, Renewal};

/// A lease held by this run.
pub struct EtcdLease {
    link: Arc<Link>,
    id: i64,
    grant: Grant,
}

impl EtcdLease {
    pub fn new(link: Arc<Link>, id: i64, grant: Grant) -> Self {
        EtcdLease { link, id, grant }
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

    async fn release(self: Box<Self>) -> Result<(), BackendError> {
        if !revoke(&self.link, self.id).await? {
            crate::info!("the lease was already gone; nothing to release");
        }
        Ok(())
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
