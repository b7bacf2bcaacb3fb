//! [`Link`]: the way to an etcd cluster through any of its members, with a deadline on every call
//! and failover from one member to the next.
//!
//! lockrun talks to one member at a time, over one gRPC channel. A call that fails without an
//! answer from the cluster — refused, reset, closed, "no leader", or silent past its deadline — or
//! that is dropped half-way (the supervisor abandons a slow renewal) throws that channel away and
//! moves on to the next endpoint, so a member that went silent is never trusted again until its
//! turn comes round. A quick failure is retried at once on the remaining members within the same
//! deadline. Every request carries `require_leader`, so a member cut off from the quorum refuses at
//! once instead of hanging. An error that *is* the cluster's answer (lease not found, permission
//! denied) is returned as such and keeps the channel.
//!
//! Messages name endpoints as `host:port` and never carry the password.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tonic::Code;

use super::settings::Settings;
use crate::backend::{BackendError, answer};
use crate::messages::{duration, fragment};

/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for a TCP connection to one member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A failed call.
#[derive(Debug)]
pub enum Failure {
    /// The cluster answered with an error; `lease_gone` when it said the lease does not exist.
    Answered {
        endpoint: String,
        reason: String,
        lease_gone: bool,
    },
    /// No answer from any member tried (`endpoints`): unreachable, closed, or too slow.
    NoAnswer { endpoints: String, reason: String },
}

impl Failure {
    /// Whether the cluster said the lease is gone.
    pub fn lease_gone(&self) -> bool {
        matches!(
            self,
            Failure::Answered {
                lease_gone: true,
                ..
            }
        )
    }
}

impl From<Failure> for BackendError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Answered {
                endpoint, reason, ..
            } => BackendError::Failed { endpoint, reason },
            Failure::NoAnswer { endpoints, reason } => BackendError::Unreachable {
                endpoint: endpoints,
                reason,
            },
        }
    }
}

/// The members of one cluster, and the channel to the one in use.
pub struct Link {
    endpoints: Vec<String>,
    options: ConnectOptions,
    secrets: Vec<String>,
    /// Whether the URL asked for TLS (`?cacert=`), for the hint on a mismatch with the server.
    tls: bool,
    state: Mutex<State>,
    /// Held while a client is made, so calls sent together share one connection.
    connecting: tokio::sync::Mutex<()>,
}

struct State {
    /// Index into `endpoints` of the member in use.
    current: usize,
    client: Option<Client>,
}

impl Link {
    /// Prepares the way to the cluster `settings` name, reading its TLS files; nothing connects
    /// until the first call.
    pub fn new(settings: &Settings) -> Result<Self, BackendError> {
        let mut options = ConnectOptions::new()
            .with_require_leader(true)
            .with_connect_timeout(CONNECT_TIMEOUT);
        if let Some((name, password)) = settings.credentials() {
            // An expired token is renewed once and the request sent again.
            options = options
                .with_user(name, password)
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = &settings.tls {
            let read = |option: &str, path: &std::path::Path| {
                std::fs::read(path).map_err(|e| BackendError::Failed {
                    endpoint: path.display().to_string(),
                    reason: format!("cannot read the {option} file: {}", crate::messages::io(&e)),
                })
            };
            let mut config =
                TlsOptions::new().ca_certificate(Certificate::from_pem(read("cacert", &tls.ca)?));
            if let Some((cert, key)) = &tls.identity {
                config =
                    config.identity(Identity::from_pem(read("cert", cert)?, read("key", key)?));
            }
            options = options.with_tls(config);
        }
        Ok(Link {
            endpoints: settings.endpoints.clone(),
            options,
            secrets: settings.url.secrets().to_vec(),
            tls: settings.tls.is_some(),
            state: Mutex::new(State {
                current: 0,
                client: None,
            }),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    /// Every endpoint, for messages.
    pub fn endpoints(&self) -> String {
        self.endpoints.join(",")
    }

    /// Runs `op` on the member in use, moving on to the next member when it gives no answer,
    /// until every member was tried once or `limit` runs out (each member gets an equal share of
    /// what is left, so one silent member cannot use up the time of the others).
    pub async fn call<T, F, Fut>(&self, limit: Duration, op: F) -> Result<T, Failure>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + limit;
        let mut tried: Vec<&str> = Vec::new();
        let mut last_reason = String::new();
        let members = self.endpoints.len();
        for attempt in 0..members {
            let index = self.state().current;
            let endpoint = self.endpoint(index);
            if !tried.contains(&endpoint) {
                tried.push(endpoint);
            }
            let mut abandon = AbandonUnlessDone {
                link: self,
                index,
                done: false,
            };
            // Connecting counts against the deadline too (authenticating is a request).
            let work = async {
                let client = self.client().await?;
                op(client).await
            };
            // A silent member gets its share of the time, so the others still get theirs.
            let now = tokio::time::Instant::now();
            let share = deadline.saturating_duration_since(now)
                / u32::try_from(members - attempt).unwrap_or(1);
            match answer::within(share, work).await {
                Ok(Ok(value)) => {
                    abandon.done = true;
                    return Ok(value);
                }
                Ok(Err(e)) if is_answer(&e) => {
                    abandon.done = true;
                    return Err(Failure::Answered {
                        endpoint: endpoint.to_owned(),
                        reason: self.reason(&e),
                        lease_gone: is_lease_gone(&e),
                    });
                }
                Ok(Err(e)) => {
                    last_reason = self.reason(&e);
                    if let Some(hint) = tls_mismatch_hint(&e, self.tls) {
                        last_reason = format!("{last_reason} ({hint})");
                    }
                    crate::debug!("{endpoint}: {last_reason}; trying the next member");
                }
                Err(_) => {
                    last_reason = format!("no answer within {}", duration(limit));
                    crate::debug!("{endpoint}: no answer in time; trying the next member");
                }
            }
            drop(abandon);
        }
        Err(Failure::NoAnswer {
            endpoints: tried.join(","),
            reason: last_reason,
        })
    }

    /// The client of the member in use, connecting if there is none. Connecting is lazy (the
    /// channel opens with the first request) except for authentication, which is a request.
    async fn client(&self) -> Result<Client, etcd_client::Error> {
        let current = || {
            let state = self.state();
            (state.current, state.client.clone())
        };
        if let (_, Some(client)) = current() {
            return Ok(client);
        }
        let _connecting = self.connecting.lock().await;
        let (index, existing) = current();
        if let Some(client) = existing {
            return Ok(client);
        }
        let endpoint = self.endpoint(index).to_owned();
        let client = Client::connect([endpoint], Some(self.options.clone())).await?;
        let mut state = self.state();
        if state.current == index {
            state.client = Some(client.clone());
        }
        Ok(client)
    }

    /// Drops the channel to member `index` and moves on to the next one, unless someone already
    /// moved on.
    fn abandon(&self, index: usize) {
        let mut state = self.state();
        if state.current == index {
            state.client = None;
            state.current = (index + 1) % self.endpoints.len().max(1);
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn endpoint(&self, index: usize) -> &str {
        self.endpoints.get(index).map_or("", String::as_str)
    }

    /// The error as a fragment, without the password.
    fn reason(&self, e: &etcd_client::Error) -> String {
        let text = innermost(e);
        // What etcd answers a request without a token once authentication is on.
        let text = match text.as_str() {
            "user name is empty" => "the cluster requires authentication (user name is empty): \
                                     give etcd://USER:PASS@HOST:PORT"
                .to_owned(),
            _ => text,
        };
        fragment(&text, &self.secrets)
    }

    /// A failure of something other than a call (a watch stream), while doing `what`.
    pub fn failed(&self, what: &str, reason: &str) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoints(),
            reason: format!("cannot {what}: {}", fragment(reason, &self.secrets)),
        }
    }

    /// [`Link::failed`] for an error of the client.
    pub fn failed_with(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        self.failed(what, &innermost(e))
    }
}

/// Abandons the member when dropped before its call finished with an answer.
struct AbandonUnlessDone<'a> {
    link: &'a Link,
    index: usize,
    done: bool,
}

impl Drop for AbandonUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.link.abandon(self.index);
        }
    }
}

