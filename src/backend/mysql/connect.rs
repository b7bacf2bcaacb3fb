//! [`Link`]: the connection to one MySQL or MariaDB server, with a deadline on every request.
//!
//! One connection serves everything a lockrun does — acquire, a waiter's sleep, renew, release —
//! and it is the only one a waiter ever opens; a holder whose command runs on opens a second,
//! idle one that waits for a forced release ([`Link::listener`]). A request that fails for any
//! reason other than an error reported by the server, that runs out of time, or that is dropped
//! half-way (the supervisor abandons a slow renewal; a waiter gives up mid-sleep) throws its
//! connection away, so the next request connects afresh: a connection that went silent is never
//! trusted again. Connecting counts against the request's own deadline.
//!
//! Every new session runs [`super::server::setup`] first. A request that finds lockrun's tables or
//! procedures missing creates them (see [`super::schema`]) on a budget of its own and tries once
//! more (the rule of [`first_use`]). A request interrupted by
//! a wake-up aimed at this session's previous statement (`KILL QUERY` arrives a moment late) or
//! chosen as a deadlock victim is tried again at once: every statement lockrun sends is
//! idempotent. Messages name the endpoint as `host:port` and never carry the password.

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Row, ServerError};

use super::server::{self, Facts, Flavor};
use super::settings::Settings;
use super::sql::{self, Statements};
use super::{schema, tls};
use crate::backend::first_contact::{self, Refusal};
use crate::backend::first_use;
use crate::backend::sql_names::fnv1a;
use crate::backend::waiting::policy::owner_id;
use crate::backend::{BackendError, answer};
use crate::messages::fragment;

/// Longest wait for a connection when the backend is opened.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a first use waits for another lockrun that is creating the tables (within
/// [`first_use::CREATE_LIMIT`]).
const DDL_LOCK_WAIT: Duration = Duration::from_secs(20);
/// One `GET_LOCK` wait for that: shorter than the session's statement limit.
const DDL_LOCK_STEP: Duration = Duration::from_secs(3);
/// How long an abandoned connection may take to say goodbye.
const QUIT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a request interrupted by a stray wake-up, or chosen as a deadlock victim, is retried.
const RETRIES: u32 = 3;

/// `ER_NO_SUCH_TABLE`, `ER_SP_DOES_NOT_EXIST`: lockrun has not been used in this database yet.
const MISSING: [u16; 2] = [1146, 1305];
/// `ER_QUERY_INTERRUPTED`: a `KILL QUERY` ended the statement.
const INTERRUPTED: u16 = 1317;
/// Interrupted, or `ER_LOCK_DEADLOCK`: worth trying again at once.
const RETRY: [u16; 2] = [INTERRUPTED, 1213];

/// How a request is retried, and whether its connection survives a server's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Statements that each commit, or a procedure that rolls back what it began: the connection
    /// is clean after an error; an interruption or a deadlock is tried again.
    Statement,
    /// A waiter's sleep: tried once; an interruption is its wake-up.
    Sleep,
    /// Statements in one explicit transaction: after an error the connection goes; an
    /// interruption or a deadlock is tried again on a fresh one.
    Transaction,
    /// [`Kind::Statement`]s that may be sent twice (owner-checked renewals and releases): a
    /// kept connection found dead (the server restarted, a proxy reaped it) is replaced and the
    /// statement sent once more on the new one.
    Repeatable,
}

/// One statement's results: each result set's rows, and the rows the last statement affected.
#[derive(Debug, Default)]
pub struct Reply {
    pub sets: Vec<Vec<Row>>,
    pub affected: u64,
}

impl Reply {
    /// The first row of the first result set.
    pub fn first_row(&self) -> Option<&Row> {
        self.sets.first().and_then(|rows| rows.first())
    }
}

/// A MySQL or MariaDB server, reached on demand.
pub struct Link {
    opts: Opts,
    endpoint: String,
    secrets: Vec<String>,
    database: String,
    prefix: String,
    sql: Statements,
    /// This run's presence key: its sessions hold `lockrun:BELL` (and `lockrun:BELL:r`).
    bell: String,
    main: tokio::sync::Mutex<Option<Conn>>,
}

