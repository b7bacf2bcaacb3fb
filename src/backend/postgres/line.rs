//! [`Postgres`]: the PostgreSQL backend's line — one try (`acquire_v2`, one statement: take a
//! slot or a shared hold when it is this contender's turn, or keep it in line with a fresh
//! heartbeat; an uncontended name costs exactly that one round trip), leaving the line (which
//! also drops a hold a lost answer may have given), and the doorbell (see [`super::doorbell`]).
//! The waiting itself is the shared engine's; a server with no connection to spare is ridden out
//! here (see [`super::crowd`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio_postgres::types::Type;

use super::crowd::Crowd;
use super::doorbell::{Aside, Listening, ListeningAside, Looking};
use super::failure::Failure;
use super::lease::PostgresLease;
use super::link::{Link, REQUEST_TIMEOUT};
use super::looker::Looker;
use super::pace::{View, ViewColumns, Waiter};
use super::settings::Settings;
use super::{pgpass, schema};
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError, HolderInfo, Inspect, Lease, Mode, Settings as _};
use crate::clock::BootInstant;

/// Where `acquire_v2`'s answer carries the waiter's view of the line.
const ACQUIRE_VIEW: ViewColumns = ViewColumns {
    epoch: 7,
    ahead: 5,
    distance: 6,
    handoff: 8,
    since_release: 9,
};

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
    let aside = settings
        .listener()
        .map(|direct| Arc::new(Aside::new(direct)));
    let link = Link::open(settings).await?;
    let postgres = Postgres {
        link: Arc::new(link),
        aside,
        contenders: Mutex::new(HashMap::new()),
    };
    Ok(Networked::boxed(postgres, &shown))
}

/// A PostgreSQL server, as a line of waiters.
pub struct Postgres {
    link: Arc<Link>,
    /// Where waiters behind a pooler listen (`listen=`), if the URL says.
    aside: Option<Arc<Aside>>,
    /// What the tries of each contender (by owner) found, for its lease and its doorbell.
    contenders: Mutex<HashMap<String, Contender>>,
}

/// What the tries of one contender found.
struct Contender {
    /// Where it stands, for a doorbell that looks at the line.
    view: watch::Sender<View>,
    /// Whether its connection reaches the server directly (so it can listen).
    direct: bool,
    /// The row's slot of the hold it took.
    row_slot: Option<i32>,
}

/// What every try of one acquisition sends.
struct Try {
    name: String,
    ttl_ms: i64,
    limit: i32,
    heartbeat_ms: i64,
    holder: String,
    shared: bool,
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
            shared: request.mode == Mode::Shared,
        }
    }
}

impl Postgres {
    /// The record of `owner`'s tries, made on first use.
    fn contender<T>(&self, owner: &str, f: impl FnOnce(&mut Contender) -> T) -> T {
        let mut contenders = self
            .contenders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let contender = contenders
            .entry(owner.to_owned())
            .or_insert_with(|| Contender {
                view: watch::channel(View::default()).0,
                direct: false,
                row_slot: None,
            });
        f(contender)
    }

    fn forget(&self, owner: &str) -> Option<Contender> {
        self.contenders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(owner)
    }

