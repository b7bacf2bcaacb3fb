//! Which backend, parsed once from its URL into that backend's own typed settings, and opened.
//!
//! A URL is judged here, before anything connects or runs, so a typo is a usage error (exit 64) and
//! never a half-run command. Each backend owns its `Settings::parse`; this file only dispatches on
//! the scheme. Passwords stay inside the settings: [`BackendSpec::shown`] (computed once, at parse
//! time) and [`redact`] are the only ways a URL reaches a message.
//!
//! Adding a backend: a variant here, its scheme in [`BackendSpec::parse`] and in [`SCHEMES`], and
//! its arm in [`BackendSpec::settings`].

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::pem_files::{self, Holds};
use super::url::UrlForms;
use super::{Backend, BackendError, etcd, file, mysql, postgres, redis, redlock, zookeeper};

pub use super::url::redact;

/// The schemes lockrun knows, for messages.
const SCHEMES: &str =
    "file, redis, rediss, redlock, etcd, zk, postgres, postgresql, mysql or dynamodb";

/// What every backend's settings offer, once parsed.
#[async_trait]
pub trait Settings: Send + Sync + std::fmt::Debug {
    /// The URL these settings were parsed from: as given, as shown, and its secrets.
    fn forms(&self) -> &UrlForms;

    /// The URL with its password replaced: the only form messages and `status` show.
    fn shown(&self) -> &str {
        self.forms().shown()
    }

    /// Every form of every secret the URL holds, for scrubbing messages; empty when none.
    fn secrets(&self) -> &[String] {
        self.forms().secrets()
    }

    /// Local files the URL names (`cacert=`, `sslrootcert=`), with the option that names each and
    /// what it must hold, so that an unreadable or wrong one is a usage error before anything
    /// connects.
    fn files(&self) -> Vec<(&'static str, &Path, Holds)> {
        Vec::new()
    }

    /// The URL as given, password included, for handing to another lockrun through a private
    /// file (the drill's holders).
    fn url(&self) -> String {
        self.forms().given().to_owned()
    }

    /// Connects (networked backends) or opens the state directory, so that an unreachable
    /// backend fails before anything runs.
    async fn open(&self) -> Result<Box<dyn Backend>, BackendError>;

    /// Opens the backend to look at it (`status`, `list`, `release --force`): what a first run
    /// would create is not created for a look; `None` when there is nothing yet to look at.
    async fn open_to_look(&self) -> Result<Option<Box<dyn Backend>>, BackendError> {
        self.open().await.map(Some)
    }
}

/// Which backend to talk to, and how.
#[derive(Debug)]
pub enum BackendSpec {
    /// Kernel locks on files in a directory, on this host only.
    File(file::Settings),
    /// One Redis server (`redis://`, `rediss://`).
    Redis(Box<redis::Settings>),
    /// Redlock over N independent Redis masters (`redlock://`).
    Redlock(Box<redlock::Settings>),
    /// An etcd cluster.
    Etcd(Box<etcd::Settings>),
    /// A PostgreSQL server.
    Postgres(Box<postgres::Settings>),
    /// A MySQL or MariaDB server.
    MySql(Box<mysql::Settings>),
    /// A ZooKeeper ensemble.
    ZooKeeper(Box<zookeeper::Settings>),
    /// A DynamoDB table.
    #[cfg(feature = "dynamodb")]
    Dynamodb(Box<super::dynamodb::Settings>),
}

