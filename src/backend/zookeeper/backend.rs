//! [`ZooKeeper`]: the `zk://` backend behind the [`Backend`] trait. ZooKeeper orders waiters itself
//! (sequential znodes), so it runs its own waiting loop ([`super::acquire`]) under the shared
//! rules; this module ties each operation's module to the trait.

use std::sync::Arc;

use async_trait::async_trait;

use super::acquire;
use super::link::Link;
use super::settings::Settings;
use crate::backend::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, Inspect, Settings as _,
};

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

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}
