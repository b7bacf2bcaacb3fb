//! Reading and breaking leases from outside: `status`, `list` and `release --force`, all by the
//! server's clock (a row past its expiry is not a holder, whatever it says).

use std::time::Duration;

use tokio_postgres::Row;
use tokio_postgres::types::Type;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::schema;
use crate::backend::{BackendError, HolderInfo, HolderStatus, LockStatus};
use crate::name::LockName;

/// Who holds `name`, and how many wait.
pub async fn status(link: &Link, name: &LockName) -> Result<LockStatus, BackendError> {
    let name_text = name.as_str();
    let summary = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().summary,
            &[(&name_text, Type::TEXT)],
        )
        .await?;
    let (limit, waiters) = match summary.first() {
        Some(row) => {
            let limit: i32 = row.try_get(0).map_err(|_| unexpected(link))?;
            let waiters: i64 = row.try_get(1).map_err(|_| unexpected(link))?;
            (
                u32::try_from(limit).unwrap_or(1).max(1),
                u32::try_from(waiters).unwrap_or(u32::MAX),
            )
        }
        None => (1, 0),
    };
    let rows = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().holders,
            &[(&name_text, Type::TEXT)],
        )
        .await?;
    let holders = rows
        .iter()
        .map(|row| holder(link, row))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LockStatus {
        name: name.to_string(),
        held: !holders.is_empty(),
        limit,
        waiters,
        holders,
        queue: Vec::new(),
    })
}

/// Every held name that starts with `prefix`, sorted by name.
pub async fn list(link: &Link, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
    let rows = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().held_names,
            &[(&prefix, Type::TEXT)],
        )
        .await?;
    let mut names = Vec::new();
    for row in &rows {
        let name: String = row.try_get(0).map_err(|_| unexpected(link))?;
        // A row written by something other than lockrun is not a lock name: skip it.
        if let Ok(name) = LockName::parse(&name) {
            names.push(name);
        }
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut held = Vec::new();
    for name in names {
        let status = status(link, &name).await?;
        if status.held {
            held.push(status);
        }
    }
    Ok(held)
}

/// Drops every holder of `name` and wakes its waiters; the token counter is untouched.
pub async fn force_release(link: &Link, name: &LockName) -> Result<usize, BackendError> {
    let name_text = name.as_str();
    let channel = schema::channel(link.schema(), name_text);
    let rows = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().force_release,
            &[(&name_text, Type::TEXT), (&channel, Type::TEXT)],
        )
        .await?;
    let dropped: i64 = match rows.first() {
        Some(row) => row.try_get(0).map_err(|_| unexpected(link))?,
        None => 0,
    };
    Ok(usize::try_from(dropped).unwrap_or(0))
}

/// One row of the `holders` query.
fn holder(link: &Link, row: &Row) -> Result<HolderStatus, BackendError> {
    let slot: i32 = row.try_get(0).map_err(|_| unexpected(link))?;
    let token: i64 = row.try_get(1).map_err(|_| unexpected(link))?;
    let info: String = row.try_get(2).map_err(|_| unexpected(link))?;
    let left_ms: i64 = row.try_get(3).map_err(|_| unexpected(link))?;
    let info = HolderInfo::decode(info.as_bytes());
    Ok(HolderStatus::new(
        info,
        u64::try_from(token).unwrap_or(0),
        u32::try_from(slot).unwrap_or(0),
        Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
    ))
}

fn unexpected(link: &Link) -> BackendError {
    BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: "unexpected answer to a status query".into(),
    }
}

/// The server's wall clock (`clock_timestamp()`), for the skew `lockrun drill` reports.
pub async fn server_time(link: &Link) -> Result<std::time::SystemTime, BackendError> {
    let rows = link
        .query(REQUEST_TIMEOUT, "SELECT clock_timestamp()", &[])
        .await?;
    rows.first()
        .and_then(|row| row.try_get(0).ok())
        .ok_or_else(|| BackendError::Failed {
            endpoint: link.endpoint().to_owned(),
            reason: "unexpected answer to SELECT clock_timestamp()".into(),
        })
}
