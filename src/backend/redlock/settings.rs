//! [`Settings`] of the `redlock://` backend:
//! `redlock://[[USER]:PASSWORD@]HOST:PORT,HOST:PORT,HOST:PORT[,…]` — N ≥ 3 independent Redis
//! masters (not replicas of one primary), all with the same credentials; a lone
//! `redlock://SECRET@…` is a password, as for `redis://`. A port left out is 6379. No path, no
//! query options, no TLS. An odd N is recommended: an even one tolerates no more failed masters
//! than the odd number below it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;

use super::line::Redlock;
use super::masters::Masters;
use crate::backend::redis;
use crate::backend::url::{HostPort, LoneUserinfo, Url, UrlForms};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError, answer};

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
        let spelled: Vec<(String, u16)> = masters.iter().map(spelling).collect();
        for (i, master) in spelled.iter().enumerate() {
            if let Some(before) = spelled[..i].iter().position(|other| other == master) {
                let (earlier, later) = (&masters[before], &masters[i]);
                let twice = match earlier == later {
                    true => format!("master {} is named twice", later.with_default(DEFAULT_PORT)),
                    false => format!(
                        "masters {} and {} are the same server",
                        earlier.with_default(DEFAULT_PORT),
                        later.with_default(DEFAULT_PORT)
                    ),
                };
                return Err(format!(
                    "{twice}: each of the N masters must be a server of its own"
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

/// A master as the server it names, as far as the text tells: a host name in lower case (names
/// are case-blind), an address in its one canonical form (`[::ffff:127.0.0.1]` is `127.0.0.1`).
fn spelling(master: &HostPort) -> (String, u16) {
    let host = match master.bare_host().parse::<IpAddr>() {
        Ok(address) => address.to_canonical().to_string(),
        Err(_) => master.host.to_ascii_lowercase(),
    };
    (host, master.port.unwrap_or(DEFAULT_PORT))
}

/// How long looking up the masters' names may take before the check is left to the rounds.
const LOOKUP_LIMIT: Duration = Duration::from_secs(2);

/// Refuses masters that are one server under two names (`localhost:6379` and `127.0.0.1:6379`):
/// its vote would count twice, and a quorum could stand on fewer servers than it says. Looks up
/// only masters named by a host name, all at once; a name that does not resolve now is left to
/// the rounds, which report it as an unreachable master.
async fn refuse_one_server_twice(masters: &[HostPort]) -> Result<(), BackendError> {
    if masters
        .iter()
        .all(|m| m.bare_host().parse::<IpAddr>().is_ok())
    {
        return Ok(());
    }
    let lookups = masters.iter().map(|master| async move {
        let port = master.port.unwrap_or(DEFAULT_PORT);
        // On lockrun's running time: a stop during the lookup must not skip the check.
        let found = answer::within(
            LOOKUP_LIMIT,
            tokio::net::lookup_host((master.bare_host(), port)),
        )
        .await;
        match found {
            Ok(Ok(addresses)) => addresses
                .map(|a| SocketAddr::new(a.ip().to_canonical(), a.port()))
                .collect(),
            _ => Vec::new(),
        }
    });
    let reached: Vec<Vec<SocketAddr>> = futures_util::future::join_all(lookups).await;
    for (i, addresses) in reached.iter().enumerate() {
        for (before, earlier) in reached[..i].iter().enumerate() {
            if let Some(shared) = addresses.iter().find(|a| earlier.contains(a)) {
                return Err(BackendError::Misconfigured(format!(
                    "redlock masters {} and {} are the same server (both reach {shared}): each \
                     of the N masters must be a server of its own",
                    masters[before].with_default(DEFAULT_PORT),
                    masters[i].with_default(DEFAULT_PORT)
                )));
            }
        }
    }
    Ok(())
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        refuse_one_server_twice(&self.masters).await?;
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

    /// `localhost` and `127.0.0.1` are told apart only by looking the name up; the ports are
    /// never connected to.
    #[tokio::test]
    async fn one_server_under_two_names_is_refused_at_open() {
        let url = "redlock://:hunter2@127.0.0.1:1,127.0.0.2:1,localhost:1";
        let settings = Settings::parse(url).unwrap();
        let err = refuse_one_server_twice(&settings.masters)
            .await
            .unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("127.0.0.1:1 and localhost:1") && !err.contains("hunter2"),
            "{err}"
        );
        let distinct = Settings::parse("redlock://localhost:1,localhost:2,localhost:3").unwrap();
        refuse_one_server_twice(&distinct.masters).await.unwrap();
    }

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
        let err = Settings::parse("redlock://:hunter2@Cache-1:7,b:1,cache-1:7").unwrap_err();
        assert!(err.contains("Cache-1:7 and cache-1:7"), "{err}");
        let err = Settings::parse("redlock://a:7,b:1,a:7").unwrap_err();
        assert!(err.contains("master a:7 is named twice"), "{err}");
        refused_without_password(
            Settings::parse,
            &[
                "redlock://a:1",
                "redlock://a:1,b:1",
                "redlock://a:1,b:1,a:1",
                "redlock://a,b,a:6379",
                "redlock://localhost:1,b:1,LOCALHOST:1",
                "redlock://127.0.0.1:1,b:1,[::ffff:127.0.0.1]:1",
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
