//! The [`Backend`] of a backend whose native primitive already orders its waiters (etcd's create
//! revisions, ZooKeeper's sequential znodes): it runs its own waiting loop under the shared rules
//! ([`OrdersWaiters`]), and [`OwnLine`] ties that loop and the backend's inspector to the trait.

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{AcquireRequest, Acquired, Backend, BackendError, Cancel, Inspect};

/// The way to a server that orders waiters itself; it also answers [`Inspect`]'s questions.
#[async_trait]
pub trait OrdersWaiters: Inspect + Sized + 'static {
    /// Becomes a holder of `request.name` by the server's own order, waiting until
    /// `request.deadline` or until `cancel` resolves, whichever comes first.
    async fn wait(
        link: &Arc<Self>,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError>;
}

/// An [`OrdersWaiters`] as a [`Backend`].
pub struct OwnLine<L> {
    link: Arc<L>,
    /// The URL without its password.
    shown: String,
}

impl<L> OwnLine<L> {
    /// `link` named `shown` (its URL without the password) in messages.
    pub fn new(link: L, shown: &str) -> Self {
        OwnLine {
            link: Arc::new(link),
            shown: shown.to_owned(),
        }
    }
}

#[async_trait]
impl<L: OrdersWaiters> Backend for OwnLine<L> {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        L::wait(&self.link, request, cancel).await
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.link
    }
}
