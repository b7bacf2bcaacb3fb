//! [`Link`]: the connection to one PostgreSQL server, with a deadline on every request, and the
//! dedicated listening connections of waiters ([`Listener`]).
//!
//! One connection serves everything a lockrun does (acquire, renew, release). A request that fails
//! for any reason other than an error reported by the server, that runs out of time, or that is
//! dropped half-way (the supervisor abandons a slow renewal), throws the connection away, so the
//! next request connects afresh: a connection that went silent is never trusted again. Connecting
//! counts against the request's own deadline. tokio-postgres hands the socket to a `Connection`
//! that someone must poll: each connection gets a small task that does, and that forwards
//! notifications for a [`Listener`].
//!
//! A request that finds lockrun's schema missing creates it (see [`super::schema`]) and tries once
//! more. Messages name the endpoint as `host:port` and never carry the password.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Connection, NoTls, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::schema::Statements;
use super::settings::{Settings, Tls};
use super::tls;
use crate::backend::BackendError;
use crate::messages::{duration, fragment};

/// Longest wait for a connection when the backend is opened.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Bound parameters with their types (sent with the statement: one round trip, no prepare).
pub type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// A PostgreSQL server, reached on demand.
pub struct Link {
    settings: Settings,
    sql: Statements,
    tls: Option<MakeRustlsConnect>,
    current: Mutex<Option<Arc<Session>>>,
}

/// One open connection.
struct Session {
    client: Client,
    driver: AbortHandle,
}

/// Why one try of a request failed.
enum Failure {
    Connect(tokio_postgres::Error),
    Query(tokio_postgres::Error),
}

impl Link {
    /// Connects to the server `settings` name, so an unreachable server fails here, before
    /// anything runs.
    pub async fn open(settings: Settings) -> Result<Self, BackendError> {
        let tls = match &settings.tls {
            Tls::Off => None,
            Tls::Verified { roots } => Some(tls::connector(roots.as_deref())?),
        };
        let link = Link {
            sql: Statements::new(&settings.schema),
            settings,
            tls,
            current: Mutex::new(None),
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, link.session()).await {
            Ok(Ok(_)) => Ok(link),
            Ok(Err(e)) if e.as_db_error().is_some() => Err(link.failed(&e)),
            Ok(Err(e)) => Err(BackendError::Unreachable {
                endpoint: link.settings.endpoint.clone(),
                reason: link.reason(&e),
            }),
            Err(_) => Err(BackendError::Unreachable {
                endpoint: link.settings.endpoint.clone(),
                reason: format!("no connection within {}", duration(CONNECT_TIMEOUT)),
            }),
        }
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> &str {
        &self.settings.endpoint
    }

    /// The validated schema name.
    pub fn schema(&self) -> &str {
        &self.settings.schema
    }

    /// The SQL of each operation.
    pub fn sql(&self) -> &Statements {
        &self.sql
    }

    /// Runs one statement, giving up after `limit`; creates the schema first if it is missing.
    pub async fn query(
        &self,
        limit: Duration,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, BackendError> {
        let work = async {
            match self.query_once(sql, params).await {
                Err(Failure::Query(e)) if is_missing_schema(&e) => {
                    crate::debug!("creating the schema {:?}", self.schema());
                    self.create_schema().await?;
                    self.query_once(sql, params).await
                }
                other => other,
            }
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(Failure::Connect(e) | Failure::Query(e))) => Err(self.failed(&e)),
            Err(_) => Err(self.timed_out(limit)),
        }
    }

    /// A dedicated connection listening on `channel`, for a waiter.
    pub async fn listen(&self, channel: &str) -> Result<Listener, BackendError> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let listening = async {
            let session = self.connect(Some(sender)).await?;
            // The channel is lockrun's own identifier (schema and hex digits): safe to quote.
            session
                .client
                .batch_execute(&format!("LISTEN \"{channel}\""))
                .await?;
            Ok::<_, tokio_postgres::Error>(session)
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, listening).await {
            Ok(Ok(session)) => Ok(Listener {
                _session: session,
                receiver,
            }),
            Ok(Err(e)) => Err(self.failed(&e)),
            Err(_) => Err(self.timed_out(REQUEST_TIMEOUT)),
        }
    }

