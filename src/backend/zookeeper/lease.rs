//! [`ZkLease`]: a held place, which lasts as long as the session does.
//!
//! - **Renewal** is an explicit request — `exists` on the holder's own znode — whose answer proves
//!   that the session was alive at the server when the request was sent (the server counts the
//!   session timeout from the last time it heard from the client), and that the znode is still
//!   this session's. The supervisor counts the granted session timeout from the send. A session
//!   that expired is final: the lease is never resumed on another session.
//! - **Forced release** deletes the holder's znode; the holder keeps an exists watch on it, so it
//!   is told at once ([`Lease::revoked`]) and renews to find out.
//! - **Release** deletes the znode (and any slot, in the same transaction), which wakes the next
//!   waiter as soon as it commits, then closes the session. Closing alone would do (the session's
//!   znodes go with it), but a close takes the server longer to confirm than a delete.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client as zk;

use super::link::{Link, REQUEST_TIMEOUT, session_gone};
use super::session::close;
use crate::backend::answer;
use crate::backend::waiting::policy::{SAFETY_RECHECK, renew_timeout};
use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};

/// How long a release waits for the ensemble to confirm that the session is closed; the session
/// holds nothing by then, and expires by itself if the close went unheard.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// A holder's session and znode.
pub struct ZkLease {
    link: Arc<Link>,
    session: zk::Client,
    /// The full path of the holder's znode.
    node: String,
    /// The full path of its slot's znode, with `--limit` above 1.
    slot: Option<String>,
    grant: Grant,
    ttl: Duration,
    /// The record with the time the lease was taken, for a run that waited (written once its
    /// command runs).
    stamp: Mutex<Option<Vec<u8>>>,
}

impl ZkLease {
    pub fn new(
        link: Arc<Link>,
        session: zk::Client,
        node: String,
        slot: Option<String>,
        grant: Grant,
        stamp: Option<Vec<u8>>,
    ) -> Self {
        ZkLease {
            link,
            ttl: grant.ttl.unwrap_or_else(|| session.session_timeout()),
            session,
            node,
            slot,
            grant,
            stamp: Mutex::new(stamp),
        }
    }
}

#[async_trait]
impl Lease for ZkLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let limit = renew_timeout(self.ttl);
        match self
            .link
            .call(limit, self.session.check_stat(&self.node))
            .await
        {
            Ok(Some(stat)) if stat.ephemeral_owner == self.session.session_id().0 => Ok(Renewal {
                ttl: Some(self.ttl),
            }),
            Ok(_) => Err(RenewError::Lost(format!(
                "the holder's znode on {} is gone (broken with release --force, or the session expired)",
                self.link.endpoints()
            ))),
            Err(e) if session_gone(&e) => Err(RenewError::Lost(format!(
                "the ZooKeeper session on {} ended ({})",
                self.link.endpoints(),
                self.link.reason(&e)
            ))),
            Err(e) => Err(RenewError::Unconfirmed(self.link.failed(&e))),
        }
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        let ZkLease {
            link,
            session,
            node,
            slot,
            ..
        } = *self;
        let mut deleted = delete(&session, &node, slot.as_deref()).await;
        link.unshare(&session);
        if matches!(deleted, Err(zk::Error::Timeout | zk::Error::ConnectionLoss)) {
            // No answer on the run's own session: after the ensemble restarted, its client may
            // still be backing off between reconnections. A fresh session connects at once. The
            // znode is this run's alone, and the slot goes only together with it (one `multi`),
            // so this is still the owner's release.
            if let Ok(fresh) = link.inspector().await {
                deleted = delete(&fresh.client, &node, slot.as_deref()).await;
                fresh.done().await;
            }
        }
        let closed = close(session, CLOSE_WAIT).await;
        match deleted {
            Ok(()) => Ok(Released::Given),
            // Already gone (a forced release, or the session expired): nothing of this run's.
            Err(zk::Error::NoNode) => Ok(Released::AlreadyGone),
            // The session's end takes the znode with it, if the close was heard.
            Err(_) if closed => Ok(Released::Given),
            Err(e) => Err(link.failed(&e)),
        }
    }

    async fn revoked(&self) -> Revocation {
        let stamp = self
            .stamp
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(record) = stamp {
            // Before the watch is set, so that this write does not set it off.
            let stamped = self.session.set_data(&self.node, &record, None);
            if let Err(e) = self.link.call(REQUEST_TIMEOUT, stamped).await {
                crate::debug!("cannot record when the lease was taken ({e})");
            }
        }
        loop {
            let watched = self.session.check_and_watch_stat(&self.node);
            match self.link.call(REQUEST_TIMEOUT, watched).await {
                Ok((Some(_), watcher)) => {
                    watcher.changed().await;
                    return Revocation::Announced;
                }
                // Gone already, or the session with it: the renewal finds out.
                Ok((None, _)) => return Revocation::Announced,
                Err(e) if session_gone(&e) => return Revocation::Announced,
                Err(e) => crate::debug!("cannot watch for a forced release ({e})"),
            }
            tokio::time::sleep(SAFETY_RECHECK).await;
        }
    }
}

/// Deletes the holder's znode and its slot together.
async fn delete(session: &zk::Client, node: &str, slot: Option<&str>) -> Result<(), zk::Error> {
    let deleting = async {
        let Some(slot) = slot else {
            return session.delete(node, None).await;
        };
        let mut writer = session.new_multi_writer();
        writer.add_delete(slot, None)?;
        writer.add_delete(node, None)?;
        writer.commit().await.map(drop).map_err(zk::Error::from)
    };
    answer::within(REQUEST_TIMEOUT, deleting)
        .await
        .unwrap_or(Err(zk::Error::Timeout))
}
