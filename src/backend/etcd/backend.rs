//! [`Etcd`]: the `etcd://` backend behind the [`Backend`] trait. etcd orders waiters itself (by
//! create revision), so it runs its own waiting loop ([`super::acquire`]) under the shared rules;
//! this module ties each operation's module to the trait.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::link::Link;
use super::settings::Settings;
use super::{acquire, inspect, interval};
use crate::backend::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, IntervalClaim, LockStatus,
    Settings as _,
};
use crate::name::LockName;

/// An etcd cluster.
pub struct Etcd {
    link: Arc<Link>,
    /// The URL without its password.
    shown: String,
}

impl Etcd {
    /// Prepares the way to the cluster; nothing connects here: the first request does, so an
    /// unreachable cluster fails the acquisition (or `status`) before anything runs.
    pub fn open(settings: &Settings) -> Result<Self, BackendError> {
        Ok(Etcd {
            link: Arc::new(Link::new(settings)?),
            shown: settings.shown().to_owned(),
        })
    }
}

#[async_trait]
impl Backend for Etcd {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        acquire::acquire(&self.link, request, cancel).await
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

    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        interval::claim(&self.link, name, interval).await
    }
}
