//! [`Settings`] of the `etcd://` backend:
//! `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][?cacert=CA.pem[&cert=C.pem&key=K.pem]]`.
//! `cacert` turns TLS on, verifying the members against that PEM bundle; `cert` and `key` add a
//! client certificate, for clusters that ask for one. The files are read when the backend is
//! opened; the run form checks first that they can be read (a usage error otherwise).

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::link::Link;
use crate::backend::url::{LoneUserinfo, Url, UrlForms};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError, Holds};

/// TLS files: the CA bundle, and a client certificate with its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// An etcd cluster.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: Url,
    /// `host:port` of each member.
    pub endpoints: Vec<String>,
    pub tls: Option<TlsFiles>,
}

impl Settings {
    /// Parses an `etcd://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = Url::split(raw, LoneUserinfo::User)?;
        if url.hosts.is_empty() {
            return Err("no endpoint: give HOST:PORT[,HOST:PORT…]".into());
        }
        let mut endpoints = Vec::new();
        for host in &url.hosts {
            let Some(port) = host.port else {
                return Err(format!("endpoint {:?} is not host:port", host.host));
            };
            endpoints.push(format!("{}:{port}", host.host));
        }
        if !url.path.is_empty() {
            return Err(format!(
                "unexpected path {:?}: etcd URLs end after the endpoints",
                url.path
            ));
        }
        url.only_params(&["cacert", "cert", "key"])?;
        let file = |key| url.param(key).map(PathBuf::from);
        let tls = match (file("cacert"), file("cert"), file("key")) {
            (None, None, None) => None,
            (Some(ca), None, None) => Some(TlsFiles { ca, identity: None }),
            (Some(ca), Some(cert), Some(key)) => Some(TlsFiles {
                ca,
                identity: Some((cert, key)),
            }),
            (Some(_), _, _) => return Err("cert= and key= go together".into()),
            (None, _, _) => return Err("a client certificate needs cacert= too".into()),
        };
        Ok(Settings {
            url,
            endpoints,
            tls,
        })
    }

    /// User name and password, when the URL gives them.
    pub fn credentials(&self) -> Option<(String, String)> {
        self.url
            .user
            .as_ref()
            .map(|user| (user.clone(), self.url.password.clone().unwrap_or_default()))
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    fn files(&self) -> Vec<(&'static str, &Path, Holds)> {
        let Some(tls) = &self.tls else {
            return Vec::new();
        };
        let mut files = vec![("cacert", tls.ca.as_path(), Holds::Certificates)];
        if let Some((cert, key)) = &tls.identity {
            files.push(("cert", cert.as_path(), Holds::Certificates));
            files.push(("key", key.as_path(), Holds::PrivateKey));
        }
        files
    }

    /// Prepares the way to the cluster; nothing connects here: the first request does, so an
    /// unreachable cluster fails the acquisition (or `status`) before anything runs.
    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        Ok(Networked::boxed(Link::new(self)?, self.shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn reads_members_credentials_and_tls_files() {
        let s =
            Settings::parse("etcd://u:p%3Aw@a:1,[::1]:2?cacert=/ca.pem&cert=/c&key=/k").unwrap();
        assert_eq!(s.endpoints, ["a:1", "[::1]:2"]);
        assert_eq!(s.credentials(), Some(("u".into(), "p:w".into())));
        assert_eq!(
            s.tls,
            Some(TlsFiles {
                ca: "/ca.pem".into(),
                identity: Some(("/c".into(), "/k".into()))
            })
        );
    }

    #[test]
    fn rejects_unknown_options_and_half_a_client_certificate() {
        refused_without_password(
            Settings::parse,
            &[
                "etcd://u:hunter2@h:1?tls=1",
                "etcd://h:1?cert=/c&key=/k",
                "etcd://h:1?cacert=/ca&cert=/c",
                "etcd://h",
                "etcd://h:1/x",
            ],
        );
    }
}
