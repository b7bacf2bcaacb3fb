//! A scripted lease for unit tests of the supervisor loop: its renewals can be made to confirm,
//! fail, hang or report the lease lost, a forced release can be announced, and it counts what was
//! asked of it. It is never a stand-in for a real backend's own tests.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};
use crate::clock::BootInstant;

/// What the next renewals do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewals {
    /// Confirm for the grant's TTL.
    Confirm,
    /// Answer with an error worth retrying.
    Fail,
    /// Never answer.
    Hang,
    /// Answer that the lease is gone.
    Lose,
}

/// Counters and controls shared between a test and its lease.
#[derive(Debug)]
pub struct Script {
    pub renewals: Mutex<Renewals>,
    pub renew_calls: AtomicU32,
    pub released: AtomicBool,
    /// The release finds the lease no longer this run's (broken while the command ran).
    pub gone_at_release: AtomicBool,
    /// Announces a forced release to the supervisor.
    pub revoke: tokio::sync::Notify,
}

impl Script {
    pub fn new(renewals: Renewals) -> Arc<Self> {
        Arc::new(Script {
            renewals: Mutex::new(renewals),
            renew_calls: AtomicU32::new(0),
            released: AtomicBool::new(false),
            gone_at_release: AtomicBool::new(false),
            revoke: tokio::sync::Notify::new(),
        })
    }

    pub fn set(&self, renewals: Renewals) {
        *self.renewals.lock().unwrap() = renewals;
    }

    pub fn renew_calls(&self) -> u32 {
        self.renew_calls.load(Ordering::SeqCst)
    }
}

/// A lease granted at `sent_at` for `ttl`, renewed as the script says.
pub struct ScriptedLease {
    pub grant: Grant,
    pub script: Arc<Script>,
}

impl ScriptedLease {
    pub fn new(ttl: Duration, sent_at: BootInstant, script: Arc<Script>) -> Box<Self> {
        Box::new(ScriptedLease {
            grant: Grant {
                token: 1,
                slot: 0,
                ttl: Some(ttl),
                sent_at,
            },
            script,
        })
    }
}

#[async_trait]
impl Lease for ScriptedLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        self.script.renew_calls.fetch_add(1, Ordering::SeqCst);
        let behaviour = *self.script.renewals.lock().unwrap();
        match behaviour {
            Renewals::Confirm => Ok(Renewal {
                ttl: self.grant.ttl,
            }),
            Renewals::Fail => Err(RenewError::Unconfirmed(BackendError::Failed {
                endpoint: "memory".into(),
                reason: "scripted failure".into(),
            })),
            Renewals::Hang => std::future::pending().await,
            Renewals::Lose => Err(RenewError::Lost("scripted loss".into())),
        }
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        self.script.released.store(true, Ordering::SeqCst);
        Ok(match self.script.gone_at_release.load(Ordering::SeqCst) {
            true => Released::AlreadyGone,
            false => Released::Given,
        })
    }

    async fn revoked(&self) -> Revocation {
        self.script.revoke.notified().await;
        Revocation::Announced
    }
}
