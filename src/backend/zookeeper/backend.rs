//! [`ZooKeeper`]: the `zk://` backend behind the [`Backend`] trait. ZooKeeper orders waiters itself
//! (sequential znodes), so it runs its own waiting loop ([`super::acquire`]) under the shared
//! rules; this module ties each operation's module to the trait.

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

/// A ZooKeeper ensemble.
pub struct ZooKeeper {
    link: Arc<Link>,
    /// The URL without its password.
    shown: String,
}

impl ZooKeeper {
    /// Prepares the way to the ensemble; nothing connects here: a session is opened by the first
    /// operation (with the TTL as its timeout, for an acquisition), so an unreachable ensemble
    /// fails it before anything runs.
    pub fn open(settings: &Settings) -> Self {
        ZooKeeper {
            link: Arc::new(Link::new(settings)),
            shown: settings.shown().to_owned(),
        }
    }
}

#[async_trait]
impl Backend for ZooKeeper {
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

    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        inspect::server_time(&self.link).await
    }
}
