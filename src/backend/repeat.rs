//! The one rule for sending a request again over a new connection: only a request that may run
//! twice (an owner-checked renewal or release), only when the failure dropped the connection the
//! link had kept (a restarted server, a connection reaped while idle), once, and within the
//! deadline the first try was given.

use std::future::Future;
use std::time::{Duration, Instant};

/// Runs `send` with `limit`; when it fails and `dropped()` says the kept connection went with
/// the failure, runs it once more with what is left of `limit`.
pub async fn once_more_if_dropped<T, E, Fut>(
    limit: Duration,
    endpoint: &str,
    dropped: impl FnOnce() -> bool,
    send: impl Fn(Duration) -> Fut,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let result = send(limit).await;
    match (result, limit.checked_sub(started.elapsed())) {
        (Err(_), Some(left)) if !left.is_zero() && dropped() => {
            crate::debug!("the connection to {endpoint} was lost; trying a new one");
            send(left).await
        }
        (result, _) => result,
    }
}
