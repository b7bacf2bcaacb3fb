//! [`PostgresLease`]: one hold (an exclusive slot or a shared hold), renewed and released by
//! statements that act only on this run's own row — renewal only while the row has not expired by
//! the server's clock, so an expired lease is never brought back, and durably
//! (`synchronous_commit` on), so a crash cannot take back a renewal that was confirmed.
//!
//! A renewal has its own deadline, shorter than the supervisor's renewal interval, so a silent
//! server yields an unconfirmed renewal (retried on a fresh connection) rather than a hang; the
//! supervisor's boot-clock deadline decides when the command must stop.
//!
//! `release --force` `NOTIFY`s the holder on its own channel, which [`Lease::revoked`] listens
//! to on the run's one connection. Behind a transaction pooler, where `LISTEN` cannot work, it
//! looks at its own row instead, twice a second, so the command still stops within a second.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::types::Type;

use super::link::{Link, REQUEST_TIMEOUT, Subscribed};
use super::schema;
use crate::backend::waiting::policy::{SAFETY_RECHECK, renew_timeout};
use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};

/// How often a holder behind a pooler checks that its row is still there.
const HOLD_CHECK: Duration = Duration::from_millis(500);

/// A hold of this run.
pub struct PostgresLease {
    link: Arc<Link>,
    name: String,
    /// The row's slot: the grant's for an exclusive hold, a negative one for a shared hold.
    slot: i32,
    owner: String,
    ttl_ms: i64,
    grant: Grant,
}

impl PostgresLease {
    pub fn new(link: Arc<Link>, name: String, slot: i32, owner: String, grant: Grant) -> Self {
        let ttl = grant.ttl.unwrap_or_default();
        PostgresLease {
            link,
            name,
            slot,
            owner,
            ttl_ms: ttl.as_millis().try_into().unwrap_or(i64::MAX),
            grant,
        }
    }

    /// Resolves once this hold's row is gone, looking every [`HOLD_CHECK`].
    async fn until_row_gone(&self) {
        loop {
            tokio::time::sleep(HOLD_CHECK).await;
            // On a task of its own: a look cut short must not cost the connection.
            let link = Arc::clone(&self.link);
            let (name, slot, owner) = (self.name.clone(), self.slot, self.owner.clone());
            let look = tokio::spawn(async move {
                link.query(
                    REQUEST_TIMEOUT,
                    &link.sql().holds,
                    &[
                        (&name, Type::TEXT),
                        (&slot, Type::INT4),
                        (&owner, Type::TEXT),
                    ],
                )
                .await
            });
            match look.await {
                Ok(Ok(rows)) if rows.is_empty() => return,
                // Renewals find out about an unreachable server.
                _ => {}
            }
        }
    }
}

#[async_trait]
impl Lease for PostgresLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let ttl = Duration::from_millis(self.ttl_ms.unsigned_abs());
        let renewed = self
            .link
            .query_repeatable(
                renew_timeout(ttl),
                &self.link.sql().renew,
                &[
                    (&self.name, Type::TEXT),
                    (&self.slot, Type::INT4),
                    (&self.owner, Type::TEXT),
                    (&self.ttl_ms, Type::INT8),
                ],
            )
            .await
            .map_err(|f| RenewError::Unconfirmed(f.into()))?;
        match renewed.is_empty() {
            false => Ok(Renewal { ttl: Some(ttl) }),
            true => Err(RenewError::Lost(format!(
                "the lease on {} is gone or has another holder (it expired, or was broken with release --force)",
                self.link.endpoint()
            ))),
        }
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let legacy = schema::legacy_channel(self.link.schema(), &self.name);
        let rows = self
            .link
            .query_repeatable(
                REQUEST_TIMEOUT,
                &self.link.sql().release,
                &[
                    (&self.name, Type::TEXT),
                    (&self.slot, Type::INT4),
                    (&self.owner, Type::TEXT),
                    (&legacy, Type::TEXT),
                ],
            )
            .await?;
        let released = rows
            .first()
            .and_then(|row| row.try_get::<_, Option<bool>>(0).ok().flatten());
        Ok(match released {
            Some(true) => Released::Given,
            _ => Released::AlreadyGone,
        })
    }

    async fn revoked(&self) -> Revocation {
        let channel = schema::owner_channel(&self.owner);
        loop {
            let hold = Some((self.name.as_str(), self.slot, self.owner.as_str()));
            match self.link.subscribe(&channel, hold).await {
                // Gone before the subscription took.
                Ok((_, Some(false))) => return Revocation::Announced,
                Ok((Subscribed::Listening(mut heard), _)) => {
                    let seen = heard.borrow_and_update().revocations;
                    loop {
                        match heard.changed().await {
                            Ok(()) if heard.borrow_and_update().revocations > seen => {
                                return Revocation::Announced;
                            }
                            Ok(()) => {}
                            // The connection ended: anything could have been missed; look now.
                            Err(_) => return Revocation::MayHaveMissed,
                        }
                    }
                }
                Ok((Subscribed::Pooled, _)) => {
                    self.until_row_gone().await;
                    return Revocation::Announced;
                }
                Err(e) => crate::debug!("cannot listen for a forced release ({})", e.error),
            }
            tokio::time::sleep(SAFETY_RECHECK).await;
        }
    }
}
