//! Acquiring a PostgreSQL lease: one try (the server-side `acquire` function, one statement in
//! its own transaction), and the waiting loop around it.
//!
//! A try either takes a free slot — when it is this caller's turn in line — with the next fencing
//! token, or (when waiting) puts the caller in line and renews its heartbeat. Between tries the
//! waiter sleeps until a release is notified or the safety re-check is due. A waiter that gives up
//! leaves the line; one that is dropped (Ctrl-C) is dropped from it when its heartbeat lapses.
//!
//! The first try takes the fast path (one plain statement, see [`super::schema`]) when nobody
//! holds or waits for the name, and falls back to the function otherwise. It happens before
//! `LISTEN`, so an uncontended lock costs one round trip and no second connection; a waiter then
//! listens and tries again at once, so no release between its first try and the `LISTEN` is
//! missed — the same guarantee as listening first.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::Type;

use super::connect::{Link, REQUEST_TIMEOUT};
use super::lease::PostgresLease;
use super::schema;
use super::waiting::Wakeups;
use crate::backend::queue::{HEARTBEAT, Nap, Outage, owner_id, recheck_at};
use crate::backend::{AcquireRequest, BackendError, Grant};
use crate::clock::BootInstant;

/// What one try found.
enum Attempt {
    Taken { token: u64, slot: u32 },
    Busy { soonest_expiry: Option<Duration> },
}

/// What every try of one acquisition sends.
struct Try<'a> {
    name: &'a str,
    owner: &'a str,
    ttl_ms: i64,
    limit: i32,
    heartbeat_ms: i64,
}

/// Becomes a holder of `request.name`, waiting until the request's deadline.
pub async fn acquire(
    link: &Arc<Link>,
    request: &AcquireRequest,
) -> Result<Option<PostgresLease>, BackendError> {
    let name = request.name.to_string();
    let channel = schema::channel(link.schema(), &name);
    let owner = owner_id()?;
    let ttl_ms = i64::try_from(request.ttl.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let waits = request.deadline.is_none_or(|d| d > BootInstant::now());
    let heartbeat = if waits { HEARTBEAT } else { Duration::ZERO };
    let attempt_with = Try {
        name: &name,
        owner: &owner,
        ttl_ms,
        limit: i32::try_from(request.limit.max(1)).unwrap_or(i32::MAX),
        heartbeat_ms: i64::try_from(heartbeat.as_millis()).unwrap_or(i64::MAX),
    };
    let mut wakeups = Wakeups::new(name.clone(), channel.clone());
    let mut nap = Nap::default();
    let mut outage = Outage::default();
    loop {
        // Taken just before the winning request is sent: the lease is counted from here.
        let sent_at = BootInstant::now();
        let result = match outage.answered() {
            false => attempt_fast(link, request, &attempt_with).await,
            true => attempt(link, request, &attempt_with).await,
        };
        let soonest_expiry = match result {
            Ok(Attempt::Taken { token, slot }) => {
                let grant = Grant {
                    token,
                    slot,
                    ttl: Some(Duration::from_millis(ttl_ms.unsigned_abs())),
                    sent_at,
                };
                return Ok(Some(PostgresLease::new(
                    Arc::clone(link),
                    name,
                    channel,
                    owner,
                    grant,
                )));
            }
            Ok(Attempt::Busy { soonest_expiry }) => {
                outage.ok();
                soonest_expiry
            }
            Err(e) => {
                outage.failed(e, sent_at, "check the lock")?;
                None
            }
        };
        if request.deadline.is_some_and(|d| d <= BootInstant::now()) {
            if waits {
                leave(link, &name, &owner, &channel).await;
            }
            return Ok(None);
        }
        if wakeups.listen(link).await {
            continue;
        }
        let wake_at = recheck_at(soonest_expiry, request.deadline);
        nap.until(wakeups.announced(), wake_at, link.endpoint())
            .await?;
    }
}

/// The first try: the fast path for a name nobody holds or waits for, and the function when it
/// does not apply.
async fn attempt_fast(
    link: &Link,
    request: &AcquireRequest,
    t: &Try<'_>,
) -> Result<Attempt, BackendError> {
    let holder = holder_json(link, request)?;
    let rows = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().fast_acquire,
            &[
                (&t.name, Type::TEXT),
                (&t.owner, Type::TEXT),
                (&t.ttl_ms, Type::INT8),
                (&t.limit, Type::INT4),
                (&holder, Type::TEXT),
            ],
        )
        .await?;
    let Some(row) = rows.first() else {
        return attempt(link, request, t).await;
    };
    let token: i64 = row.try_get(0).map_err(|_| unexpected(link))?;
    Ok(Attempt::Taken {
        token: u64::try_from(token).map_err(|_| unexpected(link))?,
        slot: 0,
    })
}

/// One call of the `acquire` function.
async fn attempt(
    link: &Link,
    request: &AcquireRequest,
    t: &Try<'_>,
) -> Result<Attempt, BackendError> {
    let holder = holder_json(link, request)?;
    let rows = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().acquire,
            &[
                (&t.name, Type::TEXT),
                (&t.owner, Type::TEXT),
                (&t.ttl_ms, Type::INT8),
                (&t.limit, Type::INT4),
                (&holder, Type::TEXT),
                (&t.heartbeat_ms, Type::INT8),
            ],
        )
        .await?;
    let unexpected = || unexpected(link);
    let row = rows.first().ok_or_else(unexpected)?;
    let taken: Option<bool> = row.try_get(0).map_err(|_| unexpected())?;
    if taken == Some(true) {
        let token: Option<i64> = row.try_get(1).map_err(|_| unexpected())?;
        let slot: Option<i32> = row.try_get(2).map_err(|_| unexpected())?;
        return Ok(Attempt::Taken {
            token: token
                .and_then(|t| u64::try_from(t).ok())
                .ok_or_else(unexpected)?,
            slot: slot
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(unexpected)?,
        });
    }
    let soonest: Option<i64> = row.try_get(4).map_err(|_| unexpected())?;
    Ok(Attempt::Busy {
        soonest_expiry: soonest
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis),
    })
}

/// The holder record stored for `status`, stamped with the time of this try.
fn holder_json(link: &Link, request: &AcquireRequest) -> Result<String, BackendError> {
    serde_json::to_string(&request.holder.stamped()).map_err(|e| BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: format!("cannot encode the holder: {e}"),
    })
}

fn unexpected(link: &Link) -> BackendError {
    BackendError::Failed {
        endpoint: link.endpoint().to_owned(),
        reason: "unexpected answer to an acquire".into(),
    }
}

/// Leaves the line after giving up, so the next waiter need not wait for the heartbeat to lapse.
async fn leave(link: &Link, name: &str, owner: &str, channel: &str) {
    let result = link
        .query(
            REQUEST_TIMEOUT,
            &link.sql().leave,
            &[
                (&name, Type::TEXT),
                (&owner, Type::TEXT),
                (&channel, Type::TEXT),
            ],
        )
        .await;
    if let Err(e) = result {
        crate::debug!("cannot leave the line ({e}); it lapses by itself");
    }
}
