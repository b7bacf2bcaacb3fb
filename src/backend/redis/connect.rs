//! [`Link`]: the connection to one Redis server, with a deadline on every request.
//!
//! One multiplexed connection is shared by everything a lockrun does (acquire, renew, release). A
//! request that fails for any reason other than a server reply, or that runs out of time, or that
//! is dropped half-way (the supervisor abandons a slow renewal), throws the connection away, so the
//! next request connects afresh: a connection that went silent is never trusted again. Connecting
//! counts against the request's own deadline.
//!
//! Messages name the endpoint as `host:port` and never carry the password.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, IntoConnectionInfo};
use redis::{RedisError, RedisResult, ScriptInvocation};

use crate::backend::{BackendError, percent_decode};

/// Longest wait for a connection when the backend is opened.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const DEFAULT_PORT: u16 = 6379;

/// A Redis server, reached on demand.
pub struct Link {
    client: Client,
    endpoint: String,
    /// The password as written and as decoded, scrubbed from every message.
    secrets: Vec<String>,
    connection: Mutex<Option<MultiplexedConnection>>,
}

impl Link {
    /// Parses `url` and connects, so an unreachable server fails here, before anything runs.
    pub async fn open(url: &str) -> Result<Self, BackendError> {
        let mut parsed =
            url::Url::parse(url).map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let host = parsed.host_str().unwrap_or_default();
        let endpoint = format!("{host}:{}", parsed.port().unwrap_or(DEFAULT_PORT));
        if parsed.password().is_none() && !parsed.username().is_empty() {
            // `redis://secret@host` means the password, as it does to redis-cli (and to
            // `redact`, which hides it).
            let secret = parsed.username().to_owned();
            // Cannot fail: the URL has a host, so it can carry credentials.
            let _ = parsed.set_password(Some(&secret));
            let _ = parsed.set_username("");
        }
        let mut secrets = Vec::new();
        if let Some(raw) = parsed.password() {
            secrets.push(percent_decode(raw));
            secrets.push(raw.to_owned());
        }
        secrets.retain(|s| !s.is_empty());
        let info = parsed
            .as_str()
            .into_connection_info()
            .map_err(|e| BackendError::Failed {
                endpoint: endpoint.clone(),
                reason: scrub(&secrets, &e),
            })?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        // No `CLIENT SETINFO` on connect: one exchange fewer per run, and a server that wants a
        // password answers the first real command with a plain NOAUTH.
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        let client = Client::open(info).map_err(|e| BackendError::Failed {
            endpoint: endpoint.clone(),
            reason: scrub(&secrets, &e),
        })?;
        let link = Link {
            client,
            endpoint,
            secrets,
            connection: Mutex::new(None),
        };
        // A PING proves the server answers, and that the credentials and database are accepted.
        let ping = async {
            let mut connection = link.connection().await?;
            redis::cmd("PING").query_async::<()>(&mut connection).await
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, ping).await {
            Ok(Ok(())) => Ok(link),
            Ok(Err(e)) if is_server_reply(&e) => Err(link.failed(&e)),
            Ok(Err(e)) => Err(BackendError::Unreachable {
                endpoint: link.endpoint.clone(),
                reason: link.reason(&e),
            }),
            Err(_) => Err(BackendError::Unreachable {
                endpoint: link.endpoint.clone(),
                reason: format!("no connection within {}", show(CONNECT_TIMEOUT)),
            }),
        }
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Runs a script, giving up after `limit`.
    pub async fn script<T>(
        &self,
        limit: Duration,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, BackendError>
    where
        T: FromRedisValue + Send,
    {
        self.guarded(limit, async {
            let mut connection = self.connection().await?;
            invocation.invoke_async(&mut connection).await
        })
        .await
    }

    /// Runs a command, giving up after `limit`.
    pub async fn command<T>(&self, limit: Duration, command: &Cmd) -> Result<T, BackendError>
    where
        T: FromRedisValue + Send,
    {
        self.guarded(limit, async {
            let mut connection = self.connection().await?;
            command.query_async(&mut connection).await
        })
        .await
    }

    /// A dedicated connection subscribed to `channel`, for waiters.
    pub async fn subscribe(&self, channel: &str) -> Result<PubSub, BackendError> {
        let subscribing = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok::<_, RedisError>(pubsub)
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, subscribing).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(self.failed(&e)),
            Err(_) => Err(self.timed_out(REQUEST_TIMEOUT)),
        }
    }

