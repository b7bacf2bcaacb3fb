//! [`Settings`] of the `redlock://` backend:
//! `redlock://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,HOST:PORT[,…]` — N ≥ 3 independent Redis
//! masters (not replicas of one primary), all with the same credentials; a lone
//! `redlock://SECRET@…` is a password, as for `redis://`. A port left out is 6379. No path, no
//! query options, no TLS. An odd N is recommended: an even one tolerates no more failed masters
//! than the odd number below it.

use async_trait::async_trait;

use super::line::Redlock;
use super::masters::Masters;
use crate::backend::redis;
use crate::backend::url::{HostPort, LoneUserinfo, Url, UrlForms};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError};

const DEFAULT_PORT: u16 = 6379;
/// The fewest masters: with fewer, a majority is all of them (or a single server).
const MIN_MASTERS: usize = 3;

/// N independent Redis masters.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: Url,
    /// Each master, its port filled in.
    pub masters: Vec<HostPort>,
}

impl Settings {
    /// Parses a `redlock://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::Password)?;
        if url.hosts.len() < MIN_MASTERS {
            return Err(format!(
                "{} master(s) given: Redlock needs at least {MIN_MASTERS} independent masters, \
                 HOST:PORT,HOST:PORT,HOST:PORT (for one server, use redis://)",
                url.hosts.len()
            ));
        }
        let masters: Vec<HostPort> = url
            .hosts
            .iter()
            .map(|host| HostPort {
                host: host.host.clone(),
                port: Some(host.port.unwrap_or(DEFAULT_PORT)),
            })
            .collect();
        for (i, master) in masters.iter().enumerate() {
            if masters[..i].contains(master) {
                return Err(format!(
                    "master {} is named twice: each of the N masters must be a server of its own",
                    master.with_default(DEFAULT_PORT)
                ));
            }
        }
        if !url.path.is_empty() {
            return Err(format!(
                "unexpected path {:?}: redlock URLs end after the masters (database 0 on each)",
                url.path
            ));
        }
        url.only_params(&[])?;
        Ok(Settings { url, masters })
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        let masters = self
            .masters
            .iter()
            .map(|endpoint| redis::Settings::master(&self.url, endpoint.clone()))
            .collect::<Vec<_>>();
        let masters = Masters::new(&masters)?;
        Ok(Networked::boxed(Redlock::new(masters), self.shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn reads_masters_and_credentials() {
        let s = Settings::parse("redlock://u:p%40ss@a:1,b:2,c").unwrap();
        let shown: Vec<String> = s.masters.iter().map(|m| m.with_default(0)).collect();
        assert_eq!(shown, ["a:1", "b:2", "c:6379"]);
        assert_eq!(s.url.user.as_deref(), Some("u"));
        assert_eq!(s.url.password.as_deref(), Some("p@ss"));
        let s = Settings::parse("redlock://secret@a:1,b:1,c:1").unwrap();
        assert_eq!(s.url.password.as_deref(), Some("secret"));
        assert_eq!(
            crate::backend::Settings::shown(&s),
            "redlock://***@a:1,b:1,c:1"
        );
    }

    #[test]
    fn refuses_fewer_than_three_masters_and_the_same_master_twice() {
        refused_without_password(
            Settings::parse,
            &[
                "redlock://a:1",
                "redlock://a:1,b:1",
                "redlock://a:1,b:1,a:1",
                "redlock://a,b,a:6379",
                "redlock://a:1,b:1,c:1/2",
                "redlock://a:1,b:1,c:1?tls=1",
                "redlock://",
            ],
        );
        let err = Settings::parse("redlock://u:hunter2@a:1,b:2").unwrap_err();
        assert!(
            err.contains("at least 3") && !err.contains("hunter2"),
            "{err}"
        );
    }
}
