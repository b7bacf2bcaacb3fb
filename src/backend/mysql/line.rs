//! [`MySql`]: the MySQL/MariaDB backend's line — one try (the `acquire` procedure, one statement
//! in its own transaction), leaving the line (which also drops a hold a lost answer may have
//! given), and the doorbell (a sleep on the waiter's own connection that a release interrupts;
//! see [`super::doorbell`]). The waiting itself is the shared engine's.
//!
//! The first try of a run takes the fast path (see [`super::sql::Statements::fast_acquire`]):
//! every lockrun is a new session, and a session loads and parses a procedure the first time it
//! calls it, which costs more than the try itself. The fast path applies only to a name without
//! any lease or waiter row; otherwise the procedure decides.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::Row;
use mysql_async::prelude::FromValue;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::doorbell::{Sleep, Turns};
use super::lease::MySqlLease;
use super::settings::Settings;
use super::sql::{Try, millis};
use crate::backend::waiting::line::{Attempt, Doorbell, Line, Taken, Ticket};
use crate::backend::waiting::networked::Networked;
use crate::backend::waiting::policy::recheck_at;
use crate::backend::{Backend, BackendError, HolderInfo, Inspect, Lease, Mode, Settings as _};
use crate::clock::BootInstant;

/// Connects to the server `settings` names.
pub async fn open(settings: &Settings) -> Result<Box<dyn Backend>, BackendError> {
    let link = Link::open(settings).await?;
    let mysql = MySql {
        link: Arc::new(link),
        turns: Arc::new(Mutex::new(HashMap::new())),
        tried: AtomicBool::new(false),
    };
    Ok(Networked::boxed(mysql, settings.shown()))
}

/// A MySQL or MariaDB server, as a line of waiters.
pub struct MySql {
    link: Arc<Link>,
    /// What each waiter's last try saw, for its doorbell.
    turns: Turns,
    /// Whether a try was made already: only the first may take the fast path.
    tried: AtomicBool,
}

/// The value in column `i` of `row`, or an "unexpected answer" error.
pub fn cell<T: FromValue>(link: &Link, row: &Row, i: usize) -> Result<T, BackendError> {
    row.get_opt::<T, usize>(i)
        .and_then(Result::ok)
        .ok_or_else(|| unexpected(link))
}

/// An answer lockrun cannot read.
pub fn unexpected(link: &Link) -> BackendError {
    BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: "unexpected answer from the server".into(),
    }
}

/// The only row of `reply`'s first result set.
pub fn single(link: &Link, reply: &super::connect::Reply) -> Result<Row, BackendError> {
    reply.first_row().cloned().ok_or_else(|| unexpected(link))
}

#[async_trait]
impl Line for MySql {
    async fn attempt(&self, ticket: &Ticket<'_>) -> Result<Attempt, BackendError> {
        let request = ticket.request;
        let holder = ticket.holder_json();
        let name = request.name.to_string();
        let t = Try {
            name: &name,
            owner: &ticket.owner,
            bell: self.link.bell(),
            ttl: request.ttl,
            limit: request.limit,
            holder: &holder,
            heartbeat: ticket.heartbeat,
            shared: request.mode == Mode::Shared,
            supersede: request.supersede,
        };
        let link = &*self.link;
        if !self.tried.swap(true, Ordering::Relaxed) {
            let reply = link
                .transaction(REQUEST_TIMEOUT, &link.sql().fast_acquire(&t))
                .await?;
            let row = reply
                .sets
                .last()
                .and_then(|rows| rows.first())
                .ok_or_else(|| unexpected(link))?;
            if cell::<i64>(link, row, 0)? == 1 {
                return Ok(Attempt::Taken(Taken {
                    token: cell(link, row, 1)?,
                    slot: 0,
                    ttl: Duration::from_millis(millis(request.ttl)),
                }));
            }
        }
        let reply = link.query(REQUEST_TIMEOUT, &link.sql().acquire(&t)).await?;
        let row = single(link, &reply)?;
        if cell::<i64>(link, &row, 0)? == 1 {
            self.turns_lock().remove(&ticket.owner);
            return Ok(Attempt::Taken(Taken {
                token: cell(link, &row, 1)?,
                slot: cell(link, &row, 2)?,
                ttl: Duration::from_millis(millis(request.ttl)),
            }));
        }
        let soonest = cell::<Option<i64>>(link, &row, 3)?
            .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
        let superseded_by = match cell::<i64>(link, &row, 4)? {
            1 => Some(HolderInfo::decode(
                cell::<Option<String>>(link, &row, 5)?
                    .unwrap_or_default()
                    .as_bytes(),
            )),
            _ => None,
        };
        let rung: u64 = cell(link, &row, 6)?;
        self.turns_lock().insert(
            ticket.owner.clone(),
            super::doorbell::Turn {
                rung,
                recheck: recheck_at(soonest, request.deadline),
            },
        );
        Ok(Attempt::Waiting {
            soonest_expiry: soonest,
            superseded_by,
        })
    }

    async fn leave(&self, ticket: &Ticket<'_>) -> Result<(), BackendError> {
        self.turns_lock().remove(&ticket.owner);
        let name = ticket.request.name.to_string();
        self.link
            .query(
                REQUEST_TIMEOUT,
                &self.link.sql().leave(&name, &ticket.owner),
            )
            .await
            .map(drop)
    }

    async fn doorbell(&self, ticket: &Ticket<'_>) -> Result<Box<dyn Doorbell>, BackendError> {
        Ok(Box::new(Sleep::new(
            Arc::clone(&self.link),
            Arc::clone(&self.turns),
            ticket.request.name.to_string(),
            ticket.owner.clone(),
        )))
    }

    fn lease(&self, ticket: &Ticket<'_>, taken: Taken, sent_at: BootInstant) -> Box<dyn Lease> {
        Box::new(MySqlLease::new(
            Arc::clone(&self.link),
            ticket.request.name.to_string(),
            ticket.owner.clone(),
            taken.grant(sent_at),
        ))
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}

impl MySql {
    fn turns_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, super::doorbell::Turn>> {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
