//! One pass through the line, on one session: join with an ephemeral sequential znode, look at the
//! line, and either hold or watch only what can let this contender in, until it holds, gives up, or
//! loses its place (its session expired, or its znode went away).
//!
//! - **Joining** is one create. Its name carries this run's random owner id, so a create whose
//!   reply was lost is found again among the children (a retry adopts it) instead of leaving a
//!   ghost in line; should a retry still have made a second znode, the first is kept and the
//!   second deleted. A missing name node (or chroot, or root) is created, and the create sent
//!   again.
//! - **Looking** is one read of the children: the line's order is the znodes' sequence numbers
//!   ([`Line`]). The read proves the session alive when it was sent: a contender that holds counts
//!   its lease from there.
//! - **Watching**: an exists watch on each znode that blocks this contender ([`Line::blockers`]); a
//!   blocker already gone by then (between the read and the watch) is a reason to look again at
//!   once. A `--supersede` waiter also watches the name's supersede record.
//! - **Holding** with `--limit` above 1 claims a free slot znode (ephemeral, so it goes with the
//!   session); a waiter stamps its record with the time it got the lease once its command runs.
//! - **Leaving** is closing the session: its znodes go in one transaction, and the next waiter is
//!   told at once.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{self as zk, CreateMode};

use super::bells::{self, Rung};
use super::lease::ZkLease;
use super::line::Line;
use super::link::{Link, REQUEST_TIMEOUT, session_gone};
use super::paths::SUPERSEDE;
use super::record::{Newest, Record, Stored};
use super::session::{close, ended};
use super::{slots, supersede};
use crate::backend::waiting::policy::{LEAVE_TIMEOUT, Outage};
use crate::backend::{AcquireRequest, BackendError, Grant, HolderInfo, Mode};
use crate::clock::{BootInstant, BootTimer};

/// Pause before trying again when the ensemble cannot be asked.
const RETRY: Duration = Duration::from_millis(250);

/// How one pass ended.
pub enum Outcome {
    Held(Grant),
    /// Not a holder by the deadline (or at once, when not waiting).
    Busy,
    /// A newer `--supersede` waiter joined.
    Superseded(HolderInfo),
    /// The place in line is gone (session expired, znode deleted): join again.
    PlaceLost(&'static str),
}

/// This run's znode, once created.
struct Joined {
    /// The child's name under the name's node.
    node: String,
    /// Its create zxid: the fencing token, should it hold.
    token: i64,
}

/// One run in line on one session.
pub struct Contender<'a> {
    link: &'a Arc<Link>,
    session: Option<zk::Client>,
    request: &'a AcquireRequest,
    owner: String,
    record: Record,
    dir: String,
    joined: Option<Joined>,
    slot: Option<u32>,
    waited: bool,
}

impl<'a> Contender<'a> {
    pub fn new(
        link: &'a Arc<Link>,
        session: zk::Client,
        request: &'a AcquireRequest,
        owner: String,
    ) -> Self {
        let record = Record {
            holder: request.holder.stamped(),
            limit: limit(request),
            ttl_ms: session
                .session_timeout()
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
        };
        link.share(&session);
        Contender {
            link,
            dir: link.paths.dir(&request.name),
            session: Some(session),
            request,
            owner,
            record,
            joined: None,
            slot: None,
            waited: false,
        }
    }

    fn session(&self) -> &zk::Client {
        self.session
            .as_ref()
            .expect("the session is kept until the contender ends")
    }

