//! Reading and breaking leases from outside: `status`, `list` and `release --force`, all by the
//! server's clock (a row past its expiry is not a holder, whatever it says).

use std::time::Duration;

use mysql_async::Row;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::line::{cell, single, unexpected};
use super::sql::SERVER_TIME;
use crate::backend::{BackendError, HolderInfo, HolderStatus, LockStatus, MAX_LIMIT, WaiterStatus};
use crate::name::LockName;

/// Who holds `name`, and who waits, in line order (one round trip).
pub async fn status(link: &Link, name: &LockName) -> Result<LockStatus, BackendError> {
    let reply = link
        .query(REQUEST_TIMEOUT, &link.sql().status(name.as_str()))
        .await?;
    let [limits, holders, waiters] = match reply.sets.as_slice() {
        [a, b, c, ..] => [a, b, c],
        _ => return Err(unexpected(link)),
    };
    let limit = match limits.first() {
        Some(row) => u32::try_from(cell::<i64>(link, row, 0)?)
            .unwrap_or(1)
            .clamp(1, MAX_LIMIT),
        None => 1,
    };
    let holders = holders
        .iter()
        .map(|row| holder(link, row))
        .collect::<Result<Vec<_>, _>>()?;
    let queue = waiters
        .iter()
        .map(|row| {
            let record: String = cell(link, row, 0)?;
            Ok(WaiterStatus::new(HolderInfo::decode(record.as_bytes())))
        })
        .collect::<Result<Vec<_>, BackendError>>()?;
    Ok(LockStatus::new(name, limit, holders, queue))
}

/// Every held name that starts with `prefix`, sorted by name.
pub async fn list(link: &Link, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
    let reply = link
        .query(REQUEST_TIMEOUT, &link.sql().held_names(prefix))
        .await?;
    let mut held = Vec::new();
    for row in reply.sets.first().map(Vec::as_slice).unwrap_or_default() {
        let name: String = cell(link, row, 0)?;
        // A row written by something other than lockrun is not a lock name: skip it.
        let Ok(name) = LockName::parse(&name) else {
            continue;
        };
        let status = status(link, &name).await?;
        if status.held {
            held.push(status);
        }
    }
    Ok(held)
}

/// Drops every holder of `name`, tells each one's listening connection, and wakes whoever is
/// next; the token counter is untouched.
pub async fn force_release(link: &Link, name: &LockName) -> Result<usize, BackendError> {
    let reply = link
        .query(REQUEST_TIMEOUT, &link.sql().force(name.as_str()))
        .await?;
    let row = single(link, &reply)?;
    Ok(usize::try_from(cell::<i64>(link, &row, 0)?).unwrap_or(0))
}

/// The server's wall clock, for the skew `lockrun drill` reports.
pub async fn server_time(link: &Link) -> Result<std::time::SystemTime, BackendError> {
    let reply = link.query(REQUEST_TIMEOUT, SERVER_TIME).await?;
    let row = single(link, &reply)?;
    let us = u64::try_from(cell::<i64>(link, &row, 0)?).map_err(|_| unexpected(link))?;
    Ok(std::time::UNIX_EPOCH + Duration::from_micros(us))
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
