//! [`RedlockLease`]: one hold on a quorum of masters, renewed and released by the Redis backend's
//! owner-checked scripts, sent to every master at once.
//!
//! A renewal is confirmed when a quorum of masters extended the hold, each request within the
//! renewal's deadline counted from when it was sent; the lease is then known to last its
//! *validity* from that send (the TTL less the clock drift), which is what the supervisor is told,
//! so that its stop point allows for masters whose clocks run a little fast. When more masters than
//! a quorum can spare answer that the hold is gone, the lease is lost. A renewal never brings a
//! hold back on a master that lost it. `release --force` publishes on this holder's revocation
//! channel on every master, which the lease listens to (from 250 ms into the command) so that the
//! supervisor renews at once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::bells::Bells;
use super::masters::{Masters, STRAGGLERS};
use super::timing::{millis, validity};
use crate::backend::redis::connect::REQUEST_TIMEOUT;
use crate::backend::redis::keys::Keys;
use crate::backend::redis::lease::{Hold, listen_for_revocation};
use crate::backend::waiting::policy::renew_timeout;
use crate::backend::{BackendError, Grant, Lease, Mode, Released, RenewError, Renewal, Revocation};

/// A hold of this run's on a quorum of masters.
pub struct RedlockLease {
    masters: Arc<Masters>,
    hold: Hold,
    /// The lease length each master grants.
    ttl: Duration,
    revocations: tokio::sync::Mutex<Option<Bells>>,
}

impl RedlockLease {
    pub fn new(masters: Arc<Masters>, keys: Keys, mode: Mode, owner: String, grant: Grant) -> Self {
        RedlockLease {
            masters,
            ttl: grant.ttl.unwrap_or_default(),
            hold: Hold::new(keys, mode, owner, grant),
            revocations: tokio::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl Lease for RedlockLease {
    fn grant(&self) -> Grant {
        self.hold.grant()
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let call = self.hold.renew_call(millis(self.ttl));
        let masters = &self.masters;
        let (n, quorum) = (masters.len(), masters.quorum());
        let mut round = masters.call_repeatable::<i64>(&call, renew_timeout(self.ttl));
        let (mut confirmed, mut gone, mut failures) = (0, 0, Vec::new());
        while let Some((i, answer)) = round.next().await {
            match answer {
                Ok(1) => confirmed += 1,
                Ok(_) => gone += 1,
                Err(e) => failures.push((i, e)),
            }
            if confirmed >= quorum {
                for (_, e) in &failures {
                    crate::debug!("renewal not confirmed on a master: {e}");
                }
                return Ok(Renewal {
                    ttl: Some(validity(self.ttl)),
                });
            }
            if gone > n - quorum {
                return Err(RenewError::Lost(format!(
                    "the lease is gone on {gone} of the {n} redlock masters, so no quorum holds it \
                     (it expired, was broken with release --force, or masters lost it)"
                )));
            }
            if gone + failures.len() > n - quorum {
                break;
            }
        }
        // The round stops as soon as a quorum is out of reach: masters still to answer are not
        // counted either way.
        let mut reason = format!(
            "{} of the {n} masters could not confirm it, so no quorum of {quorum} can \
             ({confirmed} confirmed)",
            gone + failures.len()
        );
        if gone > 0 {
            reason.push_str(&format!("; {gone} no longer hold it"));
        }
        for (_, e) in &failures {
            reason.push_str(&format!("; {e}"));
        }
        Err(RenewError::Unconfirmed(BackendError::Failed {
            endpoint: "the redlock masters".into(),
            reason,
        }))
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let call = self.hold.release_call();
        let round = self.masters.call_repeatable::<i64>(&call, REQUEST_TIMEOUT);
        let released = self.masters.most_of(round, STRAGGLERS).await?;
        Ok(match released.iter().all(|(_, n)| *n == 0) {
            true => Released::AlreadyGone,
            false => Released::Given,
        })
    }

    async fn revoked(&self) -> Revocation {
        let channel = self.hold.revoke_channel();
        let open = || Bells::open(&self.masters, &channel);
        listen_for_revocation(&self.revocations, "a revocation channel broke", open).await
    }
}
