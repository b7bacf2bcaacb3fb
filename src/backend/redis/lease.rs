//! [`RedisLease`]: one held slot (or shared hold), renewed and released by scripts that act only
//! after the server has checked that this run still owns it: renewal never brings back a hold
//! that expired.
//!
//! A renewal has its own deadline, shorter than the supervisor's renewal interval, so a silent
//! server yields an unconfirmed renewal (retried) rather than a hang; the supervisor's boot-clock
//! deadline decides when the command must stop. `release --force` publishes on this holder's own
//! revocation channel, which the lease listens to (on a connection of its own, opened once the
//! command runs) so the supervisor can check at once rather than at the next renewal.
//!
//! [`Hold`] (the renew and release invocations) and [`listen_for_revocation`] serve redlock's
//! lease too, which sends the same scripts to every master.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::doorbell::Subscription;
use super::keys::Keys;
use super::scripts::{self, Call};
use crate::backend::waiting::line::Doorbell;
use crate::backend::waiting::policy::{SAFETY_RECHECK, renew_timeout};
use crate::backend::{BackendError, Grant, Lease, Mode, Released, RenewError, Renewal, Revocation};

/// How long after the command started the holder begins listening for a forced release: a
/// short command never needs the second connection, and the check that follows the subscription
/// covers a release that came before it.
const LISTEN_AFTER: Duration = Duration::from_millis(250);

/// A run's hold on a name as the owner-checked scripts see it, on one Redis server or on each
/// redlock master: the name's keys, the mode, this run's owner id and what was granted.
pub struct Hold {
    keys: Keys,
    mode: Mode,
    owner: String,
    grant: Grant,
}

impl Hold {
    pub fn new(keys: Keys, mode: Mode, owner: String, grant: Grant) -> Self {
        Hold {
            keys,
            mode,
            owner,
            grant,
        }
    }

    pub fn grant(&self) -> Grant {
        self.grant
    }

    /// The renewal of the hold (its slot, or its shared hold) for `ttl_ms` more.
    pub fn renew_call(&self, ttl_ms: u64) -> Call {
        match self.mode {
            Mode::Exclusive => Call::new(&scripts::RENEW).key(self.keys.slot(self.grant.slot)),
            Mode::Shared => Call::new(&scripts::RENEW_SHARED).key(self.keys.readers()),
        }
        .arg(&self.owner)
        .arg(ttl_ms)
    }

    /// The release of the hold, which wakes whoever is next.
    pub fn release_call(&self) -> Call {
        match self.mode {
            Mode::Exclusive => Call::new(&scripts::RELEASE).key(self.keys.slot(self.grant.slot)),
            Mode::Shared => Call::new(&scripts::RELEASE_SHARED)
                .key(self.keys.readers())
                .key(self.keys.rinfo()),
        }
        .key(self.keys.meta())
        .key(self.keys.queue())
        .key(self.keys.xqueue())
        .arg(&self.owner)
        .arg(self.keys.wake_prefix())
    }

    /// The channel `release --force` tells this holder on.
    pub fn revoke_channel(&self) -> String {
        format!("{}{}", self.keys.revoke_prefix(), self.owner)
    }
}

/// A slot or shared hold of this run.
pub struct RedisLease {
    link: Arc<Link>,
    hold: Hold,
    ttl_ms: u64,
    /// The subscription to this holder's revocation channel, once made.
    revocations: tokio::sync::Mutex<Option<Subscription>>,
}

impl RedisLease {
    pub fn new(link: Arc<Link>, keys: Keys, mode: Mode, owner: String, grant: Grant) -> Self {
        let ttl = grant.ttl.unwrap_or_default();
        RedisLease {
            link,
            hold: Hold::new(keys, mode, owner, grant),
            ttl_ms: ttl.as_millis().try_into().unwrap_or(u64::MAX),
            revocations: tokio::sync::Mutex::new(None),
        }
    }
}

#[async_trait]
impl Lease for RedisLease {
    fn grant(&self) -> Grant {
        self.hold.grant()
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let call = self.hold.renew_call(self.ttl_ms);
        let limit = renew_timeout(Duration::from_millis(self.ttl_ms));
        match call.run_repeatable::<i64>(&self.link, limit).await {
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

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let call = self.hold.release_call();
        let released: i64 = call.run_repeatable(&self.link, REQUEST_TIMEOUT).await?;
        Ok(match released {
            0 => Released::AlreadyGone,
            _ => Released::Given,
        })
    }

    async fn revoked(&self) -> Revocation {
        let channel = self.hold.revoke_channel();
        let open = || Subscription::open(&self.link, &channel);
        listen_for_revocation(&self.revocations, "the revocation channel broke", open).await
    }
}

/// What a lease's `revoked` does on a Redis server or on redlock masters: resolves when the
/// holder's revocation channel (kept in `listener`, opened with `open`) rings, or once a broken
/// or missing one is open again, after [`LISTEN_AFTER`] (so a short command never opens it), so
/// that the supervisor checks at once ([`Revocation::MayHaveMissed`]): a release that came before
/// the listener is found too.
/// `broke` is what the debug message says when the listener broke.
pub async fn listen_for_revocation<B, F>(
    listener: &tokio::sync::Mutex<Option<B>>,
    broke: &str,
    open: impl Fn() -> F,
) -> Revocation
where
    B: Doorbell,
    F: Future<Output = Result<B, BackendError>>,
{
    let mut listener = listener.lock().await;
    if let Some(current) = listener.as_mut() {
        if current.rung().await {
            return Revocation::Announced;
        }
        crate::debug!("{broke}; listening again");
        *listener = None;
    }
    tokio::time::sleep(LISTEN_AFTER).await;
    let mut told = false;
    loop {
        match open().await {
            Ok(made) => {
                *listener = Some(made);
                return Revocation::MayHaveMissed;
            }
            // Said once (a user whose ACL forbids SUBSCRIBE would hear it at every try).
            Err(e) if !told => {
                crate::warn!(
                    "cannot listen for a forced release ({e}); one is noticed at the next renewal"
                );
                told = true;
            }
            Err(e) => crate::debug!("cannot listen for a forced release ({e})"),
        }
        tokio::time::sleep(SAFETY_RECHECK).await;
    }
}