    /// The shared connection, connecting if there is none.
    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(connection) = self.slot().clone() {
            return Ok(connection);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.slot() = Some(connection.clone());
        Ok(connection)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` within `limit`; anything but a clean answer or a server's error reply (a
    /// timeout, a broken connection, the future dropped half-way) discards the connection.
    async fn guarded<T>(
        &self,
        limit: Duration,
        work: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, BackendError> {
        let mut discard = DiscardUnlessDone {
            link: self,
            done: false,
        };
        let result = tokio::time::timeout(limit, work).await;
        match result {
            Ok(Ok(value)) => {
                discard.done = true;
                Ok(value)
            }
            Ok(Err(e)) => {
                discard.done = is_server_reply(&e);
                Err(self.failed(&e))
            }
            Err(_) => Err(self.timed_out(limit)),
        }
    }

    fn failed(&self, e: &RedisError) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoint.clone(),
            reason: self.reason(e),
        }
    }

    fn timed_out(&self, limit: Duration) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoint.clone(),
            reason: format!("no answer within {}", show(limit)),
        }
    }

    fn reason(&self, e: &RedisError) -> String {
        scrub(&self.secrets, e)
    }
}

/// Throws the shared connection away when dropped before the request finished cleanly.
struct DiscardUnlessDone<'a> {
    link: &'a Link,
    done: bool,
}

impl Drop for DiscardUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            *self.link.slot() = None;
        }
    }
}

/// An error the server sent as its reply: the connection itself is fine.
fn is_server_reply(e: &RedisError) -> bool {
    (e.code().is_some() || e.kind() == redis::ErrorKind::AuthenticationFailed)
        && !e.is_io_error()
        && !e.is_connection_dropped()
        && !e.is_timeout()
}

/// The error as a lowercase fragment, without any of `secrets`.
fn scrub(secrets: &[String], e: &RedisError) -> String {
    let mut text = match (e.kind(), e.code()) {
        (redis::ErrorKind::AuthenticationFailed, _) => {
            "authentication failed (check the user and password in the URL)".to_owned()
        }
        (_, Some(code)) => {
            let detail = e.detail().unwrap_or_default().trim_end_matches('.');
            format!("the server replied {code}: {}", lowercase_first(detail))
        }
        _ => e.to_string(),
    };
    for secret in secrets {
        text = text.replace(secret.as_str(), "***");
    }
    let text = match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    };
    lowercase_first(&text)
}

/// `text` starting in lowercase, unless it starts with an acronym (`DB index ...`).
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.clone().next()) {
        (Some(first), next) if !next.is_some_and(char::is_uppercase) => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => text.to_owned(),
    }
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_never_carry_the_password() {
        let secrets = vec![percent_decode("p%40ss"), "p%40ss".to_owned()];
        assert_eq!(secrets[0], "p@ss");
        let e = RedisError::from(std::io::Error::other("Failed near p@ss and p%40ss"));
        let reason = scrub(&secrets, &e);
        assert!(
            !reason.contains("p@ss") && !reason.contains("p%40ss"),
            "{reason}"
        );
        assert!(reason.starts_with('f'), "{reason}");
    }

    #[test]
    fn acronyms_keep_their_case() {
        assert_eq!(
            lowercase_first("DB index is out of range"),
            "DB index is out of range"
        );
        assert_eq!(lowercase_first("Connection refused"), "connection refused");
        assert_eq!(lowercase_first(""), "");
    }

    #[test]
    fn percent_decoding_leaves_stray_percents() {
        assert_eq!(percent_decode("a%2Fb%zz%"), "a/b%zz%");
    }
}
