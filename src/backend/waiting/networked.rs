//! [`Networked`]: a networked backend behind the [`Backend`] trait — its URL as shown (for
//! messages) and the way to its server, which waits by one of the two engines ([`Waits`]): the
//! shared one for a server-side line of waiters (every [`Line`]), or a loop of its own where the
//! server's primitive already orders the waiters (etcd's create revisions, ZooKeeper's sequential
//! znodes).

use std::sync::Arc;

use async_trait::async_trait;

use super::line::{Line, wait_in_line};
use crate::backend::{AcquireRequest, Acquired, Backend, BackendError, Cancel, Inspect};

/// The way to a server: how it waits for a lease, and what it answers without holding one.
#[async_trait]
pub trait Waits: Send + Sync + Sized + 'static {
    /// Becomes a holder of `request.name`, waiting until `request.deadline` or until `cancel`
    /// resolves, whichever comes first; `shown` names the backend in messages.
    async fn wait(
        this: &Arc<Self>,
        shown: &str,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError>;

    /// What it answers about names without holding them.
    fn inspector(&self) -> &dyn Inspect;
}

#[async_trait]
impl<L: Line> Waits for L {
    async fn wait(
        this: &Arc<Self>,
        shown: &str,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        wait_in_line(&**this, shown, request, cancel).await
    }

    fn inspector(&self) -> &dyn Inspect {
        self.inspect()
    }
}

/// A [`Waits`] as a [`Backend`].
pub struct Networked<W> {
    way: Arc<W>,
    /// The URL without its password.
    shown: String,
}

impl<W: Waits> Networked<W> {
    /// `way` to the server, named `shown` (its URL without the password) in messages; boxed as
    /// the [`Backend`] it is.
    pub fn boxed(way: W, shown: &str) -> Box<dyn Backend> {
        Box::new(Networked {
            way: Arc::new(way),
            shown: shown.to_owned(),
        })
    }
}

#[async_trait]
impl<W: Waits> Backend for Networked<W> {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
        cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        W::wait(&self.way, &self.shown, request, cancel).await
    }

    fn inspect(&self) -> &dyn Inspect {
        self.way.inspector()
    }
}