impl BackendSpec {
    /// Parses a backend URL; the error is a one-line usage message that never echoes a password.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let scheme = raw
            .split_once("://")
            .map(|(scheme, _)| scheme)
            .filter(|scheme| super::url::is_scheme(scheme));
        let parsed = match scheme {
            Some("file") => file::Settings::parse(raw).map(BackendSpec::File),
            Some("redis" | "rediss") => {
                redis::Settings::parse(raw).map(|s| BackendSpec::Redis(Box::new(s)))
            }
            Some("redlock") => {
                redlock::Settings::parse(raw).map(|s| BackendSpec::Redlock(Box::new(s)))
            }
            Some("etcd") => etcd::Settings::parse(raw).map(|s| BackendSpec::Etcd(Box::new(s))),
            Some("postgres" | "postgresql") => {
                postgres::Settings::parse(raw).map(|s| BackendSpec::Postgres(Box::new(s)))
            }
            Some("mysql") => mysql::Settings::parse(raw).map(|s| BackendSpec::MySql(Box::new(s))),
            Some("zk") => {
                zookeeper::Settings::parse(raw).map(|s| BackendSpec::ZooKeeper(Box::new(s)))
            }
            #[cfg(feature = "dynamodb")]
            Some("dynamodb") => {
                super::dynamodb::Settings::parse(raw).map(|s| BackendSpec::Dynamodb(Box::new(s)))
            }
            #[cfg(not(feature = "dynamodb"))]
            Some("dynamodb") => Err(
                "this lockrun was built without the dynamodb backend (cargo feature dynamodb)"
                    .to_owned(),
            ),
            Some(other) => {
                // A scheme of no backend: how it writes credentials is unknown, so nothing after
                // it shows.
                return Err(format!(
                    "invalid backend \"{other}://…\": unknown backend scheme {other:?}: use {SCHEMES}"
                ));
            }
            // A directory without its scheme (`/srv/locks`, `file:/srv/locks`) is a path, which
            // holds no password, and shows; it is the file backend that was meant.
            None if let Some(dir) = bare_directory(raw) => {
                return Err(format!(
                    "invalid backend {raw:?}: write a directory as a URL: file://{dir}"
                ));
            }
            None => Err(
                "expected a URL such as file:///var/lib/lockrun or redis://host:6379".to_owned(),
            ),
        };
        parsed.map_err(|reason| format!("invalid backend {:?}: {reason}", redact(raw)))
    }

    /// The default backend: `file://` with the per-user state directory.
    pub fn default_file() -> Result<Self, String> {
        Ok(BackendSpec::File(file::Settings::default_dir()?))
    }

    /// This backend's settings, as every backend offers them.
    pub fn settings(&self) -> &dyn Settings {
        match self {
            BackendSpec::File(s) => s,
            BackendSpec::Redis(s) => &**s,
            BackendSpec::Redlock(s) => &**s,
            BackendSpec::Etcd(s) => &**s,
            BackendSpec::Postgres(s) => &**s,
            BackendSpec::MySql(s) => &**s,
            BackendSpec::ZooKeeper(s) => &**s,
            #[cfg(feature = "dynamodb")]
            BackendSpec::Dynamodb(s) => &**s,
        }
    }

    /// The URL with any password replaced, fit for messages and `status`.
    pub fn shown(&self) -> &str {
        self.settings().shown()
    }

    /// Whether the URL carries a secret that must not reach a child's environment.
    pub fn has_secret(&self) -> bool {
        !self.settings().secrets().is_empty()
    }

    /// Checks that every local file the URL names can be read and holds what its option takes
    /// (PEM certificates or a key); the error is a usage message.
    pub fn check_files(&self) -> Result<(), String> {
        for (option, path, holds) in self.settings().files() {
            if path.as_os_str().is_empty() {
                return Err(format!(
                    "{option}= of --backend is empty: it takes a file's path"
                ));
            }
            let contents = std::fs::read(path).map_err(|e| {
                format!(
                    "cannot read the {option}= file {} of --backend: {}",
                    path.display(),
                    crate::messages::io(&e)
                )
            })?;
            if let Some(problem) = pem_files::problem(option, path, holds, &contents) {
                return Err(problem);
            }
        }
        Ok(())
    }

    /// Opens the backend. Networked backends connect here, so an unreachable one fails before
    /// anything runs.
    pub async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        self.settings().open().await
    }

    /// See [`Settings::open_to_look`].
    pub async fn open_to_look(&self) -> Result<Option<Box<dyn Backend>>, BackendError> {
        self.settings().open_to_look().await
    }
}

/// Whether `raw`, any text that may be a backend URL, carries a secret that must not reach a
/// child's environment.
pub fn has_secret(raw: &str) -> bool {
    redact(raw) != raw
}

/// The per-user state directory: `/var/lib/lockrun` for root, else `$XDG_STATE_HOME/lockrun` or
/// `~/.local/state/lockrun`.
pub fn default_state_dir() -> Result<PathBuf, String> {
    state_dir_for(
        nix::unistd::geteuid().is_root(),
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`default_state_dir`] for a user (root or not) with these variables. A relative
/// `XDG_STATE_HOME` is ignored, as the XDG rules say; a relative `HOME` is named, since no
/// directory can be made from it.
fn state_dir_for(
    root: bool,
    xdg_state_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, String> {
    if root {
        return Ok(PathBuf::from("/var/lib/lockrun"));
    }
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(state) = xdg_state_home.and_then(absolute) {
        return Ok(state.join("lockrun"));
    }
    match home.filter(|home| !home.is_empty()).map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".local/state/lockrun")),
        Some(home) => Err(format!(
            "no state directory: HOME is {:?}, not an absolute path; set it to your home \
             directory, or pass --backend file:///DIR",
            home.display()
        )),
        None => Err(
            "no state directory: set HOME or XDG_STATE_HOME, or pass --backend file:///DIR".into(),
        ),
    }
}

