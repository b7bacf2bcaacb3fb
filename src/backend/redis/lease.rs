//! [`RedisLease`]: one held slot, renewed with `PEXPIRE` and released with `DEL`, both only after
//! the server has checked that this run still owns it.
//!
//! A renewal has its own deadline, shorter than the supervisor's renewal interval, so a silent
//! server yields an unconfirmed renewal (retried) rather than a hang; the supervisor's boot-clock
//! deadline decides when the command must stop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::scripts;
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, Grant, Lease, RenewError, Renewal};

/// A slot held by this run.
pub struct RedisLease {
    link: Arc<Link>,
    slot_key: String,
    channel: String,
    owner: String,
    ttl_ms: u64,
    grant: Grant,
}

impl RedisLease {
    pub fn new(
        link: Arc<Link>,
        slot_key: String,
        channel: String,
        owner: String,
        grant: Grant,
    ) -> Self {
        let ttl = grant.ttl.unwrap_or_default();
        RedisLease {
            link,
            slot_key,
            channel,
            owner,
            ttl_ms: ttl.as_millis().try_into().unwrap_or(u64::MAX),
            grant,
        }
    }
}

#[async_trait]
impl Lease for RedisLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let mut invocation = scripts::RENEW.prepare_invoke();
        invocation
            .key(&self.slot_key)
            .arg(&self.owner)
            .arg(self.ttl_ms);
        match self
            .link
            .script::<i64>(
                renew_timeout(Duration::from_millis(self.ttl_ms)),
                &invocation,
            )
            .await
        {
            Ok(1) => Ok(Renewal {
                ttl: Some(Duration::from_millis(self.ttl_ms)),
            }),
            Ok(_) => Err(RenewError::Lost(format!(
                "the lease on {} is gone or has another holder (it expired, was broken with release --force, or the server lost it)",
                self.link.endpoint()
            ))),
            Err(e) => Err(RenewError::Unconfirmed(e)),
        }
    }

    async fn release(self: Box<Self>) -> Result<(), BackendError> {
        let mut invocation = scripts::RELEASE.prepare_invoke();
        invocation
            .key(&self.slot_key)
            .arg(&self.owner)
            .arg(&self.channel);
        let released: i64 = self.link.script(REQUEST_TIMEOUT, &invocation).await?;
        if released == 0 {
            crate::info!("the lease was no longer this run's; nothing to release");
        }
        Ok(())
    }
}
