//! Reading and breaking leases from outside — `status` (holders with their mode, and the line of
//! waiters in order, in one consistent read), `list` and `release --force` — all by the server's
//! clock (a row past its expiry is not a holder, whatever it says); and `--min-interval` (the look
//! before waiting and the claim) and the server's clock, which also read the server's own time.

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use super::link::{Link, REQUEST_TIMEOUT};
use super::schema;
use crate::backend::inspect::{held, ran_within_micros};
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, Mode, WaiterStatus,
};
use crate::name::LockName;

#[async_trait]
impl Inspect for Link {
    /// Who holds `name`, and who waits for it, in line order.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        let rows = self.query_name(&self.sql().status, name).await?;
        let mut limit = 1;
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for row in &rows {
            let item = Item::read(row).ok_or_else(|| unexpected(self))?;
            match item.kind {
                0 => limit = u32::try_from(item.number).unwrap_or(1).max(1),
                1 => holders.push(item),
                _ => waiters.push(item),
            }
        }
        // Exclusive holders by slot, then shared ones; waiters by ticket.
        holders.sort_by_key(|h| (h.shared, h.number));
        waiters.sort_by_key(|w| w.number);
        let holders = holders.into_iter().map(Item::holder).collect();
        let queue = waiters.into_iter().map(Item::waiter).collect();
        Ok(LockStatus::new(name, limit, holders, queue))
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let rows = self
            .query(
                REQUEST_TIMEOUT,
                &self.sql().held_names,
                &[(&prefix, Type::TEXT)],
            )
            .await?;
        let mut names = Vec::new();
        for row in &rows {
            let name: String = row.try_get(0).map_err(|_| unexpected(self))?;
            // A row written by something other than lockrun is not a lock name: skip it.
            if let Ok(name) = LockName::parse(&name) {
                names.push(name);
            }
        }
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        held(names, |name| async move { self.status(&name).await }).await
    }

    /// Drops every holder of `name`, tells each on its own channel, and wakes whoever is next; the
    /// token counter is untouched.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let name_text = name.as_str();
        let legacy = schema::legacy_channel(self.schema(), name_text);
        let rows = self
            .query(
                REQUEST_TIMEOUT,
                &self.sql().force_release,
                &[(&name_text, Type::TEXT), (&legacy, Type::TEXT)],
            )
            .await?;
        let dropped: Option<i32> = match rows.first() {
            Some(row) => row.try_get(0).map_err(|_| unexpected(self))?,
            None => None,
        };
        Ok(dropped.and_then(|n| usize::try_from(n).ok()).unwrap_or(0))
    }

    /// `--min-interval`: records, by the server's clock, that `name` runs now, unless it last ran
    /// less than `interval` ago.
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        let name_text = name.as_str();
        let interval_us = i64::try_from(interval.as_micros()).unwrap_or(i64::MAX);
        let rows = self
            .query(
                REQUEST_TIMEOUT,
                &self.sql().claim_interval,
                &[(&name_text, Type::TEXT), (&interval_us, Type::INT8)],
            )
            .await?;
        let row = rows.first().ok_or_else(|| unexpected(self))?;
        let claimed: Option<bool> = row.try_get(0).map_err(|_| unexpected(self))?;
        let ago_us: Option<i64> = row.try_get(1).map_err(|_| unexpected(self))?;
        Ok(match claimed {
            Some(true) => IntervalClaim::Claimed,
            _ => IntervalClaim::TooSoon {
                ago: Duration::from_micros(ago_us.and_then(|a| u64::try_from(a).ok()).unwrap_or(0)),
            },
        })
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let rows = self.query_name(&self.sql().ran_ago, name).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let ago_us: i64 = row.try_get(0).map_err(|_| unexpected(self))?;
        Ok(ran_within_micros(ago_us, interval))
    }

    /// The server's wall clock (`clock_timestamp()`), for the skew `lockrun drill` reports.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        let rows = self
            .query(REQUEST_TIMEOUT, "SELECT clock_timestamp()", &[])
            .await?;
        rows.first()
            .and_then(|row| row.try_get(0).ok())
            .ok_or_else(|| BackendError::Failed {
                endpoint: self.endpoint().to_owned(),
                reason: "unexpected answer to SELECT clock_timestamp()".into(),
            })
            .map(Some)
    }
}

impl Link {
    /// Runs `sql`, whose only parameter is a lock name, with `name`.
    async fn query_name(
        &self,
        sql: &str,
        name: &LockName,
    ) -> Result<Vec<tokio_postgres::Row>, BackendError> {
        let name_text = name.as_str();
        Ok(self
            .query(REQUEST_TIMEOUT, sql, &[(&name_text, Type::TEXT)])
            .await?)
    }
}

/// One row of the status statement.
struct Item {
    kind: i32,
    number: i64,
    record: String,
    left_ms: i64,
    shared: bool,
    token: i64,
}

impl Item {
    fn read(row: &Row) -> Option<Self> {
        Some(Item {
            kind: row.try_get(0).ok()?,
            number: row.try_get(1).ok()?,
            record: row
                .try_get::<_, Option<String>>(2)
                .ok()?
                .unwrap_or_default(),
            left_ms: row.try_get(3).ok()?,
            shared: row.try_get(4).ok()?,
            token: row.try_get(5).ok()?,
        })
    }

    /// The stored record, with the mode the row itself says.
    fn info(&self) -> HolderInfo {
        let mut info = HolderInfo::decode(self.record.as_bytes());
        info.mode = match self.shared {
            true => Mode::Shared,
            false => Mode::Exclusive,
        };
        info
    }

    fn holder(self) -> HolderStatus {
        HolderStatus::new(
            self.info(),
            u64::try_from(self.token).unwrap_or(0),
            // A shared holder's row slot is negative; it is slot 0 to its command.
            u32::try_from(self.number).unwrap_or(0),
            Duration::from_millis(u64::try_from(self.left_ms).unwrap_or(0)),
        )
    }

    fn waiter(self) -> WaiterStatus {
        WaiterStatus::new(self.info())
    }
}

fn unexpected(link: &Link) -> BackendError {
    BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: "unexpected answer from the server".into(),
    }
}
