//! [`Settings`] of the `postgres://` (`postgresql://`) backend: the URL and libpq's environment
//! turned, once and without I/O, into the client's configuration, whether to use TLS, lockrun's
//! schema, the endpoint for messages and the secrets to scrub from them.
//!
//! `postgres://[USER[:PASSWORD]@][HOST[:PORT][,HOST[:PORT]…]][/DBNAME][?KEY=VALUE&…]`, with libpq's
//! query keys (`host`, `hostaddr`, `port`, `dbname`, `user`, `password`, `options`,
//! `application_name`, `connect_timeout`, `keepalives`, `keepalives_idle`,
//! `target_session_attrs`, `channel_binding`, `load_balance_hosts`) and lockrun's own:
//!
//! - `lockrun_schema=NAME` — the schema of lockrun's tables and functions (default `lockrun`),
//!   created on first use; 1–40 characters of `a-z 0-9 _`, not starting with a digit or `pg_`.
//!   Every user of a lock name must use the same schema.
//! - `listen=HOST[:PORT][/DBNAME]` — where the server itself is when the URL leads to a
//!   transaction pooler (PgBouncer), through which `LISTEN` cannot work: a waiter near its turn
//!   opens a connection of its own there and listens for its turn on it (see
//!   [`super::doorbell`]). Same user, password, database (unless `/DBNAME` gives the server's
//!   name for it, where the pooler's differs) and TLS as the URL; default port 5432.
//! - `sslmode=disable|allow|prefer|require|verify-ca|verify-full` — TLS only when the URL asks
//!   for it (`require`, `verify-ca`, `verify-full`). Unlike libpq's `require`, lockrun always
//!   verifies the server's certificate and host name, against the system's trusted roots or
//!   `sslrootcert=PATH`.
//!
//! What the URL leaves out comes from libpq's environment, as `psql` takes it: `PGHOST`, `PGPORT`,
//! `PGUSER`, `PGDATABASE`, `PGPASSWORD`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGAPPNAME`,
//! `PGCONNECT_TIMEOUT`, `PGOPTIONS`; then from `~/.pgpass` (or `PGPASSFILE`) when the connection is
//! made (see [`super::pgpass`]). Without a host, lockrun connects to the local socket in
//! `/var/run/postgresql`; without a user, as the operating-system user; without a database, to the
//! user's own.
//!
//! Every connection also asks the server (through the startup `options`) for
//! `statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout`, so a statement
//! or transaction abandoned by a lockrun that was paused or cut off never holds a row lock for
//! long (and [`super::link`] adds a random `lockrun.session` setting, by which the server-side
//! functions tell a direct connection from a pooled one). Behind PgBouncer, list `options` in its
//! `ignore_startup_parameters` (the client-side deadlines still apply).

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::config::{ChannelBinding, Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};

use crate::backend::sql_names::is_plain_name;
use crate::backend::url::{LoneUserinfo, Url, UrlForms, host_port, port_number};
use crate::backend::{Backend, BackendError, Holds};

const DEFAULT_SCHEMA: &str = "lockrun";
const MAX_SCHEMA_LEN: usize = 40;
const DEFAULT_PORT: u16 = 5432;
/// Where Debian's and most distributions' servers put their socket.
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";
/// Server-side limits asked for at connection time (milliseconds).
const SERVER_LIMITS: &str = "-c statement_timeout=5000 -c lock_timeout=4000 \
                             -c idle_in_transaction_session_timeout=10000 -c client_min_messages=warning";

/// The query keys a URL may hold.
const KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "options",
    "application_name",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslmode",
    "sslrootcert",
    "lockrun_schema",
    "listen",
];

/// `target_session_attrs=`, libpq's names.
const SESSION_ATTRS: &[(&str, TargetSessionAttrs)] = &[
    ("any", TargetSessionAttrs::Any),
    ("read-write", TargetSessionAttrs::ReadWrite),
];
/// `channel_binding=`, libpq's names.
const CHANNEL_BINDINGS: &[(&str, ChannelBinding)] = &[
    ("disable", ChannelBinding::Disable),
    ("prefer", ChannelBinding::Prefer),
    ("require", ChannelBinding::Require),
];
/// `load_balance_hosts=`, libpq's names.
const HOST_BALANCING: &[(&str, LoadBalanceHosts)] = &[
    ("disable", LoadBalanceHosts::Disable),
    ("random", LoadBalanceHosts::Random),
];

