//! [`DynamoLease`]: one held seat, renewed by rewriting its record version number and released by
//! removing it — each a single `UpdateItem` conditional on this run's owner id, so a renewal never
//! brings back a seat that was taken over or broken, and a late release never removes the next
//! holder. The token counter is never touched.
//!
//! Releasing also deletes the ticket item a run that waited stood in line with (a write, after the
//! release, so it never delays the next holder).
//!
//! A renewal counts from when it was sent, as everywhere (the supervisor's deadline), and has its
//! own deadline within which the SDK's retries (throttling included) must fit. DynamoDB cannot
//! push anything, so a holder reads its seat back every [`SEAT_CHECK`] ([`Lease::revoked`]): a
//! `release --force` stops its command within moments, not at its next renewal.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::expr::Update;
use super::item::{self, Seat};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use super::write;
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};
use crate::name::LockName;

/// How often a holder reads its seat back to notice a `release --force` (one strongly
/// consistent read, as a waiter's look at the line).
const SEAT_CHECK: Duration = Duration::from_millis(500);

/// A seat held by this run.
pub struct DynamoLease {
    pub link: Arc<Link>,
    pub name: LockName,
    pub seat: Seat,
    pub owner: String,
    /// The ticket this run waited with, whose item is deleted after the release.
    pub ticket: Option<u64>,
    pub grant: Grant,
}

/// Gives `seat` a fresh record version number, only while `owner` holds it; false when it does
/// not (any more).
pub async fn renew(
    link: &Link,
    name: &LockName,
    seat: &Seat,
    owner: &str,
    limit: Duration,
) -> Result<bool, Failure> {
    let mut u = Update::default();
    let attr = seat.attr();
    let rvn = u.expr.path(&attr, item::RVN);
    let beat = u.expr.path(&attr, item::BEAT);
    let fresh = u.expr.text(super::claim::new_rvn());
    let wall = u.expr.num(item::wall_ms());
    u.set(format!("{rvn} = {fresh}"));
    u.set(format!("{beat} = {wall}"));
    u.require_owner(seat, owner);
    write::update(link, item::lock_key(name), &u, limit).await
}

/// Removes `seat`, only while `owner` holds it; false when it does not.
pub async fn release(
    link: &Link,
    name: &LockName,
    seat: &Seat,
    owner: &str,
) -> Result<bool, Failure> {
    let mut u = Update::default();
    u.remove_seat(seat);
    let count = u.expr.name(seat.counter());
    u.require_owner(seat, owner);
    let one = u.expr.num(1);
    u.set(format!("{count} = {count} - {one}"));
    write::update(link, item::lock_key(name), &u, REQUEST_TIMEOUT).await
}

#[async_trait]
impl Lease for DynamoLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let ttl = self.grant.ttl.unwrap_or_default();
        let renewed = renew(
            &self.link,
            &self.name,
            &self.seat,
            &self.owner,
            renew_timeout(ttl),
        )
        .await
        .map_err(|f| RenewError::Unconfirmed(self.link.error(f)))?;
        match renewed {
            true => Ok(Renewal { ttl: Some(ttl) }),
            false => Err(RenewError::Lost(format!(
                "the lease on {} is gone or has another holder (it was broken with release \
                 --force, or taken over by a waiter that saw it unrenewed for a whole lease)",
                self.link.endpoint()
            ))),
        }
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let released = release(&self.link, &self.name, &self.seat, &self.owner)
            .await
            .map_err(|f| self.link.error(f))?;
        if let Some(ticket) = self.ticket
            && let Err(f) =
                super::queue::forget(&self.link, &self.name, ticket, Some(&self.owner)).await
        {
            crate::debug!(
                "cannot delete the ticket this run waited with ({})",
                self.link.error(f)
            );
        }
        Ok(match released {
            true => Released::Given,
            false => Released::AlreadyGone,
        })
    }

    /// Resolves once a read of the lock item finds this run's seat gone (a read that fails says
    /// nothing: the renewals find out about a table that does not answer). The reads go through
    /// the link's client aside, so that they never hold the renewals' connection.
    async fn revoked(&self) -> Revocation {
        loop {
            tokio::time::sleep(SEAT_CHECK).await;
            let client = self.link.aside();
            if let Ok(lock) = super::queue::lock_item_through(&self.link, client, &self.name).await
                && lock.held_by(&self.owner).is_none()
            {
                return Revocation::Announced;
            }
        }
    }
}
