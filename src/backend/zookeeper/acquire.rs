//! Acquiring on ZooKeeper: a session per pass through the line, asking for the TTL as its
//! timeout, and the rules every networked waiter follows around it — leave the line on every way
//! of giving up (deadline, cancellation, a newer `--supersede` waiter, an error), ride out an
//! outage of up to [`WAIT_OUTAGE`] once the ensemble has answered, and join again (on a new session,
//! at the back of the line, with a new token) when the place in line was lost — the session expired
//! while waiting (lockrun was paused, or cut off) or the znode went away.

use std::sync::Arc;

use async_trait::async_trait;

use super::contender::{Contender, Outcome};
use super::link::Link;
use crate::backend::waiting::networked::Waits;
use crate::backend::waiting::policy::{OUTAGE_PAUSE, Outage, WAIT_OUTAGE, owner_id};
use crate::backend::{AcquireRequest, Acquired, BackendError, Cancel, Inspect};
use crate::clock::BootInstant;

/// How many times a waiter whose place was lost joins again before giving up.
const MAX_REJOINS: u32 = 3;

#[async_trait]
impl Waits for Link {
    /// Becomes a holder of `request.name`, waiting until the request's deadline or `cancel`.
    async fn wait(
        link: &Arc<Self>,
        _shown: &str,
        request: &AcquireRequest,
        mut cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        let mut outage = Outage::for_request(request);
        let mut rejoins = 0;
        loop {
            let session = tokio::select! {
                session = open(link, request, &mut outage) => session?,
                () = cancel.as_mut() => return Ok(Acquired::Cancelled),
            };
            outage.ok();
            let mut contender = Contender::new(link, session, request, owner_id()?);
            let outcome = tokio::select! {
                outcome = contender.queue(&mut outage) => outcome,
                () = cancel.as_mut() => {
                    contender.leave().await;
                    return Ok(Acquired::Cancelled);
                }
            };
            let lost = match outcome {
                Ok(Outcome::Held(grant)) => {
                    return Ok(Acquired::Held(Box::new(contender.into_lease(grant))));
                }
                Ok(Outcome::Busy) => {
                    contender.leave().await;
                    return Ok(Acquired::Busy);
                }
                Ok(Outcome::Superseded(newer)) => {
                    contender.leave().await;
                    return Ok(Acquired::Superseded(newer));
                }
                Ok(Outcome::PlaceLost(why)) => {
                    contender.leave().await;
                    why
                }
                Err(e) => {
                    contender.leave().await;
                    return Err(e);
                }
            };
            if request.expired() {
                return Ok(Acquired::Busy);
            }
            if rejoins == MAX_REJOINS {
                return Err(BackendError::Failed {
                    endpoint: link.endpoints().to_owned(),
                    reason: format!("the place in line keeps being lost ({lost})"),
                });
            }
            rejoins += 1;
            crate::warn!("{lost}; joining the line of {} again", request.name);
        }
    }

    fn inspector(&self) -> &dyn Inspect {
        self
    }
}

/// A new session asking for the request's TTL. Before the ensemble ever answered, a failure is
/// final (nothing is known yet: exit 69); after, sessions are tried again through an outage.
async fn open(
    link: &Link,
    request: &AcquireRequest,
    outage: &mut Outage,
) -> Result<zookeeper_client::Client, BackendError> {
    loop {
        let sent_at = BootInstant::now();
        match link.session(request.ttl).await {
            Ok(session) => return Ok(session),
            Err(e) => outage.failed(e, sent_at, "open a session")?,
        }
        if request.expired() {
            return Err(BackendError::Unreachable {
                endpoint: link.endpoints().to_owned(),
                reason: format!(
                    "no session while the wait ran out (an outage of up to {} is ridden out)",
                    crate::messages::duration(WAIT_OUTAGE)
                ),
            });
        }
        tokio::time::sleep(OUTAGE_PAUSE).await;
    }
}
