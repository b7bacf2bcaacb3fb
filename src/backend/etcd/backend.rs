//! [`EtcdBackend`]: the `etcd://` backend behind the [`Backend`] trait; this module reads what the
//! URL asks for (members, user and password, TLS) and ties each operation's module to the trait.
//!
//! URL: `etcd://[user:password@]host:port[,host:port…][?cacert=CA.pem[&cert=C.pem&key=K.pem]]`.
//! `cacert` turns TLS on, verifying the members against that PEM bundle; `cert` and `key` add a
//! client certificate, for clusters that ask for one. Nothing connects here: the first request
//! does, so an unreachable cluster fails the acquisition (or `status`) before anything runs.

use std::sync::Arc;

use async_trait::async_trait;

use super::link::{Link, Tls};
use super::{acquire, inspect};
use crate::backend::{
    AcquireRequest, Backend, BackendError, Lease, LockStatus, percent_decode, redact,
};
use crate::name::LockName;

/// An etcd cluster.
pub struct EtcdBackend {
    link: Arc<Link>,
    /// The URL without its password.
    shown: String,
}

impl EtcdBackend {
    /// Prepares the way to the cluster that `url` names through `endpoints` (`host:port`).
    pub fn open(url: &str, endpoints: &[String]) -> Result<Self, BackendError> {
        let shown = redact(url);
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let (authority, query) = match rest.find(['/', '?']) {
            Some(at) => (&rest[..at], rest[at..].trim_start_matches('/')),
            None => (rest, ""),
        };
        let user = authority.rsplit_once('@').map(|(userinfo, _)| {
            let (name, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            (percent_decode(name), percent_decode(password))
        });
        let mut files: [(&str, Option<Vec<u8>>); 3] =
            [("cacert", None), ("cert", None), ("key", None)];
        for pair in query
            .trim_start_matches('?')
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (option, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some((_, slot)) = files.iter_mut().find(|(name, _)| *name == option) else {
                return Err(BackendError::Unsupported(format!(
                    "{shown}: unknown option {option:?}; etcd URLs take cacert=, cert= and key="
                )));
            };
            let path = percent_decode(value);
            let pem = std::fs::read(&path).map_err(|e| BackendError::Failed {
                endpoint: path.clone(),
                reason: format!(
                    "cannot read the {option} file: {}",
                    crate::report::io_reason(&e)
                ),
            })?;
            *slot = Some(pem);
        }
        let [(_, ca), (_, cert), (_, key)] = files;
        let tls = match (ca, cert, key) {
            (None, None, None) => None,
            (Some(ca), cert, key) => Some(Tls {
                ca,
                identity: match (cert, key) {
                    (Some(cert), Some(key)) => Some((cert, key)),
                    (None, None) => None,
                    _ => {
                        return Err(BackendError::Unsupported(format!(
                            "{shown}: cert= and key= go together"
                        )));
                    }
                },
            }),
            (None, ..) => {
                return Err(BackendError::Unsupported(format!(
                    "{shown}: a client certificate needs cacert= too"
                )));
            }
        };
        Ok(EtcdBackend {
            link: Arc::new(Link::new(endpoints.to_vec(), user, tls)),
            shown,
        })
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> Result<Option<Box<dyn Lease>>, BackendError> {
        let lease = acquire::acquire(&self.link, request).await?;
        Ok(lease.map(|lease| Box::new(lease) as Box<dyn Lease>))
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        inspect::status(&self.link, name).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        inspect::list(&self.link, prefix).await
    }

    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        inspect::force_release(&self.link, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes() {
        assert_eq!(percent_decode("p%40ss%3Aw"), "p@ss:w");
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn rejects_unknown_options_without_the_password() {
        let Err(err) = EtcdBackend::open("etcd://u:hunter2@h:1?tls=1", &["h:1".into()]) else {
            panic!("accepted an unknown option")
        };
        let err = err.to_string();
        assert!(err.contains("tls") && !err.contains("hunter2"), "{err}");
    }
}
