//! [`Settings`] of the `zk://` backend: `zk://[USER:PASS@]HOST[:PORT][,HOST[:PORT]…][/CHROOT]`.
//!
//! Several endpoints are members of one ensemble: the client fails over between them. A port left
//! out is ZooKeeper's 2181. `USER:PASS` is digest authentication (`addauth digest USER:PASS`), and
//! the znodes lockrun creates then carry an ACL that gives that identity every right and everyone
//! else only reading. `CHROOT` is the path under which lockrun keeps its tree (`CHROOT/lockrun/…`);
//! it is created when missing. No query options.

use async_trait::async_trait;

use super::link::Link;
use crate::backend::url::{LoneUserinfo, Url, UrlForms};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError};

/// ZooKeeper's client port.
const DEFAULT_PORT: u16 = 2181;

/// A ZooKeeper ensemble.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: Url,
    /// `host:port` of each member, as the client connects to them.
    pub endpoints: Vec<String>,
    /// Where lockrun's tree lives: `""` (the root) or `/a/b`.
    pub chroot: String,
}

impl Settings {
    /// Parses a `zk://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::User)?;
        if url.hosts.is_empty() {
            return Err("no endpoint: give HOST:PORT[,HOST:PORT…]".into());
        }
        let endpoints = url
            .hosts
            .iter()
            .map(|host| host.with_default(DEFAULT_PORT))
            .collect();
        if url.user.is_some() && url.password.is_none() {
            return Err("digest authentication needs USER:PASS, not a user alone".into());
        }
        if url.user.as_deref() == Some("") {
            return Err("digest authentication needs a user name before the :".into());
        }
        url.only_params(&[])?;
        let chroot = chroot(&url.path)?;
        Ok(Settings {
            url,
            endpoints,
            chroot,
        })
    }

    /// `user:password` for `addauth digest`, when the URL gives them.
    pub fn digest(&self) -> Option<String> {
        let user = self.url.user.as_ref()?;
        Some(format!(
            "{user}:{}",
            self.url.password.as_deref().unwrap_or_default()
        ))
    }
}

/// The chroot path of a URL's path (without its leading `/`): `""` or `/a/b`.
fn chroot(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(String::new());
    }
    for segment in path.split('/') {
        let problem = match segment {
            "" => "an empty segment",
            "." | ".." => "a . or .. segment",
            s if s.chars().any(char::is_control) => "a control character",
            _ => continue,
        };
        return Err(format!("chroot {:?} has {problem}", format!("/{path}")));
    }
    if path.split('/').next() == Some("zookeeper") {
        return Err("chroot /zookeeper is ZooKeeper's own".into());
    }
    Ok(format!("/{path}"))
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    /// Prepares the way to the ensemble; nothing connects here: a session is opened by the first
    /// operation (with the TTL as its timeout, for an acquisition), so an unreachable ensemble
    /// fails it before anything runs.
    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        Ok(Networked::boxed(Link::new(self), self.shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn reads_members_credentials_and_chroot() {
        let s = Settings::parse("zk://app:p%3Aw@a:1,[::1]:2,b/jobs/prod").unwrap();
        assert_eq!(s.endpoints, ["a:1", "[::1]:2", "b:2181"]);
        assert_eq!(s.digest().as_deref(), Some("app:p:w"));
        assert_eq!(s.chroot, "/jobs/prod");
        assert_eq!(s.url.shown(), "zk://app:***@a:1,[::1]:2,b/jobs/prod");
        let plain = Settings::parse("zk://h:2181").unwrap();
        assert_eq!((plain.chroot.as_str(), plain.digest()), ("", None));
    }

    #[test]
    fn rejects_bad_urls_without_their_password() {
        refused_without_password(
            Settings::parse,
            &[
                "zk://u:hunter2@h:1?x=1",
                "zk://u:hunter2@",
                "zk://u@h:1",
                "zk://:hunter2@h:1",
                "zk://u:hunter2@h:1/a//b",
                "zk://u:hunter2@h:1//a",
                "zk://u:hunter2@h:1/a/..",
                "zk://u:hunter2@h:1/zookeeper",
                "zk://u:hunter2@h:99999",
            ],
        );
    }
}
