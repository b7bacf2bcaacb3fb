//! Waiting for a lease on a networked backend: the shared rules ([`policy`]), the engine for
//! backends that keep an explicit line of waiters on the server ([`line`]), and the [`Backend`]
//! every networked backend is ([`networked`]). Backends whose native primitive already orders
//! waiters (etcd's create revisions, ZooKeeper's sequential znodes) run their own loop under the
//! same rules.
//!
//! [`Backend`]: crate::backend::Backend

pub mod line;
pub mod networked;
pub mod policy;
