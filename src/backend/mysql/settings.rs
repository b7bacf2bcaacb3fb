//! [`Settings`] of the `mysql://` backend, parsed once and without I/O:
//! `mysql://[USER[:PASSWORD]@]HOST[:PORT]/DB[?KEY=VALUE&…]`, for MySQL 8 and MariaDB 10.6+.
//!
//! - `DB` (required) is the database lockrun's tables live in, created on first use there.
//! - Without a user, lockrun logs in as the operating-system user, as the `mysql` client does.
//! - `ssl-mode=DISABLED|PREFERRED|REQUIRED|VERIFY_CA|VERIFY_IDENTITY` (case-insensitive), with the
//!   `mysql` client's meanings but two: `PREFERRED` (the client's default) connects without TLS,
//!   as lockrun does not fall back silently, and `VERIFY_CA` checks the host name as well as the
//!   chain, like `VERIFY_IDENTITY` (the client library cannot skip only the name check; checking
//!   more than asked is the safe way to be wrong). `REQUIRED` encrypts without checking the
//!   server's certificate at all (it stops a passive listener, not an impostor). `ssl-ca=PATH`
//!   names the PEM file of the authorities to trust (default: the system's roots); alone, it
//!   means `VERIFY_IDENTITY`.
//! - `lockrun_table_prefix=NAME` (default `lockrun_`): the prefix of lockrun's tables and
//!   procedures, 1–40 characters of `a-z 0-9 _`. Every user of a lock name must use the same
//!   database and prefix.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::backend::sql_names::is_plain_name;
use crate::backend::url::{HostPort, LoneUserinfo, Url, UrlForms};
use crate::backend::{Backend, BackendError, Holds};

const DEFAULT_PORT: u16 = 3306;
const DEFAULT_PREFIX: &str = "lockrun_";
const MAX_PREFIX_LEN: usize = 40;
/// MySQL's limit on a database name.
const MAX_DATABASE_LEN: usize = 64;

/// The query keys a URL may hold.
const KEYS: &[&str] = &["ssl-mode", "ssl-ca", "lockrun_table_prefix"];

/// Whether, and how, to use TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    Off,
    /// Encrypted; the server's certificate is checked as `check` says, against `roots` (a PEM
    /// file) or the system's roots.
    On {
        check: Check,
        roots: Option<PathBuf>,
    },
}

/// How much of the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing (`REQUIRED`).
    Nothing,
    /// The chain up to a trusted authority and the host name (`VERIFY_CA`, `VERIFY_IDENTITY`).
    Identity,
}

/// A parsed `mysql://` URL.
#[derive(Clone, Debug)]
pub struct Settings {
    pub endpoint: HostPort,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    pub tls: Tls,
    /// Validated: safe to splice into identifiers.
    pub prefix: String,
    url: Url,
}

