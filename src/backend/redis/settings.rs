//! [`Settings`] of the `redis://` and `rediss://` backend:
//! `redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]`. A lone `redis://SECRET@HOST` is a password, as
//! `redis-cli` reads it. `rediss://` uses TLS (rustls, verifying the server against the system's
//! roots or the bundle named by `SSL_CERT_FILE`). No query options.

use async_trait::async_trait;

use super::connect::Link;
use super::line::Redis;
use crate::backend::url::{HostPort, LoneUserinfo, Url, UrlForms};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError};

const DEFAULT_PORT: u16 = 6379;

/// One Redis server.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: Url,
    pub endpoint: HostPort,
    pub tls: bool,
    pub db: i64,
}

impl Settings {
    /// Parses a `redis://` or `rediss://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::Password)?;
        let endpoint = match url.hosts.as_slice() {
            [one] => one.clone(),
            [] => return Err("no host".into()),
            _ => {
                return Err(
                    "give one host (for several independent masters, use redlock://)".into(),
                );
            }
        };
        let db = match url.path.as_str() {
            "" => 0,
            db => db
                .parse::<u32>()
                .map_err(|_| format!("database {db:?} is not a number"))?
                .into(),
        };
        url.only_params(&[])?;
        Ok(Settings {
            tls: url.scheme == "rediss",
            endpoint,
            db,
            url,
        })
    }

    /// One of the independent masters a `redlock://` URL names: that URL's credentials, this
    /// endpoint, database 0, no TLS.
    pub fn master(url: &Url, endpoint: HostPort) -> Self {
        Settings {
            url: url.clone(),
            endpoint,
            tls: false,
            db: 0,
        }
    }

    /// `host:port`, for messages.
    pub fn endpoint(&self) -> String {
        self.endpoint.with_default(DEFAULT_PORT)
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.endpoint.port.unwrap_or(DEFAULT_PORT)
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        let link = Link::open(self).await?;
        Ok(Networked::boxed(Redis::new(link), self.shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn reads_host_port_database_and_credentials() {
        let s = Settings::parse("rediss://u:p%40ss@h:6380/2").unwrap();
        assert_eq!(s.endpoint(), "h:6380");
        assert!(s.tls);
        assert_eq!(s.db, 2);
        assert_eq!(s.url.user.as_deref(), Some("u"));
        assert_eq!(s.url.password.as_deref(), Some("p@ss"));
        let s = Settings::parse("redis://secret@h").unwrap();
        assert_eq!(s.endpoint(), "h:6379");
        assert_eq!(s.url.password.as_deref(), Some("secret"));
    }

    #[test]
    fn rejects_what_it_cannot_use() {
        refused_without_password(
            Settings::parse,
            &[
                "redis://h/x",
                "redis://a:1,b:2",
                "redis://h?protocol=3",
                "redis://",
            ],
        );
    }
}
