//! [`Link`]: the one connection a lockrun keeps to a PostgreSQL server, with a deadline on every
//! request, and subscriptions to notification channels on that same connection.
//!
//! Everything a lockrun does — acquire, wait, renew, release, `status` for `--progress`, `LISTEN`
//! — goes over one connection ([`Session`]), so a lockrun costs the server one connection,
//! holder or waiter (the one exception: a waiter behind a pooler told where the server itself is
//! opens a second link there, only to listen near its turn, see [`super::doorbell`]). Only one
//! connection is ever being opened at a time. A request that fails for
//! any reason other than an error reported by the server, that runs out of time, or that is
//! dropped half-way (the supervisor abandons a slow renewal), throws the connection away, so the
//! next request connects afresh: a connection that went silent is never trusted again (its
//! subscribers are told, and subscribe again). Connecting counts against the request's own
//! deadline. Until a `LISTEN` shows the connection direct, its requests take turns rather than
//! being pipelined: through a transaction pooler, an answer abandoned half-way could otherwise
//! reach another client (see `Link::turn`).
//!
//! Every connection carries a random `lockrun.session` setting in its startup options. A
//! connection pooler such as PgBouncer drops those options (it must be told to, see
//! [`super::settings`]), so the server-side functions can tell a direct connection, on which
//! `LISTEN` works, from a pooled one, on which it cannot (see [`super::doorbell`]).
//!
//! A request that finds lockrun's schema missing or out of date creates or migrates it (see
//! [`super::schema`]) and tries once more. Messages name the endpoint as `host:port` and never
//! carry the password.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Config, Row, SimpleQueryMessage};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::failure::{self, Failure};
use super::schema::Statements;
use super::session::{Heard, Session};
use super::settings::{Settings, Tls};
use super::tls;
use crate::backend::BackendError;
use crate::backend::answer;
use crate::backend::first_contact::{self, Refusal};
use crate::backend::first_use;
use crate::backend::repeat::once_more_if_dropped;
use crate::backend::waiting::policy::owner_id;

/// Longest wait for a connection when the backend is opened.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Bound parameters with their types (sent with the statement: one round trip, no prepare).
pub type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// A PostgreSQL server, reached on demand over one connection.
pub struct Link {
    settings: Settings,
    /// The settings' configuration, plus this process's `lockrun.session` option.
    config: Config,
    cookie: String,
    sql: Statements,
    tls: Option<MakeRustlsConnect>,
    current: Mutex<Option<Arc<Session>>>,
    /// Whether the connection reaches the server directly (no pooler in between), as the
    /// server-side functions found: then statements sent often are prepared once.
    direct: AtomicBool,
    /// Held while a connection is being opened, so there is never a second one.
    connecting: tokio::sync::Mutex<()>,
    /// Whether a request that finds the schema missing creates it (not on a connection opened
    /// only to listen, which may lead to the wrong database).
    creates_schema: bool,
}

/// What subscribing to a channel found.
pub enum Subscribed {
    /// The connection reached the server directly: notifications on the channel arrive here.
    Listening(watch::Receiver<Heard>),
    /// The connection goes through a transaction pooler: `LISTEN` cannot work, nothing was
    /// subscribed.
    Pooled,
}

impl Link {
    /// Connects to the server `settings` name, so an unreachable server fails here, before
    /// anything runs. A server with no connection to spare is not a failure yet: whoever
    /// acquires rides that out (see [`super::crowd`]).
    pub async fn open(settings: Settings) -> Result<Self, BackendError> {
        Self::open_as(settings, true).await
    }

    /// [`Link::open`] for a connection a waiter only listens on (see [`super::doorbell`]): it
    /// never creates lockrun's schema.
    pub async fn open_listener(settings: Settings) -> Result<Self, BackendError> {
        Self::open_as(settings, false).await
    }

