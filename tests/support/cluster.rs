//! A backend of several members (etcd, ZooKeeper) with its size in its type, as the conformance
//! suite names a fixture: `Cluster<EtcdCluster, 3>` is three etcd members. It is the cluster it
//! wraps (through `Deref`), which starts and breaks its members; the [`Fixture`](super::fixture::Fixture)
//! for each kind of cluster is written beside that cluster. What every kind of cluster does the
//! same way (start on fresh ports and wait until each member serves, name its members in a URL,
//! put a fault proxy in front of member 0, kill and launch members again) is written once, in
//! [`Members`]. [`MemberProcesses`] are the member servers a cluster runs.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::fixture::Reachable;
use super::proxy::Proxy;
use super::server_process::{ServerProcess, on_fresh_ports};
use super::wait::wait_until;

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

/// What a kind of cluster says about its members; starting, reaching and restarting them follow.
pub trait Members: Sized {
    /// The backend's URL scheme (`etcd`, `zk`).
    const SCHEME: &'static str;
    /// What runs, for messages (`etcd`, `zookeeper`).
    const NAME: &'static str;
    /// What to install when it does not start.
    const PACKAGE: &'static str;
    /// How long a member (or the whole cluster) may take to serve.
    const READY: Duration;

    /// How many members it has.
    fn size(&self) -> usize;

    /// The port member `i` serves clients on.
    fn client_port(&self, i: usize) -> u16;

    /// `USER:PASSWORD@` for URLs, or nothing.
    fn userinfo(&self) -> String;

    /// The members' server processes.
    fn processes(&self) -> &MemberProcesses;

    /// The members' server processes, to set or kill one.
    fn processes_mut(&mut self) -> &mut MemberProcesses;

    /// Spawns member `i` on its ports, with its data.
    fn launch(&mut self, i: usize);

    /// Whether member `i` serves clients (a member without its quorum does not).
    fn serving(&self, i: usize) -> bool;

    /// Builds a cluster with `build` (given the attempt's number), on ports it probes afresh each
    /// attempt, launches every member and waits until each serves; fails the test if no attempt
    /// got there.
    fn started(mut build: impl FnMut(usize) -> Self) -> Self {
        on_fresh_ports(|attempt| {
            let mut cluster = build(attempt);
            cluster.launch_all();
            wait_until(Self::READY, || cluster.all_serving()).then_some(cluster)
        })
        .unwrap_or_else(|| {
            panic!(
                "{} did not start (is {} installed?)",
                Self::NAME,
                Self::PACKAGE
            )
        })
    }

    /// Spawns every member.
    fn launch_all(&mut self) {
        for i in 0..self.size() {
            self.launch(i);
        }
    }

    /// Whether every member runs and serves.
    fn all_serving(&self) -> bool {
        self.processes().all_running() && (0..self.size()).all(|i| self.serving(i))
    }

    /// Waits until every member serves again; fails the test if they do not.
    fn wait_serving(&self) {
        assert!(
            wait_until(Self::READY, || self.all_serving()),
            "{} did not serve again",
            Self::NAME
        );
    }

    /// `127.0.0.1:PORT` of member `i`.
    fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_port(i))
    }

    /// `SCHEME://` with every member, member 0 first (and the password, if set).
    fn url(&self) -> String {
        let endpoints: Vec<String> = (0..self.size()).map(|i| self.endpoint(i)).collect();
        format!(
            "{}://{}{}",
            Self::SCHEME,
            self.userinfo(),
            endpoints.join(",")
        )
    }

    /// Kills member `i` (SIGKILL: no goodbye to its peers or clients).
    fn kill_member(&mut self, i: usize) {
        self.processes_mut().kill(i);
    }

    /// Kills every member.
    fn kill_all(&mut self) {
        self.processes_mut().kill_all();
    }

    /// Kills every member and starts them again on their ports with their data, until each
    /// serves (a crash keeps their data: tokens survive it).
    fn restart_all(&mut self) {
        self.kill_all();
        self.launch_all();
        self.wait_serving();
    }
}

impl<C: Members, const MEMBERS: usize> Reachable for Cluster<C, MEMBERS> {
    fn url(&self) -> String {
        self.cluster.url()
    }

    /// Every request through one proxy in front of member 0 (the URL names no other member).
    fn proxied(&self) -> Option<(Proxy, String)> {
        Some(Proxy::in_front_of(self.client_port(0), |port| {
            format!("{}://{}127.0.0.1:{port}", C::SCHEME, self.userinfo())
        }))
    }

    /// The members that are up.
    fn servers(&self) -> Vec<&ServerProcess> {
        self.processes().up()
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
