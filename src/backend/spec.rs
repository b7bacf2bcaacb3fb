//! Backend URLs: parsing them into a [`BackendSpec`], redacting them for messages, and opening the
//! backend they name.
//!
//! A URL is judged here, before anything connects, so a typo is a usage error (exit 64) and never a
//! half-run command. Passwords stay inside the spec: [`BackendSpec::redacted`] and [`redact`] are
//! the only ways a URL reaches a message.

use std::path::{Path, PathBuf};

use super::{Backend, BackendError};

/// Which backend to talk to, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    /// Kernel locks on files in `dir`, on this host only.
    File { dir: PathBuf },
    /// A Redis server; `tls` for `rediss://`.
    Redis { url: String, tls: bool },
    /// An etcd cluster, reached through any of `endpoints` (`host:port`).
    Etcd { url: String, endpoints: Vec<String> },
    /// A PostgreSQL server.
    Postgres { url: String },
}

impl BackendSpec {
    /// Parses a backend URL; the error is a one-line usage message that never echoes a password.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = raw.split_once("://") else {
            return Err(format!(
                "invalid backend {:?}: expected a URL such as file:///var/lib/lockrun or redis://host:6379",
                redact(raw)
            ));
        };
        match scheme {
            "file" => parse_file(rest),
            "redis" | "rediss" => {
                let url = url::Url::parse(raw).map_err(|e| bad_url(raw, e))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(format!("invalid backend {:?}: no host", redact(raw)));
                }
                let db = url.path().trim_start_matches('/');
                if !db.is_empty() && db.parse::<u32>().is_err() {
                    return Err(format!(
                        "invalid backend {:?}: database {db:?} is not a number",
                        redact(raw)
                    ));
                }
                Ok(BackendSpec::Redis {
                    url: raw.to_owned(),
                    tls: scheme == "rediss",
                })
            }
            "etcd" => parse_etcd(raw, rest),
            "postgres" | "postgresql" => {
                url::Url::parse(raw).map_err(|e| bad_url(raw, e))?;
                // lockrun's own query parameters and the client's syntax, judged before connecting.
                super::postgres::Settings::parse(raw).map_err(|e| e.to_string())?;
                Ok(BackendSpec::Postgres {
                    url: raw.to_owned(),
                })
            }
            other if is_scheme(other) => Err(format!(
                "unknown backend scheme {other:?} in {:?}: use file, redis, rediss, etcd, postgres or postgresql",
                redact(raw)
            )),
            _ => Err(format!(
                "invalid backend {:?}: expected a URL such as file:///var/lib/lockrun or redis://host:6379",
                redact(raw)
            )),
        }
    }

    /// The default backend: `file://` with the per-user state directory.
    pub fn default_file() -> Result<Self, String> {
        Ok(BackendSpec::File {
            dir: default_state_dir()?,
        })
    }

    /// The URL with any password replaced, fit for messages and `status`.
    pub fn redacted(&self) -> String {
        match self {
            BackendSpec::File { dir } => format!("file://{}", dir.display()),
            BackendSpec::Redis { url, .. }
            | BackendSpec::Etcd { url, .. }
            | BackendSpec::Postgres { url } => redact(url),
        }
    }

    /// Opens the backend. Networked backends connect here, so an unreachable one fails before
    /// anything runs.
    pub async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        match self {
            BackendSpec::File { dir } => Ok(Box::new(super::file::FileBackend::open(dir)?)),
            BackendSpec::Redis { url, .. } => {
                Ok(Box::new(super::redis::RedisBackend::open(url).await?))
            }
            BackendSpec::Postgres { url } => {
                Ok(Box::new(super::postgres::PostgresBackend::open(url).await?))
            }
            BackendSpec::Etcd { url, endpoints } => {
                Ok(Box::new(super::etcd::EtcdBackend::open(url, endpoints)?))
            }
        }
    }
}

fn bad_url(raw: &str, e: url::ParseError) -> String {
    format!("invalid backend {:?}: {e}", redact(raw))
}

fn parse_file(rest: &str) -> Result<BackendSpec, String> {
    if rest.is_empty() {
        return BackendSpec::default_file();
    }
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return Err(format!(
            "invalid backend \"file://{rest}\": give an absolute directory, as in file:///var/lib/lockrun"
        ));
    }
    if path.contains('\0') {
        return Err("invalid backend: the directory contains a NUL byte".into());
    }
    Ok(BackendSpec::File {
        dir: PathBuf::from(path),
    })
}