/// Why one request failed.
enum Failure {
    /// The server answered with an error; the connection is fine.
    Server(ServerError),
    /// The connection failed (or could not be made).
    Link(mysql_async::Error),
}

impl From<mysql_async::Error> for Failure {
    fn from(e: mysql_async::Error) -> Self {
        match e {
            mysql_async::Error::Server(e) => Failure::Server(e),
            other => Failure::Link(other),
        }
    }
}

impl Link {
    /// Connects to the server `settings` names, so an unreachable server fails here, before
    /// anything runs.
    pub async fn open(settings: &Settings) -> Result<Self, BackendError> {
        let mut opts = OptsBuilder::default()
            .ip_or_hostname(settings.endpoint.bare_host())
            .tcp_port(settings.port())
            .user(Some(settings.user.clone()))
            .pass(settings.password.clone())
            .db_name(Some(settings.database.clone()))
            // No look-ups after connecting (lockrun sets what it needs itself), no second
            // connection through the server's socket, no prepared statements.
            .prefer_socket(false)
            .max_allowed_packet(Some(16 << 20))
            .wait_timeout(Some(28_800))
            .stmt_cache_size(0)
            .tcp_nodelay(true)
            .tcp_keepalive(Some(Duration::from_secs(10)))
            // An UPDATE reports the rows it matched, even when a value did not change.
            .client_found_rows(true);
        if let Some(ssl) = tls::options(&settings.tls)? {
            opts = opts.ssl_opts(ssl);
        }
        let link = Link {
            opts: opts.into(),
            endpoint: settings.endpoint(),
            secrets: settings.all_secrets().to_vec(),
            database: settings.database.clone(),
            prefix: settings.prefix.clone(),
            sql: Statements::new(&settings.prefix),
            bell: owner_id()?,
            main: tokio::sync::Mutex::new(None),
        };
        let first = async {
            link.connect(&link.presence())
                .await
                .map_err(|failure| match failure {
                    Failure::Server(e) => Refusal::Server(link.failed(&server_reason(&e))),
                    Failure::Link(e) => Refusal::Link(link.reason(&e)),
                })
        };
        let conn = first_contact::within(&link.endpoint, CONNECT_TIMEOUT, first).await?;
        *link.main.lock().await = Some(conn);
        Ok(link)
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The SQL of each operation.
    pub fn sql(&self) -> &Statements {
        &self.sql
    }

    /// This run's presence key (see [`super::schema`]).
    pub fn bell(&self) -> &str {
        &self.bell
    }

    /// The presence lock of the main connection.
    fn presence(&self) -> String {
        format!("lockrun:{}", self.bell)
    }

    /// Runs `sql` on the main connection, giving up after `limit`; creates lockrun's tables first
    /// if they are missing, and tries again after a stray interruption or a deadlock.
    pub async fn query(&self, limit: Duration, sql: &str) -> Result<Reply, BackendError> {
        self.within(limit, || self.run(sql, Kind::Statement)).await
    }

    /// [`Link::query`] for a statement that may be sent twice (it changes nothing the second
    /// time): when the kept connection turns out to be dead, it goes to a fresh one.
    pub async fn query_repeatable(
        &self,
        limit: Duration,
        sql: &str,
    ) -> Result<Reply, BackendError> {
        self.within(limit, || self.run(sql, Kind::Repeatable)).await
    }

    /// [`Link::query`] for statements that open a transaction of their own: a server error may
    /// leave it open, so the connection is then dropped (the server rolls back) instead of
    /// reused.
    pub async fn transaction(&self, limit: Duration, sql: &str) -> Result<Reply, BackendError> {
        self.within(limit, || self.run(sql, Kind::Transaction))
            .await
    }

    /// [`Link::query`] for a look that changes nothing (`status`), which must not wait for the
    /// main connection while a waiter's sleep holds it (up to a second, which made every
    /// `--progress` line that late): then it goes on a session of its own, closed after.
    pub async fn look(&self, limit: Duration, sql: &str) -> Result<Reply, BackendError> {
        // Free now: `query` takes it within this same poll, before any other task runs.
        if self.main.try_lock().is_ok() {
            return self.query(limit, sql).await;
        }
        let aside = || async {
            let conn = self.connect(&format!("{}:look", self.presence())).await?;
            let mut lent = Lent(Some(conn));
            Ok(exchange(lent.conn(), sql).await?)
        };
        self.within(limit, aside).await
    }

    /// Runs a waiter's sleep (see [`Statements::wait`]) on the main connection; `Ok` however it
    /// ended — slept, woken (`KILL QUERY`) or not needed — and `Err` when the connection failed.
    pub async fn sleep(&self, limit: Duration, sql: &str) -> Result<(), BackendError> {
        let sleeping = || async {
            match self.run(sql, Kind::Sleep).await {
                Err(Failure::Server(e)) if e.code == INTERRUPTED => Ok(()),
                other => other.map(drop),
            }
        };
        self.within(limit, sleeping).await
    }

    /// A connection of its own for a holder's listening statement, holding `lockrun:BELL:r`.
    pub async fn listener(&self) -> Result<Conn, BackendError> {
        let presence = format!("{}:r", self.presence());
        match answer::within(REQUEST_TIMEOUT, self.connect(&presence)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(Failure::Server(e))) => Err(self.failed(&server_reason(&e))),
            Ok(Err(Failure::Link(e))) => Err(self.failed(&self.reason(&e))),
            Err(_) => Err(self.timed_out(REQUEST_TIMEOUT)),
        }
    }

