//! The one rule for the first connection a networked backend makes when it is opened, so that an
//! unreachable server fails before anything runs: an error the server itself answered with is the
//! backend's to word; a connection that failed below the server, or none within the deadline,
//! makes the endpoint unreachable.

use std::future::Future;
use std::time::Duration;

use super::{BackendError, answer};

/// Why a first connection failed, as the backend tells it.
pub enum Refusal {
    /// The server answered with an error (credentials, database, …), worded by the backend.
    Server(BackendError),
    /// No server answered (refused, reset, TLS, …): the reason, scrubbed of secrets.
    Link(String),
}

/// Waits up to `limit` for `connect`, the first connection to `endpoint`.
pub async fn within<T>(
    endpoint: &str,
    limit: Duration,
    connect: impl Future<Output = Result<T, Refusal>>,
) -> Result<T, BackendError> {
    match answer::within(limit, connect).await {
        Ok(Ok(connected)) => Ok(connected),
        Ok(Err(Refusal::Server(error))) => Err(error),
        Ok(Err(Refusal::Link(reason))) => Err(BackendError::Unreachable {
            endpoint: endpoint.to_owned(),
            reason,
        }),
        Err(_) => Err(BackendError::no_connection_within(endpoint, limit)),
    }
}