    /// One call of `acquire_v2`.
    async fn try_once(&self, ticket: &Ticket<'_>) -> Result<Attempt, Failure> {
        let t = Try::of(ticket);
        let supersede = ticket.request.supersede;
        let cookie = self.link.cookie();
        let rows = self
            .link
            .query_often(
                REQUEST_TIMEOUT,
                &self.link.sql().acquire,
                &[
                    (&t.name, Type::TEXT),
                    (&ticket.owner, Type::TEXT),
                    (&t.ttl_ms, Type::INT8),
                    (&t.limit, Type::INT4),
                    (&t.holder, Type::TEXT),
                    (&t.heartbeat_ms, Type::INT8),
                    (&t.shared, Type::BOOL),
                    (&supersede, Type::BOOL),
                    (&cookie, Type::TEXT),
                ],
            )
            .await?;
        let unexpected = || self.link.unexpected("an acquire");
        let row = rows.first().ok_or_else(unexpected)?;
        let get_err = |_| unexpected();
        let taken: Option<bool> = row.try_get(0).map_err(get_err)?;
        let direct: Option<bool> = row.try_get(11).map_err(get_err)?;
        if direct == Some(true) {
            self.link.note_direct();
        }
        if taken == Some(true) {
            let token: Option<i64> = row.try_get(1).map_err(get_err)?;
            let row_slot: Option<i32> = row.try_get(2).map_err(get_err)?;
            let token = token
                .and_then(|t| u64::try_from(t).ok())
                .ok_or_else(unexpected)?;
            let row_slot = row_slot.ok_or_else(unexpected)?;
            self.contender(&ticket.owner, |c| c.row_slot = Some(row_slot));
            return Ok(Attempt::Taken(Taken {
                token,
                // A shared holder's row slot is negative; its command sees slot 0.
                slot: u32::try_from(row_slot).unwrap_or(0),
                ttl: Duration::from_millis(t.ttl_ms.unsigned_abs()),
            }));
        }
        let soonest: Option<i64> = row.try_get(3).map_err(get_err)?;
        let next: Option<bool> = row.try_get(4).map_err(get_err)?;
        let view = View::read(row, &ACQUIRE_VIEW, |_| next.unwrap_or(false)).map_err(get_err)?;
        let superseded_by: Option<String> = row.try_get(10).map_err(get_err)?;
        self.contender(&ticket.owner, |c| {
            c.direct = direct.unwrap_or(false);
            c.view.send_replace(view)
        });
        Ok(Attempt::Waiting {
            soonest_expiry: soonest
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
            superseded_by: superseded_by.map(|record| HolderInfo::decode(record.as_bytes())),
        })
    }
}

#[async_trait]
impl Line for Postgres {
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let mut crowd = Crowd::default();
        loop {
            match self.try_once(ticket).await {
                Err(failure) if failure.crowded => {
                    crowd.pause(failure.error, ticket.request).await?
                }
                other => return other.map_err(BackendError::from),
            }
        }
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        self.forget(&ticket.owner);
        let name = ticket.request.name.to_string();
        let legacy = schema::legacy_channel(self.link.schema(), &name);
        self.link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().leave,
                &[
                    (&name, Type::TEXT),
                    (&ticket.owner, Type::TEXT),
                    (&legacy, Type::TEXT),
                ],
            )
            .await
            .map(drop)
            .map_err(BackendError::from)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        let request = ticket.request;
        let waiter = Waiter {
            name: request.name.to_string(),
            owner: ticket.owner.clone(),
            limit: i32::try_from(request.limit.max(1)).unwrap_or(i32::MAX),
            shared: request.mode == Mode::Shared,
            supersede: request.supersede,
        };
        let (direct, view) = self.contender(&ticket.owner, |c| (c.direct, c.view.subscribe()));
        let looker = Looker::new(Arc::clone(&self.link), waiter, view);
        Ok(match (direct, &self.aside) {
            (true, _) => Box::new(Listening::new(Arc::clone(&self.link), looker)),
            (false, Some(aside)) => Box::new(ListeningAside::new(Arc::clone(aside), looker)),
            (false, _) => {
                crate::debug!(
                    "connected through a pooler (the startup options did not reach the server): following the line by looking, not listening"
                );
                Box::new(Looking(looker))
            }
        })
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        let row_slot = self
            .forget(&ticket.owner)
            .and_then(|c| c.row_slot)
            .unwrap_or_else(|| i32::try_from(taken.slot).unwrap_or(0));
        Box::new(PostgresLease::new(
            Arc::clone(&self.link),
            ticket.request.name.to_string(),
            row_slot,
            ticket.owner.clone(),
            taken.grant(sent_at),
        ))
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}
