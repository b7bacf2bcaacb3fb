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
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, FromRedisValue, IntoConnectionInfo,
    RedisConnectionInfo,
};
use redis::{RedisError, RedisResult, ScriptInvocation};

use super::settings::Settings;
use crate::backend::first_contact::{self, Refusal};
use crate::backend::repeat::once_more_if_dropped;
use crate::backend::{BackendError, answer};
use crate::messages::fragment;

/// Longest wait for a connection when the backend is opened.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// What [`Link::send`] sends over the shared connection.
#[derive(Clone, Copy)]
pub enum Request<'a> {
    /// A script, loaded first when the server does not have it yet.
    Script(&'a ScriptInvocation<'a>),
    /// A command.
    Command(&'a Cmd),
}

impl Request<'_> {
    /// Sends it over `connection` and reads the reply.
    async fn send<T: FromRedisValue>(
        self,
        connection: &mut MultiplexedConnection,
    ) -> RedisResult<T> {
        match self {
            Request::Script(invocation) => invocation.invoke_async(connection).await,
            Request::Command(command) => command.query_async(connection).await,
        }
    }
}

/// A Redis server, reached on demand.
pub struct Link {
    client: Client,
    endpoint: String,
    /// The password as written and as decoded, scrubbed from every message.
    secrets: Vec<String>,
    connection: Mutex<Option<MultiplexedConnection>>,
    /// Where a `rediss://` link connects, to tell a plain Redis (which lets a TLS handshake run
    /// out of time) from a server that answers nothing; `None` without TLS.
    tls_address: Option<(String, u16)>,
}

impl Link {
    /// Connects to the server `settings` name, so an unreachable server fails here, before
    /// anything runs.
    pub async fn open(settings: &Settings) -> Result<Self, BackendError> {
        let link = Link::new(settings)?;
        link.ping().await?;
        Ok(link)
    }