    /// Joins the line and waits for a place among the holders.
    pub async fn queue(&mut self, outage: &mut Outage) -> Result<Outcome, BackendError> {
        if !self.request.waits() && self.busy_at_a_glance().await? {
            return Ok(Outcome::Busy);
        }
        if let Err(lost) = self.join(outage).await? {
            return Ok(Outcome::PlaceLost(lost));
        }
        if self.request.supersede {
            let token = self.token();
            let newest = Newest {
                token,
                holder: self.record.holder.clone(),
            };
            supersede::publish(self.link, self.session(), &self.request.name, &newest).await?;
        }
        let mut timer: Option<BootTimer> = None;
        loop {
            let sent_at = BootInstant::now();
            let children = match self.children().await {
                Ok(children) => {
                    outage.ok();
                    children
                }
                Err(zk::Error::NoNode) => return Ok(Outcome::PlaceLost("the name's node is gone")),
                Err(e) => match self
                    .wait_failed(outage, &e, sent_at, "check the lock")
                    .await?
                {
                    Some(lost) => return Ok(lost),
                    None => continue,
                },
            };
            let line = Line::of(&children);
            let Some(at) = line.position(&self.owner) else {
                return Ok(Outcome::PlaceLost("this run's place in line is gone"));
            };
            if self
                .joined
                .as_ref()
                .is_some_and(|j| j.node != line.contenders[at].node)
            {
                if let Err(e) = self.adopt_first(&line).await
                    && let Some(lost) = self
                        .wait_failed(outage, &e, sent_at, "check the lock")
                        .await?
                {
                    return Ok(lost);
                }
                continue;
            }
            let limit = limit(self.request);
            if line.holds(at, limit) {
                if let Some(newer) = self.superseded().await? {
                    return Ok(Outcome::Superseded(newer));
                }
                let slot = self.claim_slot(&children, limit).await?;
                return Ok(Outcome::Held(Grant {
                    token: u64::try_from(self.token()).unwrap_or(0),
                    slot,
                    ttl: Some(self.session().session_timeout()),
                    sent_at,
                }));
            }
            if !self.request.waits() || self.request.expired() {
                return Ok(Outcome::Busy);
            }
            if !self.waited {
                crate::info!("waiting for {} ({at} ahead)", self.request.name);
                self.waited = true;
            }
            let watching = bells::ring(
                self.link,
                self.session(),
                &self.dir,
                line.blockers(at, limit),
                self.request
                    .supersede
                    .then(|| self.link.paths.child(&self.request.name, SUPERSEDE))
                    .map(|path| (path, self.token())),
            );
            let mut bells = match watching.await {
                Ok(Rung::Set(bells)) => bells,
                Ok(Rung::LookAgain) => continue,
                Ok(Rung::Superseded(newer)) => return Ok(Outcome::Superseded(newer)),
                Err(e) => match self
                    .wait_failed(outage, &e, sent_at, "watch the line")
                    .await?
                {
                    Some(lost) => return Ok(lost),
                    None => continue,
                },
            };
            let timer = timer.get_or_insert_with(BootTimer::for_waiting);
            let session = self.session().clone();
            tokio::select! {
                _ = bells.join_next(), if !bells.is_empty() => {}
                slept = timer.sleep_until(self.request.deadline) => {
                    slept.map_err(|e| BackendError::Failed {
                        endpoint: self.link.endpoints().to_owned(),
                        reason: format!("timer failed: {}", crate::messages::io(&e)),
                    })?;
                }
                () = ended(&session) => {}
            }
        }
    }