    async fn query_once(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Failure> {
        let session = self.session().await.map_err(Failure::Connect)?;
        let mut guard = DiscardUnlessDone {
            link: self,
            session: &session,
            done: false,
        };
        let result = session.client.query_typed(sql, params).await;
        guard.done = result
            .as_ref()
            .map_or_else(|e| e.as_db_error().is_some(), |_| true);
        result.map_err(Failure::Query)
    }

    /// Creates the schema, its tables and its function, idempotently.
    async fn create_schema(&self) -> Result<(), Failure> {
        let session = self.session().await.map_err(Failure::Connect)?;
        let mut guard = DiscardUnlessDone {
            link: self,
            session: &session,
            done: false,
        };
        // A failure inside the script leaves its transaction aborted: the connection goes.
        let result = session.client.batch_execute(&self.sql.create).await;
        guard.done = result.is_ok();
        result.map_err(Failure::Query)
    }

    /// The shared connection, connecting if there is none.
    async fn session(&self) -> Result<Arc<Session>, tokio_postgres::Error> {
        if let Some(session) = self.slot().clone() {
            return Ok(session);
        }
        let session = Arc::new(self.connect(None).await?);
        *self.slot() = Some(Arc::clone(&session));
        Ok(session)
    }

    /// A new connection whose driver forwards notifications to `notify`, if given.
    async fn connect(
        &self,
        notify: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<Session, tokio_postgres::Error> {
        let config = &self.settings.config;
        let (client, driver) = match &self.tls {
            None => {
                let (client, connection) = config.connect(NoTls).await?;
                (client, drive(connection, notify))
            }
            Some(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                (client, drive(connection, notify))
            }
        };
        Ok(Session { client, driver })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Session>>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, e: &tokio_postgres::Error) -> BackendError {
        BackendError::Failed {
            endpoint: self.settings.endpoint.clone(),
            reason: self.reason(e),
        }
    }

    fn timed_out(&self, limit: Duration) -> BackendError {
        BackendError::Failed {
            endpoint: self.settings.endpoint.clone(),
            reason: format!("no answer within {}", duration(limit)),
        }
    }

    fn reason(&self, e: &tokio_postgres::Error) -> String {
        let text = match e.as_db_error() {
            Some(db) => format!("server error: {}", db.message()),
            None => match std::error::Error::source(e) {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            },
        };
        fragment(&text, self.settings.all_secrets())
    }
}

/// A waiter's listening connection: [`Listener::notified`] returns when a notification arrives.
pub struct Listener {
    _session: Session,
    receiver: mpsc::UnboundedReceiver<String>,
}

impl Listener {
    /// The next notification's payload; `None` once the connection broke.
    pub async fn notified(&mut self) -> Option<String> {
        self.receiver.recv().await
    }

    /// Forgets notifications already received: the try they call for is about to happen.
    pub fn drain(&mut self) {
        while self.receiver.try_recv().is_ok() {}
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A healthy connection ends by itself once its client is gone; a silent one would linger.
        self.driver.abort();
    }
}

/// Polls `connection` on a task of its own, forwarding notification payloads to `notify`.
fn drive<S, T>(
    mut connection: Connection<S, T>,
    notify: Option<mpsc::UnboundedSender<String>>,
) -> AbortHandle
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(notify) = &notify
                        && notify.send(n.payload().to_owned()).is_err()
                    {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    })
    .abort_handle()
}

/// Throws the shared connection away when dropped before the request finished cleanly.
struct DiscardUnlessDone<'a> {
    link: &'a Link,
    session: &'a Arc<Session>,
    done: bool,
}

impl Drop for DiscardUnlessDone<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut slot = self.link.slot();
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, self.session)) {
            *slot = None;
        }
    }
}

/// The schema, a table or the function is missing: lockrun has not been used here yet.
fn is_missing_schema(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        [
            SqlState::INVALID_SCHEMA_NAME,
            SqlState::UNDEFINED_TABLE,
            SqlState::UNDEFINED_FUNCTION,
        ]
        .contains(code)
    })
}