/// `raw` as an absolute directory given without `file://` (or with `file:` and one slash), when
/// it cannot hold credentials (no `@`, no `://`).
fn bare_directory(raw: &str) -> Option<&str> {
    let dir = raw.strip_prefix("file:").unwrap_or(raw);
    (dir.starts_with('/') && !dir.starts_with("//") && !raw.contains('@') && !raw.contains("://"))
        .then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn the_state_directory_follows_the_user_and_says_what_is_missing() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(
            state_dir_for(true, os("/x"), os("/h")),
            Ok(PathBuf::from("/var/lib/lockrun"))
        );
        assert_eq!(
            state_dir_for(false, os("/x"), os("/h")),
            Ok(PathBuf::from("/x/lockrun"))
        );
        assert_eq!(
            state_dir_for(false, os("rel"), os("/h")),
            Ok(PathBuf::from("/h/.local/state/lockrun"))
        );
        let err = state_dir_for(false, None, os("rel")).unwrap_err();
        assert!(
            err.contains("HOME is \"rel\", not an absolute path"),
            "{err}"
        );
        for home in [None, os("")] {
            let err = state_dir_for(false, os("rel"), home).unwrap_err();
            assert!(err.contains("set HOME or XDG_STATE_HOME"), "{err}");
        }
    }

    #[test]
    fn a_file_option_names_its_problem() {
        let check = |raw: &str| BackendSpec::parse(raw).unwrap().check_files().unwrap_err();
        let err = check("etcd://u:hunter2@h:1?cacert=");
        assert_eq!(err, "cacert= of --backend is empty: it takes a file's path");
        let err = check("etcd://u:hunter2@h:1?cacert=/nonexistent/ca.pem");
        assert!(err.contains("cacert= file /nonexistent/ca.pem"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn parses_each_scheme() {
        let BackendSpec::File(file) = BackendSpec::parse("file:///tmp/locks").unwrap() else {
            panic!("not file")
        };
        assert_eq!(file.dir(), Path::new("/tmp/locks"));
        for (raw, variant) in [
            ("rediss://u:p@h:6380/2", "Redis"),
            ("etcd://a:2379,b:2379", "Etcd"),
            ("postgresql://u@h/db", "Postgres"),
            ("mysql://u:p@h:3307/db", "MySql"),
            ("zk://u:p@a:2181,b:2181/jobs", "ZooKeeper"),
            ("redlock://a:1,b:1,c:1", "Redlock"),
        ] {
            let spec = format!("{:?}", BackendSpec::parse(raw).unwrap());
            assert!(spec.starts_with(&format!("{variant}(")), "{raw}: {spec}");
        }
    }

    #[test]
    fn rejects_bad_urls_without_echoing_passwords() {
        let bad = &[
            "ftp://u:hunter2@h",
            "file://relative",
            "redis://u:hunter2@/",
            "redis://u:hunter2@h/x",
            "redis://u:hunter2@h:1?tls=1",
            "etcd://u:hunter2@h",
            "redlock://u:hunter2@h:1,h:2",
            "redlock://hunter2@h:1,h:2,h:1",
            "etcd://u:hunter2@h:1?tls=1",
            "etcd://h:1,h",
            "etcd://u:hunter2@h:1?cert=/c.pem",
            "postgres://u:hunter2@h/db?sslmode=bogus",
            "postgres://u:hunter2@h/db?nosuch=1",
            "mysql://u:hunter2@h",
            "mysql://u:hunter2@h/db?ssl-mode=bogus",
            "zk://u:hunter2@h:1?x=1",
            "zk://u:hunter2@h:1/a//b",
            "nonsense",
            "u:hunter2@h",
        ];
        for err in refused_without_password(BackendSpec::parse, bad) {
            assert!(!err.contains('\n'));
            assert!(err.starts_with("invalid backend"), "{err}");
        }
    }

    #[test]
    fn shown_forms_hide_passwords_and_keep_the_rest() {
        let shown = |raw: &str| BackendSpec::parse(raw).unwrap().shown().to_owned();
        assert_eq!(shown("redis://u:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(shown("redis://pw@h"), "redis://***@h");
        assert_eq!(shown("etcd://u:p%2Fw@a:1,b:2"), "etcd://u:***@a:1,b:2");
        assert_eq!(
            shown("postgres://h/db?user=x&password=pw"),
            "postgres://h/db?user=x&password=***"
        );
        assert_eq!(shown("file:///x"), "file:///x");
        assert_eq!(shown("mysql://app:pw@h/db"), "mysql://app:***@h/db");
        assert_eq!(
            shown("redlock://u:pw@a:1,b:1,c:1"),
            "redlock://***@a:1,b:1,c:1"
        );
        assert!(BackendSpec::parse("redis://:pw@h").unwrap().has_secret());
        assert!(!BackendSpec::parse("redis://h").unwrap().has_secret());
    }
}
