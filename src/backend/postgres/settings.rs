//! [`Settings`]: a `postgres://` URL turned into what the client needs — the connection
//! configuration, whether to use TLS, lockrun's schema, the endpoint for messages and the secrets
//! to scrub from them.
//!
//! lockrun reads three query parameters itself and strips them before the rest of the URL reaches
//! tokio-postgres (which knows the usual libpq keywords: `user`, `password`, `dbname`, `options`,
//! `application_name`, `connect_timeout`, `host`, `port`, ...):
//!
//! - `lockrun_schema=NAME` — the schema that holds lockrun's tables and functions (default
//!   `lockrun`), created on first use. 1–40 characters of `a-z 0-9 _`, not starting with a digit.
//!   Every user of a lock name must use the same schema.
//! - `sslmode=disable|allow|prefer|require|verify-ca|verify-full` — TLS is used only when the URL
//!   asks for it (`require`, `verify-ca`, `verify-full`); the first three connect in plain text.
//!   Unlike libpq's `require`, lockrun always verifies the server's certificate and host name, against
//!   the system's trusted roots or the file named by `sslrootcert`.
//! - `sslrootcert=PATH` — PEM file of the certificate authorities to trust for TLS.
//!
//! Every connection also asks the server (through the startup `options`) for `statement_timeout`,
//! `lock_timeout` and `idle_in_transaction_session_timeout`, so a statement or transaction
//! abandoned by a lockrun that was paused or cut off never holds a row lock for long. Behind
//! PgBouncer, list `options` in its `ignore_startup_parameters` (the client-side deadlines still
//! apply); waiters there are woken by the one-second re-check, as `LISTEN` needs a session.

use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};

use crate::backend::{BackendError, percent_decode};

const DEFAULT_SCHEMA: &str = "lockrun";
const MAX_SCHEMA_LEN: usize = 40;
const DEFAULT_PORT: u16 = 5432;
/// Server-side limits asked for at connection time (milliseconds).
const SERVER_LIMITS: &str = "-c statement_timeout=5000 -c lock_timeout=4000 \
                             -c idle_in_transaction_session_timeout=10000 -c client_min_messages=warning";

/// Whether, and how, to use TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    Off,
    /// Verified TLS; `roots` is a PEM file, or `None` for the system's trusted roots.
    Verified {
        roots: Option<String>,
    },
}

/// A parsed backend URL.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub tls: Tls,
    /// The schema's name, validated: safe to put between double quotes.
    pub schema: String,
    /// `host:port` (comma-separated when there are several), or a socket directory.
    pub endpoint: String,
    /// The password as written and as decoded, scrubbed from every message.
    pub secrets: Vec<String>,
}

impl Settings {
    /// Parses `url`; errors never echo a password.
    pub fn parse(url: &str) -> Result<Self, BackendError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut sslmode = String::from("prefer");
        let mut roots = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match percent_decode(key).as_str() {
                "lockrun_schema" => schema = percent_decode(value),
                "sslmode" => sslmode = percent_decode(value),
                "sslrootcert" => roots = Some(percent_decode(value)),
                _ => kept.push(pair),
            }
        }
        validate_schema(&schema)?;
        let tls = match sslmode.as_str() {
            "disable" | "allow" | "prefer" => Tls::Off,
            "require" | "verify-ca" | "verify-full" => Tls::Verified { roots },
            other => {
                return Err(BackendError::Unsupported(format!(
                    "invalid sslmode {other:?} in the backend URL: use disable, prefer, require, verify-ca or verify-full"
                )));
            }
        };
        let stripped = match kept.is_empty() {
            true => base.to_owned(),
            false => format!("{base}?{}", kept.join("&")),
        };
        let mut secrets = secrets_of(url);
        let mut config = tokio_postgres::Config::from_str(&stripped).map_err(|e| {
            let text = match std::error::Error::source(&e) {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            };
            BackendError::Unsupported(format!("invalid backend URL: {}", scrub(&secrets, &text)))
        })?;
        if let Some(password) = config.get_password() {
            secrets.push(String::from_utf8_lossy(password).into_owned());
        }
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        config.ssl_mode(match tls {
            Tls::Off => SslMode::Disable,
            Tls::Verified { .. } => SslMode::Require,
        });
        let options = match config.get_options() {
            Some(own) if !own.trim().is_empty() => format!("{SERVER_LIMITS} {own}"),
            _ => SERVER_LIMITS.to_owned(),
        };
        config.options(options);
        if config.get_application_name().is_none() {
            config.application_name("lockrun");
        }
        config.keepalives_idle(Duration::from_secs(10));
        let endpoint = endpoint_of(&config);
        Ok(Settings {
            config,
            tls,
            schema,
            endpoint,
            secrets,
        })
    }
}

