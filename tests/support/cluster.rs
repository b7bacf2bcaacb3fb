//! A backend of several members (etcd, ZooKeeper) with its size in its type, as the conformance
//! suite names a fixture: `Cluster<EtcdCluster, 3>` is three etcd members. It is the cluster it
//! wraps (through `Deref`), which starts and breaks its members; the [`Fixture`](super::fixture::Fixture)
//! for each kind of cluster is written beside that cluster.

use std::ops::{Deref, DerefMut};

/// The cluster `C`, started with `MEMBERS` members.
pub struct Cluster<C, const MEMBERS: usize> {
    pub(super) cluster: C,
}

impl<C, const MEMBERS: usize> Deref for Cluster<C, MEMBERS> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.cluster
    }
}

impl<C, const MEMBERS: usize> DerefMut for Cluster<C, MEMBERS> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.cluster
    }
}