/// Whether `e` is the cluster's answer, rather than a member that could not answer.
fn is_answer(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => !matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Internal
                | Code::Aborted
        ),
        etcd_client::Error::LeaseKeepAliveError(_) | etcd_client::Error::InvalidArgs(_) => true,
        _ => false,
    }
}

/// Whether `e` says that a lease with the id asked for exists already.
pub fn is_lease_taken(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease already exists"),
        _ => false,
    }
}

/// Whether `e` says the lease does not exist (expired, revoked).
fn is_lease_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == Code::NotFound || status.message().contains("lease not found")
        }
        _ => false,
    }
}

/// A word on TLS when the connection ended the way a mismatch ends it: a TLS member hangs up on a
/// plain client (a reset, or a broken pipe if the client was still writing), and a plain member
/// closes on, or resets, a TLS handshake it cannot read.
fn tls_mismatch_hint(e: &etcd_client::Error, tls: bool) -> Option<&'static str> {
    let kind = crate::messages::io_errors(cause_of(e)?).first()?.kind();
    match (tls, kind) {
        (false, std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) => {
            Some("if the server expects TLS, add ?cacert=FILE to the URL")
        }
        (true, std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => {
            Some("the server may not speak TLS: a URL without ?cacert= connects without it")
        }
        _ => None,
    }
}

/// Where `e`'s chain of causes begins: the client's error does not name its cause as a source.
fn cause_of(e: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    match e {
        etcd_client::Error::GRpcStatus(status) => std::error::Error::source(status),
        etcd_client::Error::TransportError(t) => std::error::Error::source(t),
        etcd_client::Error::IoError(io) => Some(io),
        _ => None,
    }
}

/// The innermost cause of `e` that says something.
fn innermost(e: &etcd_client::Error) -> String {
    let mut text = match e {
        etcd_client::Error::GRpcStatus(status) => status.message().to_owned(),
        etcd_client::Error::TransportError(t) => t.to_string(),
        etcd_client::Error::LeaseKeepAliveError(m) | etcd_client::Error::WatchError(m) => m.clone(),
        other => other.to_string(),
    };
    let mut source = cause_of(e);
    while let Some(inner) = source {
        let shown = inner.to_string();
        if !shown.is_empty() {
            text = shown;
        }
        source = inner.source();
    }
    match text.strip_prefix("etcdserver: ") {
        Some(rest) => rest.to_owned(),
        None if text.is_empty() => "no reason given".to_owned(),
        None => text,
    }
}