    /// `work` within `limit`, its failure as a backend error; lockrun's tables are created first
    /// when it finds them missing (see [`first_use`]).
    async fn within<T, Fut>(
        &self,
        limit: Duration,
        work: impl Fn() -> Fut,
    ) -> Result<T, BackendError>
    where
        Fut: Future<Output = Result<T, Failure>>,
    {
        let missing = |f: &Failure| matches!(f, Failure::Server(e) if MISSING.contains(&e.code));
        match first_use::creating_if_missing(limit, work, missing, || self.ensure_schema()).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Failure::Server(e))) => Err(self.failed(&server_reason(&e))),
            Ok(Err(Failure::Link(e))) => Err(self.failed(&self.reason(&e))),
            Err(ran_out) => Err(self.timed_out(ran_out)),
        }
    }

    /// Creates lockrun's tables and procedures on the main connection.
    async fn ensure_schema(&self) -> Result<(), Failure> {
        let mut slot = self.main.lock().await;
        let conn = match slot.take() {
            Some(conn) => conn,
            None => self.connect(&self.presence()).await?,
        };
        let mut lent = Lent(Some(conn));
        crate::debug!("creating lockrun's tables in {}", self.database);
        let created = self.create_schema(lent.conn()).await;
        // A failed creation's connection goes, unless the server only refused.
        if matches!(created, Ok(()) | Err(Failure::Server(_))) {
            *slot = lent.give_back();
        }
        created
    }

    /// One request on the main connection.
    async fn run(&self, sql: &str, kind: Kind) -> Result<Reply, Failure> {
        let mut slot = self.main.lock().await;
        let mut retries = 0;
        loop {
            let (conn, kept) = match slot.take() {
                Some(conn) => (conn, true),
                None => (self.connect(&self.presence()).await?, false),
            };
            let mut lent = Lent(Some(conn));
            match exchange(lent.conn(), sql).await {
                Ok(reply) => {
                    *slot = lent.give_back();
                    return Ok(reply);
                }
                Err(mysql_async::Error::Server(e)) => {
                    // A transaction the error left open goes with its connection.
                    if kind != Kind::Transaction {
                        *slot = lent.give_back();
                    }
                    // Missing tables are created by `within`, on a budget of their own.
                    if kind == Kind::Sleep || !RETRY.contains(&e.code) || retries >= RETRIES {
                        return Err(Failure::Server(e));
                    }
                    retries += 1;
                }
                // `lent` is dropped: the connection goes (and, for a repeatable statement on
                // a kept connection, a fresh one is tried).
                Err(_) if kind == Kind::Repeatable && kept => {
                    crate::debug!(
                        "the connection to {} was lost; trying a new one",
                        self.endpoint
                    );
                }
                Err(e) => return Err(Failure::Link(e)),
            }
        }
    }

    /// A new session: connected, set up, holding the presence lock `presence` (if free).
    async fn connect(&self, presence: &str) -> Result<Conn, Failure> {
        let conn = Conn::new(self.opts.clone()).await?;
        let mut lent = Lent(Some(conn));
        let reply = exchange(lent.conn(), &server::setup(presence)).await?;
        let facts = reply
            .sets
            .get(1)
            .and_then(|rows| rows.first())
            .and_then(facts_of);
        match facts {
            Some(facts) => {
                crate::debug!(
                    "connected to {} {} on {} (session {})",
                    match facts.flavor {
                        Flavor::MySql => "MySQL",
                        Flavor::MariaDb => "MariaDB",
                    },
                    facts.version,
                    self.endpoint,
                    facts.connection_id
                );
                if !facts.present {
                    crate::debug!("the session's wake-up lock is still held by an earlier one");
                }
                server::warn_once(&facts);
            }
            None => crate::debug!("unexpected answer to the session setup"),
        }
        Ok(lent.give_back().expect("the connection was lent"))
    }

    /// Creates lockrun's tables and the procedures that are missing, under a user-level lock so
    /// that concurrent first uses do not trip over each other.
    async fn create_schema(&self, conn: &mut Conn) -> Result<(), Failure> {
        let lock = sql::binary(&format!(
            "lockrun-ddl:{:016x}",
            fnv1a(format!("{}.{}", self.database, self.prefix).as_bytes())
        ));
        // Waited for in steps shorter than the session's statement limit (5 s), which would
        // otherwise cut the wait short (GET_LOCK then answers NULL).
        let waiting_since = std::time::Instant::now();
        loop {
            let got: Option<Option<i64>> = conn
                .query_first(format!(
                    "SELECT GET_LOCK({lock}, {})",
                    DDL_LOCK_STEP.as_secs()
                ))
                .await?;
            match got.flatten() {
                Some(1) => break,
                Some(0) if waiting_since.elapsed() < DDL_LOCK_WAIT => {}
                _ => {
                    return Err(Failure::Server(ServerError {
                        code: 0,
                        message: "another lockrun took too long creating lockrun's tables".into(),
                        state: String::new(),
                    }));
                }
            }
        }
        let result = async {
            let wanted: Vec<String> = schema::procedures(&self.prefix)
                .iter()
                .map(|p| sql::binary(p))
                .collect();
            let present: Vec<String> = conn
                .query(format!(
                    "SELECT ROUTINE_NAME FROM information_schema.ROUTINES \
                     WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME IN ({})",
                    wanted.join(", ")
                ))
                .await?;
            for (object, ddl) in schema::ddl(&self.prefix) {
                let is_procedure = ddl.starts_with("CREATE PROCEDURE");
                if !(is_procedure && present.contains(&object)) {
                    conn.query_drop(ddl).await?;
                }
            }
            Ok::<_, mysql_async::Error>(())
        }
        .await;
        let released = conn.query_drop(format!("DO RELEASE_LOCK({lock})")).await;
        result?;
        released?;
        Ok(())
    }

    fn failed(&self, reason: &str) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoint.clone(),
            reason: fragment(reason, &self.secrets),
        }
    }

    fn timed_out(&self, limit: Duration) -> BackendError {
        BackendError::no_answer_within(&self.endpoint, limit)
    }

    /// A client-side failure as a fragment, without the password.
    fn reason(&self, e: &mysql_async::Error) -> String {
        let text = match e {
            mysql_async::Error::Io(mysql_async::IoError::Io(io)) => crate::messages::io(io),
            mysql_async::Error::Io(mysql_async::IoError::Tls(tls)) => format!("TLS: {tls}"),
            mysql_async::Error::Server(server) => server_reason(server),
            other => other.to_string(),
        };
        fragment(&text, &self.secrets)
    }
}