    /// The try-once case: whether the line, as it is, leaves no room for this run (so that a busy
    /// name is answered without joining and leaving its line).
    async fn busy_at_a_glance(&self) -> Result<bool, BackendError> {
        let children = match self.children().await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(self.link.failed(&e)),
        };
        let line = Line::of(&children);
        let writers = line
            .contenders
            .iter()
            .filter(|c| c.mode == Mode::Exclusive)
            .count();
        Ok(match self.request.mode {
            Mode::Shared => writers > 0,
            Mode::Exclusive => {
                writers < line.contenders.len() || writers >= limit(self.request) as usize
            }
        })
    }

    /// Creates this run's znode; `Ok(Err(why))` when the session ended first.
    async fn join(
        &mut self,
        outage: &mut Outage,
    ) -> Result<Result<(), &'static str>, BackendError> {
        let path = self
            .link
            .paths
            .contender(&self.request.name, self.request.mode, &self.owner);
        let options = self.link.options(CreateMode::EphemeralSequential);
        let data = self.record.encode();
        loop {
            let sent_at = BootInstant::now();
            let created = self
                .link
                .call(
                    REQUEST_TIMEOUT,
                    self.session().create(&path, &data, &options),
                )
                .await;
            match created {
                Ok((stat, sequence)) => {
                    self.joined = Some(Joined {
                        node: path
                            .rsplit('/')
                            .next()
                            .map_or_else(String::new, |prefix| format!("{prefix}{sequence}")),
                        token: stat.czxid,
                    });
                    return Ok(Ok(()));
                }
                Err(zk::Error::NoNode) => {
                    let made = self.link.make_dir(self.session(), &self.request.name).await;
                    match made {
                        Ok(()) => {}
                        Err(e) if session_gone(&e) => return Ok(Err("the session expired")),
                        Err(e) if transient(&e) => {
                            outage.failed(self.link.failed(&e), sent_at, "join the line")?;
                        }
                        Err(e) => return Err(self.link.failed(&e)),
                    }
                }
                Err(e) if session_gone(&e) => return Ok(Err("the session expired")),
                Err(e) if transient(&e) => {
                    outage.failed(self.link.failed(&e), sent_at, "join the line")?;
                    // The create may have been applied and only its answer lost: find it, and
                    // create again only once the line says it is not there.
                    loop {
                        let sent_at = BootInstant::now();
                        match self.find_own().await {
                            Ok(Some(found)) => {
                                self.joined = Some(found);
                                return Ok(Ok(()));
                            }
                            Ok(None) => break,
                            Err(e) if session_gone(&e) => return Ok(Err("the session expired")),
                            Err(e) => {
                                outage.failed(self.link.failed(&e), sent_at, "join the line")?;
                                tokio::time::sleep(RETRY).await;
                            }
                        }
                    }
                }
                Err(e) => return Err(self.link.failed(&e)),
            }
        }
    }

    /// This run's znode, if a create whose answer was lost made one (the first in line, should
    /// there be several).
    async fn find_own(&self) -> Result<Option<Joined>, zk::Error> {
        let children = match self.children().await {
            Err(zk::Error::NoNode) => return Ok(None),
            read => read?,
        };
        let line = Line::of(&children);
        let Some(at) = line.position(&self.owner) else {
            return Ok(None);
        };
        let node = &line.contenders[at].node;
        let path = format!("{}/{node}", self.dir);
        let stat = self
            .link
            .call(REQUEST_TIMEOUT, self.session().check_stat(&path))
            .await?;
        crate::debug!("found the znode of a create whose answer was lost: {node}");
        Ok(stat.map(|stat| Joined {
            node: node.clone(),
            token: stat.czxid,
        }))
    }

    /// Keeps only this run's first znode in line when a lost answer left it two: the first is
    /// adopted (its place, its token), the others are deleted.
    /// A step of the wait (`what`, sent at `sent_at`) failed with `e`: the place is lost when the
    /// session expired; otherwise the failure counts toward the outage (which ends the wait once
    /// it lasted too long) and, after a pause, `None` tells the caller to look again.
    async fn wait_failed(
        &self,
        outage: &mut Outage,
        e: &zk::Error,
        sent_at: BootInstant,
        what: &str,
    ) -> Result<Option<Outcome>, BackendError> {
        if session_gone(e) {
            return Ok(Some(Outcome::PlaceLost(
                "the session expired while waiting",
            )));
        }
        outage.failed(self.link.failed(e), sent_at, what)?;
        tokio::time::sleep(RETRY).await;
        Ok(None)
    }

    async fn adopt_first(&mut self, line: &Line) -> Result<(), zk::Error> {
        let Some(found) = self.find_own().await? else {
            return Ok(());
        };
        for extra in line
            .contenders
            .iter()
            .filter(|c| c.owner == self.owner && c.node != found.node)
        {
            let path = format!("{}/{}", self.dir, extra.node);
            let deleted = self.session().delete(&path, None);
            if let Err(e) = self.link.call(REQUEST_TIMEOUT, deleted).await {
                crate::debug!("cannot delete a second znode of this run ({e})");
            }
        }
        self.joined = Some(found);
        Ok(())
    }

    async fn children(&self) -> Result<Vec<String>, zk::Error> {
        self.link
            .call(REQUEST_TIMEOUT, self.session().list_children(&self.dir))
            .await
    }

    fn token(&self) -> i64 {
        self.joined.as_ref().map_or(0, |j| j.token)
    }

    /// For a `--supersede` run whose turn it is: the newer waiter that took its place, if any.
    async fn superseded(&self) -> Result<Option<HolderInfo>, BackendError> {
        if !self.request.supersede {
            return Ok(None);
        }
        let path = self.link.paths.child(&self.request.name, SUPERSEDE);
        supersede::newer(self.link, self.session(), &path, self.token())
            .await
            .map_err(|e| self.link.failed(&e))
    }

    /// A free semaphore slot (slot 0 without `--limit`).
    async fn claim_slot(&mut self, children: &[String], limit: u32) -> Result<u32, BackendError> {
        if limit == 1 {
            return Ok(0);
        }
        let own = self
            .joined
            .as_ref()
            .map_or_else(String::new, |j| j.node.clone());
        let slot = slots::claim(
            self.link,
            self.session(),
            &self.request.name,
            &own,
            children,
            limit,
        )
        .await?;
        self.slot = Some(slot);
        Ok(slot)
    }

    /// The lease this run holds now.
    pub fn into_lease(mut self, grant: Grant) -> ZkLease {
        let node = self
            .joined
            .as_ref()
            .map_or_else(String::new, |j| j.node.clone());
        let stamp = self.waited.then(|| {
            Record {
                holder: self.request.holder.stamped(),
                ..self.record.clone()
            }
            .encode()
        });
        let session = self
            .session
            .take()
            .expect("the session is kept until the contender ends");
        let slot = self
            .slot
            .map(|slot| self.link.paths.slot(&self.request.name, slot));
        ZkLease::new(
            Arc::clone(self.link),
            session,
            format!("{}/{node}", self.dir),
            slot,
            grant,
            stamp,
        )
    }

    /// Leaves the line (and any slot) by closing the session, within the leave timeout.
    pub async fn leave(mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        self.link.unshare(&session);
        if !close(session, LEAVE_TIMEOUT).await {
            crate::debug!("leaving the line took too long; the place lapses with the session");
        }
    }
}

/// The semaphore size a request counts by: 1 for a shared one.
fn limit(request: &AcquireRequest) -> u32 {
    match request.mode {
        Mode::Shared => 1,
        Mode::Exclusive => request.limit.max(1),
    }
}

/// Whether `e` is no answer at all (worth trying again), rather than the ensemble's answer.
pub fn transient(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::Throttled
            | zk::Error::Custom(_)
    )
}
