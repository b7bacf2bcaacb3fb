//! [`MySqlLease`]: one held slot (or shared hold), renewed and released by statements that act
//! only on this run's own row — renewal only while the row has not expired by the server's clock,
//! so an expired lease is never brought back.
//!
//! A renewal has its own deadline, shorter than the supervisor's renewal interval, so a silent
//! server yields an unconfirmed renewal (retried on a fresh connection) rather than a hang; the
//! supervisor's boot-clock deadline decides when the command must stop.
//!
//! `release --force` is pushed: once the command has run a little, the lease opens a second
//! connection (holding `lockrun:BELL:r`) that sleeps in a statement as long as the hold is still
//! this run's; the forced release interrupts it with `KILL QUERY`, and [`Lease::revoked`]
//! resolves so that the supervisor renews at once and finds the hold gone.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::connect::{Link, REQUEST_TIMEOUT, discard};
use super::line::{cell, single};
use crate::backend::waiting::policy::{SAFETY_RECHECK, renew_timeout};
use crate::backend::{BackendError, Grant, Lease, Released, RenewError, Renewal, Revocation};

/// How long after the command started the holder begins listening for a forced release: a
/// short command never opens the second connection, and the listening statement's first look
/// finds a release that came before it.
const LISTEN_AFTER: Duration = Duration::from_millis(250);
/// One listening statement's sleep: below the session's statement timeout (5 s).
const LISTEN_SLEEP: Duration = Duration::from_secs(3);
/// `ER_QUERY_INTERRUPTED`.
const INTERRUPTED: u16 = 1317;

/// A hold of this run.
pub struct MySqlLease {
    link: Arc<Link>,
    name: String,
    owner: String,
    ttl: Duration,
    grant: Grant,
    listening: tokio::sync::Mutex<Listening>,
}

/// The state of the listening connection.
#[derive(Default)]
struct Listening {
    conn: Option<Conn>,
    /// Whether it already announced a release (a repeated announcement waits a re-check first).
    announced: bool,
    /// Whether the command has run long enough to listen at all.
    started: bool,
}

impl MySqlLease {
    pub fn new(link: Arc<Link>, name: String, owner: String, grant: Grant) -> Self {
        MySqlLease {
            link,
            name,
            owner,
            ttl: grant.ttl.unwrap_or_default(),
            grant,
            listening: tokio::sync::Mutex::new(Listening::default()),
        }
    }

    /// One listening statement on `conn`: `Ok(true)` when the hold is gone or the statement was
    /// interrupted (a forced release), `Ok(false)` after a quiet sleep.
    async fn listen_once(&self, conn: &mut Conn) -> Result<bool, mysql_async::Error> {
        let sql = self
            .link
            .sql()
            .listen(&self.name, &self.owner, LISTEN_SLEEP);
        // `Option<i64>`: a NULL answer is an answer, not a reason to panic.
        match conn.query_first::<Option<i64>, _>(sql).await {
            Ok(Some(Some(0))) => Ok(false),
            Ok(_) => Ok(true),
            Err(mysql_async::Error::Server(e)) if e.code == INTERRUPTED => Ok(true),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Lease for MySqlLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    async fn renew(&self) -> Result<Renewal, RenewError> {
        let sql = self.link.sql().renew(&self.name, &self.owner, self.ttl);
        let reply = self
            .link
            .query_repeatable(renew_timeout(self.ttl), &sql)
            .await
            .map_err(RenewError::Unconfirmed)?;
        match reply.affected {
            0 => Err(RenewError::Lost(format!(
                "the lease on {} is gone or has another holder (it expired, or was broken with release --force)",
                self.link.endpoint()
            ))),
            _ => Ok(Renewal {
                ttl: Some(self.ttl),
            }),
        }
    }

    async fn release(self: Box<Self>) -> Result<Released, BackendError> {
        // The supervisor dropped the listening future before releasing; an idle listening
        // connection is closed, never waited for.
        if let Ok(mut listening) = self.listening.try_lock()
            && let Some(conn) = listening.conn.take()
        {
            discard(conn);
        }
        let sql = self.link.sql().release(&self.name, &self.owner);
        let reply = self.link.query_repeatable(REQUEST_TIMEOUT, &sql).await?;
        let row = single(&self.link, &reply)?;
        Ok(match cell::<i64>(&self.link, &row, 0)? {
            0 => Released::AlreadyGone,
            _ => Released::Given,
        })
    }

    async fn revoked(&self) -> Revocation {
        let mut listening = self.listening.lock().await;
        if !listening.started {
            tokio::time::sleep(LISTEN_AFTER).await;
            listening.started = true;
        }
        if listening.announced {
            tokio::time::sleep(SAFETY_RECHECK).await;
            listening.announced = false;
        }
        loop {
            let conn = match listening.conn.take() {
                Some(conn) => conn,
                None => match self.link.listener().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        crate::debug!("cannot listen for a forced release ({e})");
                        tokio::time::sleep(SAFETY_RECHECK).await;
                        continue;
                    }
                },
            };
            // Taken out while the statement runs: dropped half-way, it is closed, not reused.
            let mut lent = Held(Some(conn));
            let heard = tokio::time::timeout(
                LISTEN_SLEEP + REQUEST_TIMEOUT,
                self.listen_once(lent.conn()),
            )
            .await;
            match heard {
                Ok(Ok(gone)) => {
                    listening.conn = lent.0.take();
                    if gone {
                        listening.announced = true;
                        return Revocation::Announced;
                    }
                }
                Ok(Err(e)) => {
                    crate::debug!("the wait for a forced release broke ({e}); listening again");
                    drop(lent);
                    tokio::time::sleep(SAFETY_RECHECK).await;
                }
                Err(_) => {
                    drop(lent);
                }
            }
        }
    }
}

/// The listening connection while a statement runs on it.
struct Held(Option<Conn>);

impl Held {
    fn conn(&mut self) -> &mut Conn {
        self.0.as_mut().expect("the connection is held")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            discard(conn);
        }
    }
}