/// `ER_DBACCESS_DENIED_ERROR` (creating a procedure without `CREATE ROUTINE` says this too),
/// `ER_TABLEACCESS_DENIED_ERROR`, `ER_PROCACCESS_DENIED_ERROR`: a privilege lockrun needs is
/// missing.
const PRIVILEGE_MISSING: [u16; 3] = [1044, 1142, 1370];

/// A server's error as a reason.
fn server_reason(e: &ServerError) -> String {
    match e.code {
        0 => e.message.clone(),
        1045 => "access denied (check the user and password in the URL)".into(),
        code if PRIVILEGE_MISSING.contains(&code) => format!(
            "server error {code}: {} (lockrun's user needs SELECT, INSERT, UPDATE, DELETE and \
             EXECUTE on the database, and CREATE and CREATE ROUTINE until lockrun's tables and \
             procedures exist)",
            e.message
        ),
        code => format!("server error {code}: {}", e.message),
    }
}

/// Sends `sql` and reads every result set it produces. An error of a statement after the first
/// one is reported only by `drop_result` (the client library reads it ahead and keeps it for
/// the next query otherwise, which would then get this query's error): it is always called.
async fn exchange(conn: &mut Conn, sql: &str) -> mysql_async::Result<Reply> {
    let mut result = conn.query_iter(sql).await?;
    let mut reply = Reply::default();
    loop {
        let rows: Vec<Row> = result.collect().await?;
        reply.affected = result.affected_rows();
        reply.sets.push(rows);
        if result.is_empty() {
            result.drop_result().await?;
            return Ok(reply);
        }
    }
}

