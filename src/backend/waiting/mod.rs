//! Waiting for a lease on a networked backend: the shared rules ([`policy`]) and the engine for
//! backends that keep an explicit line of waiters on the server ([`line`]). Backends whose native
//! primitive already orders waiters (etcd's create revisions, ZooKeeper's sequential znodes) run
//! their own loop under the same rules ([`own`]).

pub mod line;
pub mod own;
pub mod policy;
