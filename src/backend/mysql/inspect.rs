//! Reading and breaking leases from outside (`status`, `list` and `release --force`), and
//! `--min-interval` (the look before waiting and the claim) and the server's clock, all by the
//! server's clock (a row past its expiry is not a holder, whatever it says).

use std::time::Duration;

use async_trait::async_trait;
use mysql_async::Row;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::line::{cell, single, unexpected};
use super::sql::SERVER_TIME;
use crate::backend::inspect::{held, ran_within_micros};
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, MAX_LIMIT,
    WaiterStatus,
};
use crate::name::LockName;

#[async_trait]
impl Inspect for Link {
    /// Who holds `name`, and who waits, in line order (one round trip).
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        let reply = self
            .look(REQUEST_TIMEOUT, &self.sql().status(name.as_str()))
            .await?;
        let [limits, holders, waiters] = match reply.sets.as_slice() {
            [a, b, c, ..] => [a, b, c],
            _ => return Err(unexpected(self)),
        };
        let limit = match limits.first() {
            Some(row) => u32::try_from(cell::<i64>(self, row, 0)?)
                .unwrap_or(1)
                .clamp(1, MAX_LIMIT),
            None => 1,
        };
        let holders = holders
            .iter()
            .map(|row| holder(self, row))
            .collect::<Result<Vec<_>, _>>()?;
        let queue = waiters
            .iter()
            .map(|row| {
                let record: String = cell(self, row, 0)?;
                Ok(WaiterStatus::new(HolderInfo::decode(record.as_bytes())))
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        Ok(LockStatus::new(name, limit, holders, queue))
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let reply = self
            .query(REQUEST_TIMEOUT, &self.sql().held_names(prefix))
            .await?;
        let mut names = Vec::new();
        for row in reply.sets.first().map(Vec::as_slice).unwrap_or_default() {
            let name: String = cell(self, row, 0)?;
            // A row written by something other than lockrun is not a lock name: skip it.
            names.extend(LockName::parse(&name).ok());
        }
        held(names, |name| async move { self.status(&name).await }).await
    }

    /// Drops every holder of `name`, tells each one's listening connection, and wakes whoever is
    /// next; the token counter is untouched.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let reply = self
            .query(REQUEST_TIMEOUT, &self.sql().force(name.as_str()))
            .await?;
        let row = single(self, &reply)?;
        Ok(usize::try_from(cell::<i64>(self, &row, 0)?).unwrap_or(0))
    }

    /// `--min-interval`, by the server's clock.
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        let reply = self
            .query(REQUEST_TIMEOUT, &self.sql().claim(name.as_str(), interval))
            .await?;
        let row = single(self, &reply)?;
        Ok(match cell::<i64>(self, &row, 0)? {
            1 => IntervalClaim::Claimed,
            _ => IntervalClaim::TooSoon {
                ago: Duration::from_micros(u64::try_from(cell::<i64>(self, &row, 1)?).unwrap_or(0)),
            },
        })
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let reply = self
            .query(REQUEST_TIMEOUT, &self.sql().ran_ago(name.as_str()))
            .await?;
        let Some(row) = reply.first_row() else {
            return Ok(None);
        };
        Ok(ran_within_micros(cell::<i64>(self, row, 0)?, interval))
    }

    /// The server's wall clock, for the skew `lockrun drill` reports.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        let reply = self.query(REQUEST_TIMEOUT, SERVER_TIME).await?;
        let row = single(self, &reply)?;
        let us = u64::try_from(cell::<i64>(self, &row, 0)?).map_err(|_| unexpected(self))?;
        Ok(Some(std::time::UNIX_EPOCH + Duration::from_micros(us)))
    }
}

/// One row of the holders' result set: `slot, token, holder, ms left`.
fn holder(link: &Link, row: &Row) -> Result<HolderStatus, BackendError> {
    let slot: i64 = cell(link, row, 0)?;
    let token: u64 = cell(link, row, 1)?;
    let record: String = cell(link, row, 2)?;
    let left_ms: i64 = cell(link, row, 3)?;
    Ok(HolderStatus::new(
        HolderInfo::decode(record.as_bytes()),
        token,
        u32::try_from(slot).unwrap_or(0),
        Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
    ))
}
