//! [`Etcd`]: the `etcd://` backend behind the [`Backend`] trait. etcd orders waiters itself (by
//! create revision), so it runs its own waiting loop ([`super::acquire`]) under the shared rules;
//! this module ties each operation's module to the trait.

use std::sync::Arc;

use async_trait::async_trait;

use super::acquire;
use super::link::Link;
use super::settings::Settings;
use crate::backend::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, Inspect, Settings as _,
};

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

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}
