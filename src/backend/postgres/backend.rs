//! [`PostgresBackend`]: the `postgres://` and `postgresql://` backend behind the [`Backend`]
//! trait; each operation lives in its own module, this one only ties them to the trait.

use std::sync::Arc;

use async_trait::async_trait;

use super::connect::Link;
use super::{acquire, inspect};
use crate::backend::{AcquireRequest, Backend, BackendError, Lease, LockStatus, redact};
use crate::name::LockName;

/// A PostgreSQL server (TLS when the URL's `sslmode` asks for it).
pub struct PostgresBackend {
    link: Arc<Link>,
    /// The URL without its password.
    shown: String,
}

impl PostgresBackend {
    /// Connects to the server named by `url`; an unreachable one fails here.
    pub async fn open(url: &str) -> Result<Self, BackendError> {
        Ok(PostgresBackend {
            link: Arc::new(Link::open(url).await?),
            shown: redact(url),
        })
    }
}

#[async_trait]
impl Backend for PostgresBackend {
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

    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        inspect::server_time(&self.link).await.map(Some)
    }
}
