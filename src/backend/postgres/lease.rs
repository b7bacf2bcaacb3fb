//! [`PostgresLease`]: one held slot, renewed and released by statements that act only on this
//! run's own row — renewal only while the row has not expired by the server's clock, so an expired
//! lease is never brought back.
//!
//! A renewal has its own deadline, shorter than the supervisor's renewal interval, so a silent
//! server yields an unconfirmed renewal (retried on a fresh connection) rather than a hang; the
//! supervisor's boot-clock deadline decides when the command must stop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::types::Type;

use super::connect::{Link, REQUEST_TIMEOUT};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, Grant, Lease, RenewError, Renewal};

/// A slot held by this run.
pub struct PostgresLease {
    link: Arc<Link>,
    name: String,
    channel: String,
    owner: String,
    slot: i32,
    ttl_ms: i64,
    grant: Grant,
}

impl PostgresLease {
    pub fn new(
        link: Arc<Link>,
        name: String,
        channel: String,
        owner: String,
        grant: Grant,
    ) -> Self {
        let ttl = grant.ttl.unwrap_or_default();
        PostgresLease {
            link,
            name,
            channel,
            owner,
            slot: i32::try_from(grant.slot).unwrap_or(i32::MAX),
            ttl_ms: ttl.as_millis().try_into().unwrap_or(i64::MAX),
            grant,
        }
    }
}

#[async_trait]
impl Lease for PostgresLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let renewed = self
            .link
            .query(
                renew_timeout(Duration::from_millis(self.ttl_ms.unsigned_abs())),
                &self.link.sql().renew,
                &[
                    (&self.name, Type::TEXT),
                    (&self.slot, Type::INT4),
                    (&self.owner, Type::TEXT),
                    (&self.ttl_ms, Type::INT8),
                ],
            )
            .await
            .map_err(RenewError::Unconfirmed)?;
        match renewed.is_empty() {
            false => Ok(Renewal {
                ttl: Some(Duration::from_millis(self.ttl_ms.unsigned_abs())),
            }),
            true => Err(RenewError::Lost(format!(
                "the lease on {} is gone or has another holder (it expired, or was broken with release --force)",
                self.link.endpoint()
            ))),
        }
    }

    async fn release(self: Box<Self>) -> Result<(), BackendError> {
        let released = self
            .link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().release,
                &[
                    (&self.name, Type::TEXT),
                    (&self.slot, Type::INT4),
                    (&self.owner, Type::TEXT),
                    (&self.channel, Type::TEXT),
                ],
            )
            .await?;
        if released.is_empty() {
            crate::info!("the lease was no longer this run's; nothing to release");
        }
        Ok(())
    }
}