/// What a session's setup read (the second result set's row).
fn facts_of(row: &Row) -> Option<Facts> {
    let version: String = row.get_opt(0)?.ok()?;
    Some(Facts {
        flavor: Flavor::of(&version),
        connection_id: row.get_opt(1)?.ok()?,
        flush_log_at_commit: row.get_opt(2)?.ok()?,
        sync_binlog: row.get_opt(3)?.ok()?,
        log_bin: row.get_opt::<u64, _>(4)?.ok()? != 0,
        present: row.get_opt::<Option<u64>, _>(5)?.ok()? == Some(1),
        version,
    })
}

/// A connection taken out for one request. Dropped before it is given back (the request failed
/// on the link, ran out of time or was abandoned), it is closed: told goodbye within
/// [`QUIT_TIMEOUT`] and never used again.
struct Lent(Option<Conn>);

impl Lent {
    fn conn(&mut self) -> &mut Conn {
        self.0.as_mut().expect("the connection was lent")
    }

    fn give_back(mut self) -> Option<Conn> {
        self.0.take()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            discard(conn);
        }
    }
}

/// Closes `conn` without reading what the server may still send, so a silent server cannot hold
/// the goodbye up.
pub fn discard(conn: Conn) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(QUIT_TIMEOUT, conn.disconnect()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_reasons_name_the_code_and_hide_nothing_useful() {
        let e = ServerError {
            code: 1049,
            message: "Unknown database 'jobs'".into(),
            state: "42000".into(),
        };
        assert_eq!(
            server_reason(&e),
            "server error 1049: Unknown database 'jobs'"
        );
        let denied = ServerError {
            code: 1045,
            message: "Access denied for user 'u'@'h' (using password: YES)".into(),
            state: "28000".into(),
        };
        assert!(server_reason(&denied).contains("check the user and password"));
        let no_routine = ServerError {
            code: 1044,
            message: "Access denied for user 'u'@'%' to database 'jobs'".into(),
            state: "42000".into(),
        };
        assert!(server_reason(&no_routine).contains("CREATE ROUTINE until"));
    }
}
