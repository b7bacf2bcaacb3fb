//! The one rule for a request to a SQL backend that finds lockrun's tables missing: it returns,
//! the tables are created on a budget of their own ([`CREATE_LIMIT`]) — many first uses at once
//! take their turns at it, which a request's few seconds would not cover — and the request is
//! sent once more, with a fresh deadline.

use std::future::Future;
use std::time::Duration;

use super::answer;

/// Longest wait for lockrun's tables to be created (or migrated) on first use.
pub const CREATE_LIMIT: Duration = Duration::from_secs(30);

/// Runs `attempt` within `limit`; when it fails with an error that `missing` recognises, runs
/// `create` within [`CREATE_LIMIT`] and then `attempt` once more within `limit`. `Err` holds the
/// deadline that ran out.
pub async fn creating_if_missing<T, E, Fut, Created>(
    limit: Duration,
    attempt: impl Fn() -> Fut,
    missing: impl Fn(&E) -> bool,
    create: impl FnOnce() -> Created,
) -> Result<Result<T, E>, Duration>
where
    Fut: Future<Output = Result<T, E>>,
    Created: Future<Output = Result<(), E>>,
{
    match answer::within(limit, attempt()).await {
        Ok(Err(e)) if missing(&e) => {}
        Ok(result) => return Ok(result),
        Err(_) => return Err(limit),
    }
    match answer::within(CREATE_LIMIT, create()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Ok(Err(e)),
        Err(_) => return Err(CREATE_LIMIT),
    }
    answer::within(limit, attempt()).await.map_err(|_| limit)
}
