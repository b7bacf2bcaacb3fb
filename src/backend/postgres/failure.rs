//! [`Failure`]: what went wrong talking to PostgreSQL, in lockrun's words — one line, no
//! password, with the fix where users hit the same wall again and again (PgBouncer refusing
//! lockrun's startup options or holding off logins after a server restart, a second database
//! user locked out of the schema) — and whether the server, or PgBouncer in front of it, turned
//! the connection away for lack of room: a full server clears by itself, so a contender rides it
//! out within its `--wait`.

use tokio_postgres::error::SqlState;

use crate::backend::BackendError;
use crate::messages::fragment;

/// PgBouncer's answer when its own `max_client_conn` is reached (SQLSTATE 08P01).
const POOLER_FULL: &str = "no more connections allowed";

/// A failed request.
#[derive(Debug)]
pub struct Failure {
    pub error: BackendError,
    /// The server (or the pooler) had no connection to spare.
    pub crowded: bool,
    /// lockrun's schema is missing or out of date.
    pub missing_schema: bool,
}

impl From<Failure> for BackendError {
    fn from(failure: Failure) -> Self {
        failure.error
    }
}

impl Failure {
    /// A failure that is not about room on the server.
    pub fn plain(error: BackendError) -> Self {
        Failure {
            error,
            crowded: false,
            missing_schema: false,
        }
    }
}

/// Whether `e` says the server (or PgBouncer) has no connection to spare.
pub fn crowded(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::TOO_MANY_CONNECTIONS || db.message().contains(POOLER_FULL)
    })
}

/// `e` as a message fragment: the server's message (with a hint when one is known), or the
/// client's error and its cause; every secret scrubbed, on one line.
pub fn reason(e: &tokio_postgres::Error, schema: &str, secrets: &[String]) -> String {
    let text = match e.as_db_error() {
        Some(db) => {
            let message = db.message();
            let hint = hint(db.code(), message, schema);
            format!("server error: {message}{hint}")
        }
        None if is_password_missing(e) => "the server asks for a password and none was given \
                                            (put it in the URL, PGPASSWORD or ~/.pgpass)"
            .to_owned(),
        None => match (crate::messages::io_cause(e), std::error::Error::source(e)) {
            (Some(io), _) => io,
            (None, Some(cause)) => format!("{e}: {cause}"),
            (None, None) => e.to_string(),
        },
    };
    fragment(&text, secrets)
}

/// Whether `e` is the client finding no password to answer the server's request for one: the
/// server's answer, in effect, not an unreachable server.
pub fn is_password_missing(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_none()
        && std::error::Error::source(e).is_some_and(|cause| cause.to_string() == "password missing")
}

/// The fix for a message users are known to meet, as a tail to append.
fn hint(code: &SqlState, message: &str, schema: &str) -> String {
    if message.contains("startup parameter") && message.contains("options") {
        return " (behind PgBouncer, list options in its ignore_startup_parameters, e.g. \
                ignore_startup_parameters = extra_float_digits,options)"
            .to_owned();
    }
    if *code == SqlState::INSUFFICIENT_PRIVILEGE && message.contains("schema") {
        return format!(
            " (the schema {schema} belongs to another database user: have its owner grant this \
             user USAGE on it and the right to use its tables and functions, or pass \
             ?lockrun_schema=NAME for a schema of this user's own; only lockruns sharing a \
             schema exclude each other)"
        );
    }
    if *code == SqlState::INSUFFICIENT_PRIVILEGE && message.contains("for database") {
        return format!(
            " (lockrun creates its schema {schema} on first use: grant this user CREATE on the \
             database, or have the schema made for it, or pass ?lockrun_schema=NAME for one that \
             exists)"
        );
    }
    if *code == SqlState::TOO_MANY_CONNECTIONS || message.contains(POOLER_FULL) {
        return " (the server has no connection to spare)".to_owned();
    }
    if message.contains("server_login_retry") {
        return " (PgBouncer waits server_login_retry, 15 s by default, after a failed login to the \
                server: set it to 1 so that holders ride through a server restart)"
            .to_owned();
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_walls_carry_their_fix() {
        let walls = [
            (
                SqlState::PROTOCOL_VIOLATION,
                "unsupported startup parameter: options",
                "ignore_startup_parameters",
            ),
            (
                SqlState::INSUFFICIENT_PRIVILEGE,
                "permission denied for schema lockrun",
                "?lockrun_schema=",
            ),
            (
                SqlState::PROTOCOL_VIOLATION,
                "server login has been failing, try again later (server_login_retry)",
                "set it to 1",
            ),
            (
                SqlState::INSUFFICIENT_PRIVILEGE,
                "permission denied for database fresh",
                "grant this user CREATE",
            ),
            (
                SqlState::TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
                "no connection to spare",
            ),
        ];
        for (code, message, fix) in walls {
            let hint = hint(&code, message, "lockrun");
            assert!(hint.contains(fix), "{message}: {hint}");
            assert!(!hint.contains('\n'), "{hint}");
        }
        assert_eq!(
            hint(&SqlState::UNDEFINED_TABLE, "relation x does not exist", "l"),
            ""
        );
    }
}