impl Settings {
    /// Parses a `mysql://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::User)?;
        url.only_params(KEYS)?;
        let endpoint = match url.hosts.as_slice() {
            [one] => one.clone(),
            [] => return Err("no host".into()),
            _ => return Err("give one host".into()),
        };
        let database = url.path.clone();
        if database.is_empty() {
            return Err("no database: write mysql://USER@HOST/DB".into());
        }
        if database.len() > MAX_DATABASE_LEN || database.contains(['/', '\\', '.', '`']) {
            return Err(format!(
                "database {database:?}: at most {MAX_DATABASE_LEN} characters, without / \\ . or `"
            ));
        }
        let prefix = url
            .param("lockrun_table_prefix")
            .unwrap_or(DEFAULT_PREFIX)
            .to_owned();
        validate_prefix(&prefix)?;
        let roots = url.param("ssl-ca").map(PathBuf::from);
        if roots.as_deref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err("ssl-ca is empty: give the path of a PEM file".into());
        }
        let mode = url.param("ssl-mode").map(str::to_ascii_uppercase);
        let check = match (mode.as_deref(), &roots) {
            (None, None) | (Some("DISABLED" | "PREFERRED"), None) => None,
            (None, Some(_)) => Some(Check::Identity),
            (Some("DISABLED" | "PREFERRED"), Some(_)) => {
                return Err(
                    "ssl-ca is only used with ssl-mode=REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                        .into(),
                );
            }
            (Some("REQUIRED"), _) => Some(Check::Nothing),
            (Some("VERIFY_CA" | "VERIFY_IDENTITY"), _) => Some(Check::Identity),
            (Some(other), _) => {
                return Err(format!(
                    "ssl-mode {other:?}: use DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                ));
            }
        };
        let tls = match check {
            None => Tls::Off,
            Some(check) => Tls::On { check, roots },
        };
        let user = url
            .user
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| crate::account::current_or(|| "root".into()));
        Ok(Settings {
            endpoint,
            user,
            password: url.password.clone().filter(|p| !p.is_empty()),
            database,
            tls,
            prefix,
            url,
        })
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> String {
        self.endpoint.with_default(DEFAULT_PORT)
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.endpoint.port.unwrap_or(DEFAULT_PORT)
    }

    /// Every form of the password, for scrubbing messages.
    pub fn all_secrets(&self) -> &[String] {
        self.url.secrets()
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    fn files(&self) -> Vec<(&'static str, &Path, Holds)> {
        match &self.tls {
            // The driver reads PEM or one DER certificate.
            Tls::On {
                roots: Some(path), ..
            } => vec![("ssl-ca", path.as_path(), Holds::CertificatesOrDer)],
            _ => Vec::new(),
        }
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        super::line::open(self).await
    }
}

/// A table prefix lockrun accepts: lowercase letters, digits and `_`, not starting with a digit.
fn validate_prefix(prefix: &str) -> Result<(), String> {
    match is_plain_name(prefix, MAX_PREFIX_LEN) {
        true => Ok(()),
        false => Err(format!(
            "lockrun_table_prefix {prefix:?}: use 1-{MAX_PREFIX_LEN} characters of a-z, 0-9 and _, \
             not starting with a digit"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    fn parse(raw: &str) -> Settings {
        Settings::parse(raw).unwrap()
    }

    #[test]
    fn reads_credentials_endpoint_database_and_prefix() {
        let s = parse("mysql://app:p%40ss@db.example:3307/jobs?lockrun_table_prefix=locks_");
        assert_eq!(s.endpoint(), "db.example:3307");
        assert_eq!(s.user, "app");
        assert_eq!(s.password.as_deref(), Some("p@ss"));
        assert_eq!(s.database, "jobs");
        assert_eq!(s.prefix, "locks_");
        assert_eq!(s.tls, Tls::Off);
        assert!(s.all_secrets().iter().any(|x| x == "p@ss"));
        assert!(s.all_secrets().iter().any(|x| x == "p%40ss"));
        let s = parse("mysql://app@[::1]/jobs");
        assert_eq!(s.endpoint(), "[::1]:3306");
        assert_eq!(s.endpoint.bare_host(), "::1");
        assert_eq!(s.prefix, "lockrun_");
        assert_eq!(s.password, None);
    }

    #[test]
    fn ssl_modes_keep_the_mysql_clients_meanings() {
        let tls = |q: &str| parse(&format!("mysql://u@h/db?{q}")).tls;
        assert_eq!(tls("ssl-mode=DISABLED"), Tls::Off);
        assert_eq!(tls("ssl-mode=preferred"), Tls::Off);
        assert_eq!(
            tls("ssl-mode=REQUIRED"),
            Tls::On {
                check: Check::Nothing,
                roots: None
            }
        );
        assert_eq!(
            tls("ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem"),
            Tls::On {
                check: Check::Identity,
                roots: Some("/ca.pem".into())
            }
        );
        for q in ["ssl-ca=/ca.pem", "ssl-mode=verify_ca&ssl-ca=/ca.pem"] {
            assert_eq!(
                tls(q),
                Tls::On {
                    check: Check::Identity,
                    roots: Some("/ca.pem".into())
                },
                "{q}"
            );
        }
    }

    #[test]
    fn rejects_what_it_cannot_use_without_the_password() {
        refused_without_password(
            Settings::parse,
            &[
                "mysql://u:hunter2@h",
                "mysql://u:hunter2@h/",
                "mysql://u:hunter2@a,b/db",
                "mysql://u:hunter2@h/a.b",
                "mysql://u:hunter2@h/db?ssl-mode=bogus",
                "mysql://u:hunter2@h/db?ssl-mode=DISABLED&ssl-ca=/x",
                "mysql://u:hunter2@h/db?sslmode=require",
                "mysql://u:hunter2@h/db?lockrun_table_prefix=Bad",
                "mysql://u:hunter2@h/db?lockrun_table_prefix=1x",
                "mysql://u:hunter2@h/db?lockrun_table_prefix=a-b",
            ],
        );
        let long = format!("mysql://u@h/db?lockrun_table_prefix={}", "x".repeat(41));
        assert!(Settings::parse(&long).is_err());
    }
}