/// Whether, and how, to use TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    Off,
    /// Verified TLS; `roots` is a PEM file, or `None` for the system's trusted roots.
    Verified {
        roots: Option<PathBuf>,
    },
}

/// A parsed backend URL.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub tls: Tls,
    /// The schema's name, validated: safe to put between double quotes.
    pub schema: String,
    /// `host:port` (comma-separated when there are several), or a socket path.
    pub endpoint: String,
    /// Whether the password came from the URL or the environment (else `~/.pgpass` may have one).
    pub has_password: bool,
    /// `listen=`: where the server itself is, when the URL leads to a pooler.
    listen: Option<Listen>,
    url: Url,
    secrets: Vec<String>,
}

/// The server itself, behind the pooler the URL leads to.
#[derive(Clone, Debug)]
struct Listen {
    config: tokio_postgres::Config,
    endpoint: String,
}

impl Settings {
    /// Parses `raw` with the process's environment; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        Self::parse_with(raw, |key| std::env::var(key).ok().filter(|v| !v.is_empty()))
    }

    /// Parses `raw`, reading libpq's environment through `env`.
    pub fn parse_with(raw: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::User)?;
        url.only_params(KEYS)?;
        // A key in the query wins over the same thing in the URL, which wins over the environment.
        let pick = |key: &str, from_url: Option<String>, var: &str| {
            url.param(key)
                .map(str::to_owned)
                .or(from_url)
                .or_else(|| env(var))
        };
        let mut config = tokio_postgres::Config::new();

        let hosts: Vec<String> = match url.param("host") {
            Some(list) => list.split(',').map(str::to_owned).collect(),
            None if !url.hosts.is_empty() => {
                url.hosts.iter().map(|h| h.bare_host().to_owned()).collect()
            }
            None => env("PGHOST")
                .map(|list| list.split(',').map(str::to_owned).collect())
                .unwrap_or_else(|| vec![DEFAULT_SOCKET_DIR.to_owned()]),
        };
        let ports: Vec<u16> = match url.param("port").map(str::to_owned).or_else(|| {
            url.hosts
                .iter()
                .any(|h| h.port.is_some())
                .then(|| {
                    url.hosts
                        .iter()
                        .map(|h| h.port.unwrap_or(DEFAULT_PORT).to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .or_else(|| env("PGPORT"))
        }) {
            Some(list) => list
                .split(',')
                .map(|p| port_number(p.trim()).ok_or_else(|| format!("port {p:?} is not 1-65535")))
                .collect::<Result<_, _>>()?,
            None => vec![DEFAULT_PORT],
        };
        if ports.len() != 1 && ports.len() != hosts.len() {
            return Err(format!(
                "{} ports for {} hosts: give one port, or one per host",
                ports.len(),
                hosts.len()
            ));
        }
        if hosts.iter().any(String::is_empty) {
            return Err("an empty host".into());
        }
        let hostaddrs = match url.param("hostaddr") {
            Some(addrs) => addrs
                .split(',')
                .map(|addr| {
                    addr.parse::<std::net::IpAddr>()
                        .map_err(|_| format!("hostaddr {addr:?} is not an IP address"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let listen = url.param("listen").map(listen_address).transpose()?;

        let user = pick("user", url.user.clone().filter(|u| !u.is_empty()), "PGUSER")
            .unwrap_or_else(|| crate::account::current_or(|| "postgres".into()));
        config.user(&user);
        let password = pick("password", url.password.clone(), "PGPASSWORD");
        if let Some(password) = &password {
            config.password(password.as_bytes());
        }
        let dbname = pick(
            "dbname",
            Some(url.path.clone()).filter(|p| !p.is_empty()),
            "PGDATABASE",
        )
        .unwrap_or_else(|| user.clone());
        config.dbname(&dbname);

        let options = match pick("options", None, "PGOPTIONS") {
            Some(own) if !own.trim().is_empty() => format!("{SERVER_LIMITS} {own}"),
            _ => SERVER_LIMITS.to_owned(),
        };
        config.options(options);
        config.application_name(
            pick("application_name", None, "PGAPPNAME").unwrap_or_else(|| "lockrun".into()),
        );
        if let Some(secs) = pick("connect_timeout", None, "PGCONNECT_TIMEOUT") {
            let secs: u64 = secs
                .parse()
                .map_err(|_| format!("connect_timeout {secs:?} is not a number of seconds"))?;
            if secs > 0 {
                config.connect_timeout(Duration::from_secs(secs));
            }
        }
        if let Some(on) = url.param("keepalives") {
            config.keepalives(on != "0");
        }
        config.keepalives_idle(match url.param("keepalives_idle") {
            Some(secs) => Duration::from_secs(
                secs.parse()
                    .map_err(|_| format!("keepalives_idle {secs:?} is not a number of seconds"))?,
            ),
            None => Duration::from_secs(10),
        });
        if let Some(attrs) = pick("target_session_attrs", None, "PGTARGETSESSIONATTRS") {
            config.target_session_attrs(one_of("target_session_attrs", &attrs, SESSION_ATTRS)?);
        }
        if let Some(binding) = url.param("channel_binding") {
            config.channel_binding(one_of("channel_binding", binding, CHANNEL_BINDINGS)?);
        }
        if let Some(balance) = url.param("load_balance_hosts") {
            config.load_balance_hosts(one_of("load_balance_hosts", balance, HOST_BALANCING)?);
        }

        let schema = url
            .param("lockrun_schema")
            .unwrap_or(DEFAULT_SCHEMA)
            .to_owned();
        validate_schema(&schema)?;
        let sslmode = pick("sslmode", None, "PGSSLMODE").unwrap_or_else(|| "prefer".into());
        let roots = pick("sslrootcert", None, "PGSSLROOTCERT").map(PathBuf::from);
        let tls = match sslmode.as_str() {
            "disable" | "allow" | "prefer" => Tls::Off,
            "require" | "verify-ca" | "verify-full" => Tls::Verified { roots },
            other => {
                return Err(format!(
                    "sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        };
        config.ssl_mode(match tls {
            Tls::Off => SslMode::Disable,
            Tls::Verified { .. } => SslMode::Require,
        });

        // The server itself, for `listen=`: everything as above but where to connect.
        let listen = listen.map(|address| {
            let mut direct = config.clone();
            direct.host(&address.host).port(address.port);
            if let Some(dbname) = &address.dbname {
                direct.dbname(dbname);
            }
            Listen {
                endpoint: endpoint_of(&direct),
                config: direct,
            }
        });
        for host in &hosts {
            config.host(host);
        }
        for port in &ports {
            config.port(*port);
        }
        for addr in hostaddrs {
            config.hostaddr(addr);
        }

        let mut secrets = url.secrets().to_vec();
        secrets.extend(password.clone());
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Ok(Settings {
            endpoint: endpoint_of(&config),
            has_password: password.is_some(),
            config,
            tls,
            schema,
            listen,
            url,
            secrets,
        })
    }

    /// The settings of the connection on which a waiter behind a pooler listens for its turn
    /// (`listen=`): the server itself, with the same user, password, database and TLS.
    pub fn listener(&self) -> Option<Settings> {
        let listen = self.listen.as_ref()?;
        Some(Settings {
            config: listen.config.clone(),
            endpoint: listen.endpoint.clone(),
            listen: None,
            ..self.clone()
        })
    }

    /// Adds a password found later (`~/.pgpass`): the client uses it, messages scrub it.
    pub fn with_password(&self, password: String) -> Self {
        let mut settings = self.clone();
        settings.config.password(password.as_bytes());
        if let Some(listen) = settings.listen.as_mut() {
            listen.config.password(password.as_bytes());
        }
        settings.secrets.push(password);
        settings.has_password = true;
        settings
    }

    /// Every form of every password, for scrubbing messages.
    pub fn all_secrets(&self) -> &[String] {
        &self.secrets
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    fn files(&self) -> Vec<(&'static str, &Path, Holds)> {
        match &self.tls {
            Tls::Verified { roots: Some(path) } => {
                vec![("sslrootcert", path.as_path(), Holds::Certificates)]
            }
            _ => Vec::new(),
        }
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        super::line::open(self).await
    }
}

/// What `value` of option `key` stands for among `choices`; the error names every choice.
fn one_of<T: Clone>(key: &str, value: &str, choices: &[(&str, T)]) -> Result<T, String> {
    if let Some((_, meaning)) = choices.iter().find(|(name, _)| *name == value) {
        return Ok(meaning.clone());
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let spoken = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    Err(format!("{key} {value:?}: use {spoken}"))
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
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) if name.contains(':') => format!("[{name}]:{}", port(i)),
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the server itself is, from `listen=`.
struct ListenAddress {
    host: String,
    port: u16,
    /// The server's name for the database, when the pooler's differs.
    dbname: Option<String>,
}

/// `listen=HOST[:PORT][/DBNAME]` (`[V6ADDR]:PORT` for an IPv6 address with a port; a path, with
/// no database, for a socket directory): the server itself, default port 5432.
fn listen_address(raw: &str) -> Result<ListenAddress, String> {
    let (address, dbname) = match raw.starts_with('/') {
        true => (raw, None),
        false => match raw.split_once('/') {
            Some((_, "")) => return Err(format!("listen {raw:?}: the database after / is empty")),
            Some((address, dbname)) => (address, Some(dbname.to_owned())),
            None => (raw, None),
        },
    };
    let (host, port) = match address.starts_with('/') {
        // A socket directory, with an optional `:PORT` (the number in its socket file's name).
        true => {
            let (dir, port) = match address.rsplit_once(':') {
                Some((dir, port)) => (dir, Some(port)),
                None => (address, None),
            };
            let port = port
                .map(|p| {
                    port_number(p)
                        .ok_or_else(|| format!("listen {raw:?}: port {p:?} is not 1-65535"))
                })
                .transpose()?;
            (dir.to_owned(), port)
        }
        false => {
            // A bare IPv6 address has several colons and no port.
            let address = match address.matches(':').count() > 1 && !address.starts_with('[') {
                true => format!("[{address}]"),
                false => address.to_owned(),
            };
            let parsed = host_port("listen", &address)?;
            (parsed.bare_host().to_owned(), parsed.port)
        }
    };
    Ok(ListenAddress {
        host,
        port: port.unwrap_or(DEFAULT_PORT),
        dbname,
    })
}

/// A schema name lockrun accepts: lowercase letters, digits and `_`, not starting with a digit.
fn validate_schema(schema: &str) -> Result<(), String> {
    match is_plain_name(schema, MAX_SCHEMA_LEN) && !schema.starts_with("pg_") {
        true => Ok(()),
        false => Err(format!(
            "lockrun_schema {schema:?}: use 1-{MAX_SCHEMA_LEN} characters of a-z, 0-9 and _, \
             not starting with a digit or pg_"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    fn parse(raw: &str) -> Settings {
        Settings::parse_with(raw, |_| None).unwrap()
    }

    #[test]
    fn reads_the_url_and_keeps_lockrun_parameters_apart() {
        let s = parse(
            "postgres://u:p%40ss@db.example:6543/app?lockrun_schema=locks&sslmode=disable&connect_timeout=2",
        );
        assert_eq!(s.schema, "locks");
        assert_eq!(s.tls, Tls::Off);
        assert_eq!(s.endpoint, "db.example:6543");
        assert_eq!(s.config.get_dbname(), Some("app"));
        assert_eq!(s.config.get_user(), Some("u"));
        assert_eq!(s.config.get_password(), Some(&b"p@ss"[..]));
        assert!(s.all_secrets().iter().any(|x| x == "p@ss"));
        assert!(s.all_secrets().iter().any(|x| x == "p%40ss"));
        assert!(
            s.config
                .get_options()
                .unwrap()
                .contains("statement_timeout")
        );
    }

    #[test]
    fn defaults_tls_and_several_hosts() {
        let s = parse("postgresql://h/db");
        assert_eq!(s.schema, "lockrun");
        assert_eq!(s.endpoint, "h:5432");
        assert_eq!(s.tls, Tls::Off);
        let s = parse("postgresql://h/db?sslmode=verify-full&sslrootcert=/ca.pem");
        assert_eq!(
            s.tls,
            Tls::Verified {
                roots: Some("/ca.pem".into())
            }
        );
        let s = parse("postgres://a:1,b:2/db");
        assert_eq!(s.endpoint, "a:1,b:2");
        let s = parse("postgres:///db");
        assert_eq!(s.endpoint, "/var/run/postgresql/.s.PGSQL.5432");
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let env = |key: &str| match key {
            "PGPASSWORD" => Some("from-env".to_owned()),
            "PGHOST" => Some("envhost".to_owned()),
            "PGPORT" => Some("7777".to_owned()),
            "PGUSER" => Some("envuser".to_owned()),
            "PGDATABASE" => Some("envdb".to_owned()),
            _ => None,
        };
        let s = Settings::parse_with("postgres://", env).unwrap();
        assert_eq!(s.endpoint, "envhost:7777");
        assert_eq!(s.config.get_user(), Some("envuser"));
        assert_eq!(s.config.get_dbname(), Some("envdb"));
        assert_eq!(s.config.get_password(), Some(&b"from-env"[..]));
        assert!(s.has_password);
        assert!(s.all_secrets().iter().any(|x| x == "from-env"));
        // The URL wins.
        let s = Settings::parse_with("postgres://u:pw@h:1/db", env).unwrap();
        assert_eq!(s.endpoint, "h:1");
        assert_eq!(s.config.get_password(), Some(&b"pw"[..]));
    }

    #[test]
    fn listen_names_the_server_itself_with_everything_else_kept() {
        let s = parse("postgres://u:pw@pooler:6432/app?listen=db.internal:5433&sslmode=disable");
        assert_eq!(s.endpoint, "pooler:6432");
        let direct = s.listener().unwrap();
        assert_eq!(direct.endpoint, "db.internal:5433");
        assert_eq!(direct.config.get_ports(), [5433]);
        assert_eq!(direct.config.get_dbname(), Some("app"));
        assert_eq!(direct.config.get_user(), Some("u"));
        assert_eq!(direct.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(direct.all_secrets(), s.all_secrets());
        assert!(direct.listener().is_none());
        for (listen, endpoint) in [
            ("db", "db:5432"),
            ("[::1]:7000", "[::1]:7000"),
            ("[::1]", "[::1]:5432"),
            ("::1", "[::1]:5432"),
            ("/run/pg", "/run/pg/.s.PGSQL.5432"),
            ("/run/pg:5433", "/run/pg/.s.PGSQL.5433"),
        ] {
            let s = parse(&format!("postgres://a:1,b:2/app?listen={listen}"));
            assert_eq!(s.endpoint, "a:1,b:2");
            assert_eq!(s.listener().unwrap().endpoint, endpoint, "{listen}");
        }
        assert!(parse("postgres://h/db").listener().is_none());
        // The server's own name for a database the pooler calls otherwise.
        let s = parse("postgres://pooler/alias?listen=db:5433/real");
        let direct = s.listener().unwrap();
        assert_eq!(direct.endpoint, "db:5433");
        assert_eq!(direct.config.get_dbname(), Some("real"));
        assert_eq!(s.config.get_dbname(), Some("alias"));
        let s = parse("postgres://pooler/alias?listen=[::1]/real");
        assert_eq!(s.listener().unwrap().config.get_dbname(), Some("real"));
        // A password found later (the password file) reaches the listening connection too.
        let later = parse("postgres://u@h/db?listen=d").with_password("filed".into());
        let direct = later.listener().unwrap();
        assert_eq!(direct.config.get_password(), Some(&b"filed"[..]));
    }

    #[test]
    fn rejects_bad_schemas_modes_and_options() {
        for bad in ["Locks", "1x", "a-b", "", "pg_x", "a\"b", &"x".repeat(41)] {
            let url = format!("postgres://u:hunter2@h/db?lockrun_schema={bad}");
            let err = Settings::parse_with(&url, |_| None).unwrap_err();
            assert!(err.contains("lockrun_schema"), "{err}");
        }
        refused_without_password(
            |bad| Settings::parse_with(bad, |_| None),
            &[
                "postgres://h/db?sslmode=bogus",
                "postgres://h/db?nosuch=1",
                "postgres://h/db?port=0",
                "postgres://a,b/db?port=1,2,3",
                "postgres://h/db?target_session_attrs=x",
                "postgres://h/db?listen=",
                "postgres://h/db?listen=d:0",
                "postgres://h/db?listen=d:x",
                "postgres://h/db?listen=[::1",
                "postgres://h/db?listen=[::1]5432",
                "postgres://h/db?listen=d:5432/",
                "postgres://h/db?listen=d:x/real",
                "postgres://h/db?listen=a b",
                "postgres://h/db?listen=/run/pg:0",
            ],
        );
        for (query, err) in [
            (
                "target_session_attrs=x",
                "target_session_attrs \"x\": use any or read-write",
            ),
            (
                "channel_binding=x",
                "channel_binding \"x\": use disable, prefer or require",
            ),
            (
                "load_balance_hosts=x",
                "load_balance_hosts \"x\": use disable or random",
            ),
        ] {
            let url = format!("postgres://h/db?{query}");
            assert_eq!(Settings::parse_with(&url, |_| None).unwrap_err(), err);
        }
    }
}