/// `host:port` for each host the client may try.
fn endpoint_of(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(DEFAULT_PORT)
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{}", port(i)),
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        })
        .collect();
    match hosts.is_empty() {
        true => format!("localhost:{}", port(0)),
        false => hosts.join(","),
    }
}

/// Passwords in the URL's userinfo (as written and decoded) and in `password=` parameters.
fn secrets_of(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    if let Ok(parsed) = url::Url::parse(url) {
        if let Some(raw) = parsed.password() {
            secrets.push(raw.to_owned());
            secrets.push(percent_decode(raw));
        }
        for (key, value) in parsed.query_pairs() {
            if key.eq_ignore_ascii_case("password") {
                secrets.push(value.into_owned());
            }
        }
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && key.eq_ignore_ascii_case("password")
            {
                secrets.push(value.to_owned());
                secrets.push(percent_decode(value));
            }
        }
    }
    secrets
}

/// A schema name lockrun accepts: lowercase letters, digits and `_`, not starting with a digit.
fn validate_schema(schema: &str) -> Result<(), BackendError> {
    let valid = !schema.is_empty()
        && schema.len() <= MAX_SCHEMA_LEN
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit()
        && !schema.starts_with("pg_");
    match valid {
        true => Ok(()),
        false => Err(BackendError::Unsupported(format!(
            "invalid lockrun_schema {schema:?}: use 1-{MAX_SCHEMA_LEN} characters of a-z, 0-9 and _, \
             not starting with a digit or pg_"
        ))),
    }
}

/// `text` without any of `secrets`, as a lowercase fragment without an `(os error N)` tail.
pub fn scrub(secrets: &[String], text: &str) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        text = text.replace(secret.as_str(), "***");
    }
    if let Some(at) = text.find(" (os error") {
        text.truncate(at);
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_lockrun_parameters_and_keeps_the_rest() {
        let s = Settings::parse(
            "postgres://u:p%40ss@db.example:6543/app?lockrun_schema=locks&sslmode=disable&connect_timeout=2",
        )
        .unwrap();
        assert_eq!(s.schema, "locks");
        assert_eq!(s.tls, Tls::Off);
        assert_eq!(s.endpoint, "db.example:6543");
        assert_eq!(s.config.get_dbname(), Some("app"));
        assert_eq!(s.config.get_password(), Some(&b"p@ss"[..]));
        assert!(s.secrets.iter().any(|x| x == "p@ss"));
        assert!(s.secrets.iter().any(|x| x == "p%40ss"));
        assert!(
            s.config
                .get_options()
                .unwrap()
                .contains("statement_timeout")
        );
    }

    #[test]
    fn defaults_and_tls() {
        let s = Settings::parse("postgresql://h/db").unwrap();
        assert_eq!(s.schema, "lockrun");
        assert_eq!(s.endpoint, "h:5432");
        assert_eq!(s.tls, Tls::Off);
        let s =
            Settings::parse("postgresql://h/db?sslmode=verify-full&sslrootcert=/ca.pem").unwrap();
        assert_eq!(
            s.tls,
            Tls::Verified {
                roots: Some("/ca.pem".into())
            }
        );
    }

    #[test]
    fn rejects_bad_schemas_and_modes_without_the_password() {
        for bad in ["Locks", "1x", "a-b", "", "pg_x", "a\"b", &"x".repeat(41)] {
            let url = format!("postgres://u:hunter2@h/db?lockrun_schema={bad}");
            let err = Settings::parse(&url).unwrap_err().to_string();
            assert!(
                err.contains("lockrun_schema") && !err.contains("hunter2"),
                "{err}"
            );
        }
        let err = Settings::parse("postgres://u:hunter2@h/db?sslmode=bogus")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sslmode") && !err.contains("hunter2"), "{err}");
    }

    #[test]
    fn scrubs_secrets() {
        let secrets = vec!["hunter2".to_owned()];
        assert_eq!(scrub(&secrets, "Bad hunter2 (os error 1)"), "bad ***");
    }
}