    /// The link to the server `settings` name, without connecting yet (the first request
    /// connects): for a backend of several servers, one of which may be down for now.
    pub fn new(settings: &Settings) -> Result<Self, BackendError> {
        let endpoint = settings.endpoint();
        let host = settings.endpoint.bare_host().to_owned();
        let addr = match settings.tls {
            false => ConnectionAddr::Tcp(host, settings.port()),
            true => ConnectionAddr::TcpTls {
                host,
                port: settings.port(),
                insecure: false,
                tls_params: None,
            },
        };
        let secrets = settings.url.secrets().to_vec();
        let failed = |e: RedisError| BackendError::Failed {
            endpoint: endpoint.clone(),
            reason: scrub(&secrets, &e),
        };
        // No `CLIENT SETINFO` on connect: one exchange fewer per run, and a server that wants a
        // password answers the first real command with a plain NOAUTH.
        let mut redis = RedisConnectionInfo::default()
            .set_db(settings.db)
            .set_skip_set_lib_name();
        if let Some(user) = settings.url.user.as_deref().filter(|u| !u.is_empty()) {
            redis = redis.set_username(user);
        }
        if let Some(password) = &settings.url.password {
            redis = redis.set_password(password);
        }
        let info = addr
            .into_connection_info()
            .map_err(&failed)?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true))
            .set_redis_settings(redis);
        let client = Client::open(info).map_err(&failed)?;
        let tls_address = settings
            .tls
            .then(|| (settings.endpoint.bare_host().to_owned(), settings.port()));
        Ok(Link {
            client,
            endpoint,
            secrets,
            connection: Mutex::new(None),
            tls_address,
        })
    }

    /// Connects if need be and sends a PING, which proves the server answers, and that the
    /// credentials and database are accepted.
    pub async fn ping(&self) -> Result<(), BackendError> {
        let ping = async {
            let mut connection = self.connection().await?;
            redis::cmd("PING").query_async::<()>(&mut connection).await
        };
        let first = async {
            ping.await.map_err(|e| match is_server_reply(&e) {
                true => Refusal::Server(self.failed(&e)),
                // A TLS Redis hangs up on a plain client's first bytes.
                false if e.is_connection_dropped() && self.tls_address.is_none() => {
                    Refusal::Link(format!(
                        "{} (if the server expects TLS, use rediss://)",
                        self.reason(&e)
                    ))
                }
                false => Refusal::Link(self.reason(&e)),
            })
        };
        // A connection that did not answer is not kept for the next request.
        let mut discard = DiscardUnlessDone {
            link: self,
            done: false,
        };
        let started = tokio::time::Instant::now();
        let result = first_contact::within(&self.endpoint, CONNECT_TIMEOUT, first).await;
        discard.done = result.is_ok();
        match result {
            Err(_) if started.elapsed() >= CONNECT_TIMEOUT && self.answers_without_tls().await => {
                Err(BackendError::Unreachable {
                    endpoint: self.endpoint.clone(),
                    reason: format!(
                        "no TLS handshake within {}, but a plain PING is answered: the server \
                         does not speak TLS on this port (use redis://)",
                        crate::messages::duration(CONNECT_TIMEOUT)
                    ),
                })
            }
            result => result,
        }
    }

    /// Whether a `rediss://` server that let a TLS handshake run out of time answers a plain
    /// PING: a plain Redis reads the handshake as the start of a command and waits for the rest
    /// of it, while a TLS Redis that is merely stopped answers neither.
    async fn answers_without_tls(&self) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Some((host, port)) = &self.tls_address else {
            return false;
        };
        let probe = async {
            let mut stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.write_all(b"PING\r\n").await?;
            let mut first = [0u8; 1];
            stream.read_exact(&mut first).await?;
            // `+PONG`, or `-NOAUTH …` from a server that wants a password.
            Ok::<_, std::io::Error>(matches!(first[0], b'+' | b'-'))
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), probe).await,
            Ok(Ok(true))
        )
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends a request (a script or a command), giving up after `limit`.
    pub async fn send<T: FromRedisValue + Send>(
        &self,
        limit: Duration,
        request: Request<'_>,
    ) -> Result<T, BackendError> {
        self.guarded(limit, async {
            let mut connection = self.connection().await?;
            request.send(&mut connection).await
        })
        .await
    }

    /// [`Link::send`] for a request that may run twice (owner-checked renewals and releases):
    /// when the kept connection turns out to be broken (a restarted server), the request goes once
    /// more over a new one, within the same `limit`.
    pub async fn send_repeatable<T: FromRedisValue + Send>(
        &self,
        limit: Duration,
        request: Request<'_>,
    ) -> Result<T, BackendError> {
        let kept = self.slot().is_some();
        let dropped = || kept && self.slot().is_none();
        once_more_if_dropped(limit, &self.endpoint, dropped, |limit| {
            self.send(limit, request)
        })
        .await
    }

    /// A dedicated connection subscribed to `channel`, for waiters and for holders listening
    /// for a forced release.
    ///
    /// The client passes a refused SUBSCRIBE (an ACL without `&channel` or `+subscribe`) on as
    /// a success, so the subscription is proved by a PING: a subscribed connection answers it
    /// with `["pong", ""]`, an unsubscribed one with a plain `PONG`.
    pub async fn subscribe(&self, channel: &str) -> Result<PubSub, BackendError> {
        let subscribing = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            let pong: redis::Value = pubsub.ping().await?;
            Ok::<_, RedisError>((pubsub, matches!(pong, redis::Value::Array(_))))
        };
        match answer::within(REQUEST_TIMEOUT, subscribing).await {
            Ok(Ok((pubsub, true))) => Ok(pubsub),
            Ok(Ok((_, false))) => Err(BackendError::Failed {
                endpoint: self.endpoint.clone(),
                reason: format!(
                    "the server refused SUBSCRIBE to {}: this Redis user may not subscribe there",
                    fragment(channel, &self.secrets)
                ),
            }),
            Ok(Err(e)) => Err(self.failed(&e)),
            Err(_) => Err(self.timed_out(REQUEST_TIMEOUT)),
        }
    }

    /// The shared connection, connecting if there is none.
    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(connection) = self.slot().clone() {
            return Ok(connection);
        }
        // No deadline of the client's own: every caller runs inside one of lockrun's
        // (`answer::within`), which a stopped lockrun does not mistake for a silent server. The
        // client's timer would fire first after a stop, before the login's answer is read.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
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
        let result = answer::within(limit, work).await;
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
        BackendError::no_answer_within(&self.endpoint, limit)
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

/// The error as a fragment, without any of `secrets`.
fn scrub(secrets: &[String], e: &RedisError) -> String {
    let text = match (e.kind(), e.code()) {
        (redis::ErrorKind::AuthenticationFailed, _) => {
            "authentication failed (check the user and password in the URL)".to_owned()
        }
        (_, Some(code)) => format!(
            "the server replied {code}: {}",
            fragment(&script_error_detail(e.detail().unwrap_or_default()), &[])
        ),
        // A reply that is not RESP: something else listens on that port.
        (redis::ErrorKind::Parse, _) => {
            "not a Redis server (its reply is not Redis protocol)".into()
        }
        _ => e.to_string(),
    };
    fragment(&text, secrets)
}

/// An error reply from inside one of lockrun's scripts, without the script's hash and line
/// (which tell an operator nothing); an ACL refusal there says where the user's rights are
/// listed.
fn script_error_detail(detail: &str) -> String {
    let detail = detail.split(" script: ").next().unwrap_or(detail);
    match detail.contains("user executing the script can't run this command") {
        true => "this Redis user may not run one of the commands lockrun's scripts use \
                 (README lists them, under Redis)"
            .to_owned(),
        false => detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_never_carry_the_password() {
        let secrets = vec!["p@ss".to_owned(), "p%40ss".to_owned()];
        let e = RedisError::from(std::io::Error::other("Failed near p@ss and p%40ss"));
        let reason = scrub(&secrets, &e);
        assert!(
            !reason.contains("p@ss") && !reason.contains("p%40ss"),
            "{reason}"
        );
        assert!(reason.starts_with('f'), "{reason}");
    }
}