    async fn open_as(settings: Settings, creates_schema: bool) -> Result<Self, BackendError> {
        let tls = match &settings.tls {
            Tls::Off => None,
            Tls::Verified { roots } => Some(tls::connector(roots.as_deref())?),
        };
        let cookie = owner_id()?;
        let mut config = settings.config.clone();
        let options = format!(
            "{} -c lockrun.session={cookie}",
            config.get_options().unwrap_or_default()
        );
        config.options(options.trim_start());
        let link = Link {
            sql: Statements::new(&settings.schema),
            settings,
            config,
            cookie,
            tls,
            current: Mutex::new(None),
            direct: AtomicBool::new(false),
            connecting: tokio::sync::Mutex::new(()),
            creates_schema,
        };
        let first = async {
            match link.session().await {
                Ok(_) => Ok(()),
                Err(e) if failure::crowded(&e) => {
                    crate::info!(
                        "{}: {}; trying again when acquiring",
                        link.endpoint(),
                        link.reason(&e)
                    );
                    Ok(())
                }
                Err(e) if e.as_db_error().is_some() || failure::is_password_missing(&e) => {
                    Err(Refusal::Server(link.failed(&e).error))
                }
                Err(e) => Err(Refusal::Link(link.reason(&e))),
            }
        };
        first_contact::within(link.endpoint(), CONNECT_TIMEOUT, first).await?;
        Ok(link)
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> &str {
        &self.settings.endpoint
    }

    /// The validated schema name.
    pub fn schema(&self) -> &str {
        &self.settings.schema
    }

    /// This process's `lockrun.session` value: what a direct connection shows the server.
    pub fn cookie(&self) -> &str {
        &self.cookie
    }

    /// The SQL of each operation.
    pub fn sql(&self) -> &Statements {
        &self.sql
    }

    /// Records that the connection reaches the server directly (see [`Link::query_often`]).
    pub fn note_direct(&self) {
        self.direct.store(true, Ordering::Relaxed);
    }

    /// Runs one statement, giving up after `limit`; creates or migrates the schema first if it
    /// is missing or out of date.
    pub async fn query(
        &self,
        limit: Duration,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, Failure> {
        self.query_as(limit, sql, params, false).await
    }

    /// [`Link::query`] for a statement that may run twice (owner-checked renewals and
    /// releases): when the kept connection turns out to be closed (a restarted server, a reaped
    /// connection), it is sent once more over a new one, within the same `limit`.
    pub async fn query_repeatable(
        &self,
        limit: Duration,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, Failure> {
        let kept = self.slot().clone();
        let dropped = || {
            kept.is_some_and(|kept| {
                !self
                    .slot()
                    .as_ref()
                    .is_some_and(|now| Arc::ptr_eq(now, &kept))
            })
        };
        once_more_if_dropped(limit, self.endpoint(), dropped, |limit| {
            self.query(limit, sql, params)
        })
        .await
    }

    /// [`Link::query`] for a statement sent over and over (a waiter's tries and looks): prepared
    /// once per connection where the connection reaches the server directly, which spares the
    /// server parsing and planning it every time.
    pub async fn query_often(
        &self,
        limit: Duration,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, Failure> {
        let prepared = self.direct.load(Ordering::Relaxed);
        self.query_as(limit, sql, params, prepared).await
    }

    async fn query_as(
        &self,
        limit: Duration,
        sql: &str,
        params: &Params<'_>,
        prepared: bool,
    ) -> Result<Vec<Row>, Failure> {
        self.within(limit, || async {
            let session = self.session().await.map_err(|e| self.failed(&e))?;
            self.run(&session, sql, params, prepared).await
        })
        .await
    }

    /// `attempt` within `limit`; the schema is created or migrated first when it finds it
    /// missing or out of date (see [`first_use`]).
    async fn within<T, Fut>(&self, limit: Duration, attempt: impl Fn() -> Fut) -> Result<T, Failure>
    where
        Fut: Future<Output = Result<T, Failure>>,
    {
        if !self.creates_schema {
            return answer::within(limit, attempt())
                .await
                .unwrap_or_else(|_| Err(Failure::plain(self.timed_out(limit))));
        }
        let create = || async {
            let session = self.session().await.map_err(|e| self.failed(&e))?;
            self.create_schema(&session)
                .await
                .map_err(|e| self.failed(&e))
        };
        first_use::creating_if_missing(limit, attempt, |f: &Failure| f.missing_schema, create)
            .await
            .unwrap_or_else(|ran_out| Err(Failure::plain(self.timed_out(ran_out))))
    }

    /// Subscribes to `channel` on the current connection (LISTEN), unless it goes through a
    /// pooler. With `hold = Some((name, slot, owner))`, also says whether that hold still exists
    /// (`None` when not asked).
    pub async fn subscribe(
        &self,
        channel: &str,
        hold: Option<(&str, i32, &str)>,
    ) -> Result<(Subscribed, Option<bool>), Failure> {
        let (name, slot, owner) = match hold {
            Some((name, slot, owner)) => (name, Some(slot), Some(owner)),
            None => ("", None, None),
        };
        let cookie = self.cookie.as_str();
        let work = || async {
            let session = self.session().await.map_err(|e| self.failed(&e))?;
            // Before LISTEN, so that nothing heard after it is missed.
            let heard = session.inbox.subscribe(channel);
            let rows = self
                .run(
                    &session,
                    &self.sql.subscribe,
                    &[
                        (&cookie, Type::TEXT),
                        (&channel, Type::TEXT),
                        (&name, Type::TEXT),
                        (&slot, Type::INT4),
                        (&owner, Type::TEXT),
                    ],
                    false,
                )
                .await?;
            let row = rows.first().ok_or_else(|| self.unexpected("subscribe"))?;
            let listening: bool = row.try_get(0).map_err(|_| self.unexpected("subscribe"))?;
            let holds: Option<bool> = row.try_get(1).map_err(|_| self.unexpected("subscribe"))?;
            let subscribed = match (listening, heard) {
                (false, _) => Subscribed::Pooled,
                (true, Some(heard)) => Subscribed::Listening(heard),
                (true, None) => {
                    return Err(Failure::plain(BackendError::Failed {
                        endpoint: self.endpoint().to_owned(),
                        reason: "the connection closed while subscribing".into(),
                    }));
                }
            };
            Ok((subscribed, holds))
        };
        self.within(REQUEST_TIMEOUT, work).await
    }

    /// An answer of an unexpected shape to `what`.
    pub fn unexpected(&self, what: &str) -> Failure {
        Failure::plain(BackendError::Failed {
            endpoint: self.endpoint().to_owned(),
            reason: format!("unexpected answer to {what}"),
        })
    }

    /// Runs `sql` on `session` (a missing schema is created by [`Link::within`]).
    async fn run(
        &self,
        session: &Arc<Session>,
        sql: &str,
        params: &Params<'_>,
        prepared: bool,
    ) -> Result<Vec<Row>, Failure> {
        let _turn = self.turn(session).await;
        let mut guard = DiscardUnlessDone {
            link: self,
            session,
            done: false,
        };
        let result = match prepared {
            true => session.query_prepared(sql, params).await,
            false => session.client.query_typed(sql, params).await,
        };
        guard.done = result
            .as_ref()
            .map_or_else(|e| e.as_db_error().is_some(), |_| true);
        result.map_err(|e| self.failed(&e))
    }

    /// Creates or migrates the schema, its tables and its functions, unless another lockrun
    /// already did: one transaction, under an advisory lock, that alters nothing when the schema
    /// is current (altering tables in use would deadlock with the lockruns using them).
    async fn create_schema(&self, session: &Arc<Session>) -> Result<(), tokio_postgres::Error> {
        let _turn = self.turn(session).await;
        let mut guard = DiscardUnlessDone {
            link: self,
            session,
            done: false,
        };
        // A failure inside leaves the transaction open or aborted: the connection goes.
        let client = &session.client;
        // Another lockrun made it meanwhile (many start at once on a new database): nothing to
        // wait for.
        if self.schema_is_current(client).await? {
            guard.done = true;
            return Ok(());
        }
        client.batch_execute(&self.sql.lock_schema).await?;
        if !self.schema_is_current(client).await? {
            crate::debug!("creating or upgrading the schema {:?}", self.schema());
            client.batch_execute(&self.sql.create).await?;
        }
        client.batch_execute("COMMIT").await?;
        guard.done = true;
        Ok(())
    }

    /// Whether the schema is at this version already.
    async fn schema_is_current(
        &self,
        client: &tokio_postgres::Client,
    ) -> Result<bool, tokio_postgres::Error> {
        let answer = client.simple_query(&self.sql.schema_current).await?;
        Ok(answer.iter().any(
            |message| matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("t")),
        ))
    }

    /// The right to send a request on `session`, where a pooler may sit in between (until a
    /// `LISTEN` shows the connection direct): there requests go one at a time, never pipelined.
    /// PgBouncer (1.18, transaction pooling) counts a server connection ready once the first of
    /// two pipelined transactions has answered; when the client then goes away (a request cut
    /// short, a lockrun exiting) while the second still runs, it hands the rest of that answer to
    /// the next client it gives the server connection to, such as another lockrun's renewal.
    async fn turn<'s>(&self, session: &'s Session) -> Option<tokio::sync::MutexGuard<'s, ()>> {
        match self.direct.load(Ordering::Relaxed) {
            true => None,
            false => Some(session.turn.lock().await),
        }
    }

    /// The connection, opening one if there is none (one at a time).
    async fn session(&self) -> Result<Arc<Session>, tokio_postgres::Error> {
        if let Some(session) = self.slot().clone() {
            return Ok(session);
        }
        let _opening = self.connecting.lock().await;
        if let Some(session) = self.slot().clone() {
            return Ok(session);
        }
        let session = Arc::new(Session::connect(&self.config, self.tls.as_ref()).await?);
        *self.slot() = Some(Arc::clone(&session));
        Ok(session)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Session>>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, e: &tokio_postgres::Error) -> Failure {
        Failure {
            error: BackendError::Failed {
                endpoint: self.endpoint().to_owned(),
                reason: self.reason(e),
            },
            crowded: failure::crowded(e),
            missing_schema: is_missing_schema(e),
        }
    }

    fn timed_out(&self, limit: Duration) -> BackendError {
        BackendError::no_answer_within(self.endpoint(), limit)
    }

    fn reason(&self, e: &tokio_postgres::Error) -> String {
        failure::reason(e, self.schema(), self.settings.all_secrets())
    }
}

/// Throws the connection away when dropped before the request finished cleanly.
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

/// The schema, a table, a column or a function is missing: lockrun has not been used here yet,
/// or only by an older version.
fn is_missing_schema(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        [
            SqlState::INVALID_SCHEMA_NAME,
            SqlState::UNDEFINED_TABLE,
            SqlState::UNDEFINED_COLUMN,
            SqlState::UNDEFINED_FUNCTION,
        ]
        .contains(code)
    })
}
