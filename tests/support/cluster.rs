//! A backend of several members (etcd, ZooKeeper) with its size in its type, as the conformance
//! suite names a fixture: `Cluster<EtcdCluster, 3>` is three etcd members. It is the cluster it
//! wraps (through `Deref`), which starts and breaks its members; the [`Fixture`](super::fixture::Fixture)
//! for each kind of cluster is written beside that cluster. [`MemberProcesses`] are the member
//! servers a cluster runs.

use std::ops::{Deref, DerefMut};

use super::server_process::ServerProcess;

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

/// The server process of each member of a cluster, by the member's index (none while it is down).
pub struct MemberProcesses(Vec<Option<ServerProcess>>);

impl MemberProcesses {
    /// `size` members, none running yet.
    pub fn new(size: usize) -> Self {
        MemberProcesses((0..size).map(|_| None).collect())
    }

    /// Member `i` now runs as `process`.
    pub fn set(&mut self, i: usize, process: ServerProcess) {
        self.0[i] = Some(process);
    }

    /// Kills member `i` (SIGKILL: no goodbye to its peers or clients).
    pub fn kill(&mut self, i: usize) {
        self.0[i] = None;
    }

    /// Kills every member.
    pub fn kill_all(&mut self) {
        self.0.iter_mut().for_each(|process| *process = None);
    }

    /// Whether every member runs (none was killed or exited).
    pub fn all_running(&self) -> bool {
        self.0.iter().all(ServerProcess::runs_in)
    }

    /// The processes of the members that are up.
    pub fn up(&self) -> Vec<&ServerProcess> {
        self.0.iter().flatten().collect()
    }
}