fn parse_etcd(raw: &str, rest: &str) -> Result<BackendSpec, String> {
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
    for endpoint in &endpoints {
        let valid = endpoint.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(format!(
                "invalid backend {:?}: endpoint {endpoint:?} is not host:port",
                redact(raw)
            ));
        }
    }
    Ok(BackendSpec::Etcd {
        url: raw.to_owned(),
        endpoints,
    })
}

/// The per-user state directory: `/var/lib/lockrun` for root, else `$XDG_STATE_HOME/lockrun` or
/// `~/.local/state/lockrun`.
pub fn default_state_dir() -> Result<PathBuf, String> {
    if nix::unistd::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/lockrun"));
    }
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").and_then(absolute) {
        return Ok(state.join("lockrun"));
    }
    if let Some(home) = std::env::var_os("HOME").and_then(absolute) {
        return Ok(Path::new(&home).join(".local/state/lockrun"));
    }
    Err("no state directory: set HOME or XDG_STATE_HOME, or pass --backend file:///DIR".into())
}

/// `raw` with the password of its authority (`user:password@`) replaced by `***`. Works on text
/// that is not a valid URL too, since invalid URLs are quoted in usage errors.
pub fn redact(raw: &str) -> String {
    let Some((scheme, rest)) = raw
        .split_once("://")
        .filter(|(scheme, _)| is_scheme(scheme))
    else {
        // Not a URL that can be read: a password typed without a scheme (`user:pw@host`) must
        // still not show, so everything before the last `@` goes.
        return match raw.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => raw.to_owned(),
        };
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = redact_query(tail);
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return format!("{scheme}://{authority}{tail}");
    };
    let hidden = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        // `redis://secret@host` passes the whole userinfo as the password (as redis-cli reads
        // it); elsewhere a lone userinfo is a user name.
        None if scheme.starts_with("redis") => "***".to_owned(),
        None => userinfo.to_owned(),
    };
    format!("{scheme}://{hidden}@{hosts}{tail}")
}

/// Whether `text` can be a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn is_scheme(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Hides `password=` query parameters (PostgreSQL accepts them).
fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// `%XX` escapes in a URL part decoded (a `+` stays a `+`, as libpq and redis-cli read it);
/// malformed escapes are kept as written.
pub fn percent_decode(raw: &str) -> String {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether `raw` carries a secret that must not reach a child's environment.
pub fn has_secret(raw: &str) -> bool {
    redact(raw) != raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme() {
        assert_eq!(
            BackendSpec::parse("file:///tmp/locks").unwrap(),
            BackendSpec::File {
                dir: "/tmp/locks".into()
            }
        );
        assert!(matches!(
            BackendSpec::parse("rediss://u:p@h:6380/2").unwrap(),
            BackendSpec::Redis { tls: true, .. }
        ));
        let BackendSpec::Etcd { endpoints, .. } =
            BackendSpec::parse("etcd://a:2379,b:2379").unwrap()
        else {
            panic!("not etcd")
        };
        assert_eq!(endpoints, ["a:2379", "b:2379"]);
        assert!(BackendSpec::parse("postgresql://u@h/db").is_ok());
    }

    #[test]
    fn rejects_bad_urls_without_echoing_passwords() {
        for bad in [
            "ftp://u:hunter2@h",
            "file://relative",
            "redis://u:hunter2@/",
            "redis://u:hunter2@h/x",
            "etcd://u:hunter2@h",
            "etcd://h:1,h",
            "nonsense",
        ] {
            let err = BackendSpec::parse(bad).unwrap_err();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(!err.contains('\n'));
        }
    }

    #[test]
    fn redacts_passwords_everywhere() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact("redis://pw@h"), "redis://***@h");
        assert_eq!(redact("postgres://app@h/db"), "postgres://app@h/db");
        assert_eq!(redact("postgres://app:pw@h/db"), "postgres://app:***@h/db");
        assert_eq!(redact("etcd://u:p@a:1,b:2"), "etcd://u:***@a:1,b:2");
        assert_eq!(
            redact("postgres://h/db?user=x&password=pw"),
            "postgres://h/db?user=x&password=***"
        );
        assert_eq!(redact("file:///x"), "file:///x");
        // Typed without a scheme, or with a broken one: still hidden.
        assert_eq!(redact("admin:pw@redis.local"), "***@redis.local");
        assert_eq!(redact("x:pw@h,redis://y"), "***@h,redis://y");
        assert!(has_secret("redis://:pw@h"));
        assert!(!has_secret("redis://h"));
    }
}
