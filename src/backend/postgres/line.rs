//! [`Postgres`]: the PostgreSQL backend's line — one try (the server-side `acquire` function, one
//! statement in its own transaction), leaving the line (which also drops a slot a lost answer may
//! have given), and the doorbell (`LISTEN` on the name's channel). The waiting itself is the shared
//! engine's.
//!
//! The first try takes the fast path (one plain statement, see [`super::schema`]) when nobody
//! holds or waits for the name, and falls back to the function otherwise. It happens before
//! `LISTEN`, so an uncontended lock costs one round trip and no second connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::types::Type;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::doorbell::Notifications;
use super::lease::PostgresLease;
use super::settings::Settings;
use super::{inspect, pgpass, schema};
use crate::backend::waiting::line::{Attempt, Doorbell, InLine, Line, Taken, Ticket};
use crate::backend::{
    Backend, BackendError, Grant, IntervalClaim, Lease, LockStatus, Settings as _,
};
use crate::clock::BootInstant;
use crate::name::LockName;

/// Connects to the server `settings` name, with the password file's password when neither the
/// URL nor the environment gave one.
pub async fn open(settings: &Settings) -> Result<Box<dyn Backend>, BackendError> {
    let shown = settings.shown().to_owned();
    let settings = match settings.has_password {
        true => settings.clone(),
        false => match pgpass::lookup(&settings.config) {
            Some(password) => settings.with_password(password),
            None => settings.clone(),
        },
    };
    let link = Link::open(settings).await?;
    Ok(Box::new(InLine(Arc::new(Postgres {
        link: Arc::new(link),
        shown,
        tried: AtomicBool::new(false),
    }))))
}

/// A PostgreSQL server, as a line of waiters.
pub struct Postgres {
    link: Arc<Link>,
    shown: String,
    /// Whether a try was made already: only the first may take the fast path.
    tried: AtomicBool,
}

/// What every try of one acquisition sends.
struct Try {
    name: String,
    ttl_ms: i64,
    limit: i32,
    heartbeat_ms: i64,
    holder: String,
}

impl Try {
    fn of(ticket: &Ticket<'_>) -> Self {
        let request = ticket.request;
        Try {
            name: request.name.to_string(),
            ttl_ms: i64::try_from(request.ttl.as_millis())
                .unwrap_or(i64::MAX)
                .max(1),
            limit: i32::try_from(request.limit.max(1)).unwrap_or(i32::MAX),
            heartbeat_ms: i64::try_from(ticket.heartbeat.as_millis()).unwrap_or(i64::MAX),
            holder: ticket.holder_json(),
        }
    }

    fn taken(&self, token: u64, slot: u32) -> Attempt {
        Attempt::Taken(Taken {
            token,
            slot,
            ttl: Duration::from_millis(self.ttl_ms.unsigned_abs()),
        })
    }
}

impl Postgres {
    fn unexpected(&self) -> BackendError {
        BackendError::Failed {
            endpoint: self.link.endpoint().to_owned(),
            reason: "unexpected answer to an acquire".into(),
        }
    }

    /// The first try: the fast path for a name nobody holds or waits for; `None` when it does not
    /// apply (then the function decides).
    async fn attempt_fast(
        &self,
        ticket: &Ticket<'_>,
        t: &Try,
    ) -> Result<Option<Attempt>, BackendError> {
        let rows = self
            .link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().fast_acquire,
                &[
                    (&t.name, Type::TEXT),
                    (&ticket.owner, Type::TEXT),
                    (&t.ttl_ms, Type::INT8),
                    (&t.limit, Type::INT4),
                    (&t.holder, Type::TEXT),
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let token: i64 = row.try_get(0).map_err(|_| self.unexpected())?;
        let token = u64::try_from(token).map_err(|_| self.unexpected())?;
        Ok(Some(t.taken(token, 0)))
    }

    /// One call of the `acquire` function.
    async fn attempt_full(&self, ticket: &Ticket<'_>, t: &Try) -> Result<Attempt, BackendError> {
        let rows = self
            .link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().acquire,
                &[
                    (&t.name, Type::TEXT),
                    (&ticket.owner, Type::TEXT),
                    (&t.ttl_ms, Type::INT8),
                    (&t.limit, Type::INT4),
                    (&t.holder, Type::TEXT),
                    (&t.heartbeat_ms, Type::INT8),
                ],
            )
            .await?;
        let unexpected = || self.unexpected();
        let row = rows.first().ok_or_else(unexpected)?;
        let taken: Option<bool> = row.try_get(0).map_err(|_| unexpected())?;
        if taken == Some(true) {
            let token: Option<i64> = row.try_get(1).map_err(|_| unexpected())?;
            let slot: Option<i32> = row.try_get(2).map_err(|_| unexpected())?;
            let token = token
                .and_then(|t| u64::try_from(t).ok())
                .ok_or_else(unexpected)?;
            let slot = slot
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(unexpected)?;
            return Ok(t.taken(token, slot));
        }
        let soonest: Option<i64> = row.try_get(4).map_err(|_| unexpected())?;
        Ok(Attempt::Waiting {
            soonest_expiry: soonest
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
            superseded_by: None,
        })
    }
}

#[async_trait]
impl Line for Postgres {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let t = Try::of(ticket);
        if !self.tried.swap(true, Ordering::Relaxed)
            && let Some(taken) = self.attempt_fast(ticket, &t).await?
        {
            return Ok(taken);
        }
        self.attempt_full(ticket, &t).await
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        let name = ticket.request.name.to_string();
        let channel = schema::channel(self.link.schema(), &name);
        self.link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().leave,
                &[
                    (&name, Type::TEXT),
                    (&ticket.owner, Type::TEXT),
                    (&channel, Type::TEXT),
                ],
            )
            .await
            .map(drop)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let name = ticket.request.name.to_string();
        let channel = schema::channel(self.link.schema(), &name);
        let listener = self.link.listen(&channel).await?;
        Ok(Box::new(Notifications { name, listener }))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        let name = ticket.request.name.to_string();
        let channel = schema::channel(self.link.schema(), &name);
        Box::new(PostgresLease::new(
            Arc::clone(&self.link),
            name,
            channel,
            ticket.owner.clone(),
            Grant {
                token: taken.token,
                slot: taken.slot,
                ttl: Some(taken.ttl),
                sent_at,
            },
        ))
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        inspect::status(&self.link, name).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        inspect::list(&self.link, prefix).await
    }

    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        inspect::force_release(&self.link, name).await
    }

    async fn claim_interval(
        &self,
        _name: &LockName,
        _interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        Err(BackendError::Unsupported(
            "--min-interval is not available on this backend yet".into(),
        ))
    }

    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        inspect::server_time(&self.link).await.map(Some)
    }
}
