//! Private etcd members per test (Debian's `etcd`, never one that happens to run on the machine):
//! one member or a three-member cluster on free loopback ports (client and peer), data in a
//! temporary directory, ready when `etcdctl endpoint health` passes on every member (polled, never a
//! fixed sleep), killed on drop. A member can be killed and restarted on its ports with its data.
//! As a [`Fixture`], [`Etcd<1>`] is one member at etcd's default timing and [`Etcd<3>`] a
//! three-member cluster with fast elections; a fault (a kill, a pause with SIGSTOP) hits every
//! member.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::cluster::{Cluster, MemberProcesses, Members};
use super::fixture::{Counter, Fixture, free_port};
use super::server_process::{ServerProcess, append_log};
use super::wait::{text, wait_until};

/// Raft timing: etcd's defaults (heartbeat 100 ms, election 1 s, so a 2 s minimum lease), or a
/// faster one for clusters whose tests kill members (elections in about half a second).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pace {
    Default,
    Fast,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
}

/// A running etcd cluster owned by one test.
pub struct EtcdCluster {
    /// Declared first: killed (on drop) before their directory is removed.
    processes: MemberProcesses,
    members: Vec<Member>,
    dir: tempfile::TempDir,
    pace: Pace,
    token: String,
    /// With TLS: the directory holding `ca.crt`, `server.crt` and `server.key`.
    tls: Option<PathBuf>,
    /// With TLS: whether clients must show a certificate signed by `ca.crt`.
    client_auth: bool,
    /// With authentication on: the password of `root`.
    password: Option<String>,
}

impl EtcdCluster {
    /// One member that speaks only TLS, with the certificates in `certs` (see `support::certs`);
    /// with `client_auth`, clients must show a certificate signed by the same CA (the server's own
    /// will do).
    pub fn single_tls(certs: &Path, client_auth: bool) -> Self {
        Self::start_with(1, Pace::Default, Some((certs.to_path_buf(), client_auth)))
    }

    /// `size` members with `pace`.
    fn sized(size: usize, pace: Pace) -> Self {
        Self::start_with(size, pace, None)
    }

    fn start_with(size: usize, pace: Pace, tls: Option<(PathBuf, bool)>) -> Self {
        Self::started(|attempt| EtcdCluster {
            processes: MemberProcesses::new(size),
            dir: tempfile::tempdir().expect("temp dir"),
            members: (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port: free_port(),
                })
                .collect(),
            pace,
            token: format!("lockrun-test-{}-{attempt}", std::process::id()),
            tls: tls.as_ref().map(|(certs, _)| certs.clone()),
            client_auth: tls.as_ref().is_some_and(|(_, auth)| *auth),
            password: None,
        })
    }

    /// Turns authentication on, with a `root` user whose password is `password`.
    pub fn enable_auth(&mut self, password: &str) {
        for args in [
            &["user", "add", &format!("root:{password}")][..],
            &["auth", "enable"],
        ] {
            let out = self.etcdctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                text(&out.stderr)
            );
        }
        self.password = Some(password.to_owned());
    }

    /// Starts member `i` again on its ports, with its data; waits until it answers a health check
    /// when `wait_healthy` (a member alone without its quorum never does).
    pub fn restart_member(&mut self, i: usize, wait_healthy: bool) {
        self.kill_member(i);
        self.launch(i);
        if wait_healthy {
            assert!(
                wait_until(Self::READY, || self.serving(i)),
                "etcd member {i} did not come back"
            );
        }
    }

    /// Runs `etcdctl` (API v3) against every member.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        let endpoints: Vec<String> = (0..self.members.len()).map(|i| self.endpoint(i)).collect();
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(",")])
            .args(["--command-timeout", "3s"]);
        if let Some(password) = &self.password {
            cmd.arg(format!("--user=root:{password}"));
        }
        cmd.args(args).output().expect("run etcdctl")
    }

    /// The lease of the holder key of `name` whose create revision (the token) is `token`.
    pub fn holder_lease(&self, name: &str, token: u64) -> u64 {
        let prefix = format!("lockrun/{name}/#holders/");
        let out = self.etcdctl(&["get", "--prefix", &prefix, "-w", "json"]);
        let got: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("etcdctl get failed: {}", text(&out.stderr)));
        got["kvs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|kv| kv["create_revision"].as_u64() == Some(token))
            .and_then(|kv| kv["lease"].as_u64())
            .unwrap_or_else(|| panic!("no holder key with token {token}: {got}"))
    }
}

/// A gRPC message (uncompressed flag, length) holding `LeaseKeepAliveRequest` — or, alike,
/// `LeaseRevokeRequest` — for lease `id`: field 1, a varint.
pub fn lease_message(id: u64) -> Vec<u8> {
    let mut body = vec![0x08];
    let mut rest = id;
    loop {
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            body.push(byte);
            break;
        }
        body.push(byte | 0x80);
    }
    let mut message = vec![0];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes());
    message.extend_from_slice(&body);
    message
}

impl Members for EtcdCluster {
    const SCHEME: &'static str = "etcd";
    const NAME: &'static str = "etcd";
    const PACKAGE: &'static str = "the etcd-server package";
    const READY: Duration = Duration::from_secs(20);

    fn size(&self) -> usize {
        self.members.len()
    }

    fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// `root`'s password once auth is on.
    fn userinfo(&self) -> String {
        self.password
            .as_ref()
            .map_or_else(String::new, |password| format!("root:{password}@"))
    }

    fn processes(&self) -> &MemberProcesses {
        &self.processes
    }

    fn processes_mut(&mut self) -> &mut MemberProcesses {
        &mut self.processes
    }

    fn launch(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let member = &self.members[i];
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let data = self.dir.path().join(&member.name);
        let log = append_log(&self.dir.path().join(format!("{}.log", member.name)));
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(certs) = &self.tls {
            cmd.arg("--cert-file")
                .arg(certs.join("server.crt"))
                .arg("--key-file")
                .arg(certs.join("server.key"));
            if self.client_auth {
                cmd.arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(certs.join("ca.crt"));
            }
        }
        if self.pace == Pace::Fast {
            cmd.args(["--heartbeat-interval", "50", "--election-timeout", "500"]);
        }
        self.processes
            .set(i, ServerProcess::spawn(&mut cmd, "etcd"));
    }

    /// A health check passes (it needs the quorum).
    fn serving(&self, i: usize) -> bool {
        let mut cmd = Command::new("etcdctl");
        if let Some(certs) = &self.tls {
            cmd.arg("--cacert").arg(certs.join("ca.crt"));
            if self.client_auth {
                cmd.arg("--cert")
                    .arg(certs.join("server.crt"))
                    .arg("--key")
                    .arg(certs.join("server.key"));
            }
        }
        cmd.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint(i)])
            .args(["--command-timeout", "1s", "--dial-timeout", "1s"])
            .args(["endpoint", "health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// An etcd cluster of `MEMBERS` members as a backend under test.
pub type Etcd<const MEMBERS: usize> = Cluster<EtcdCluster, MEMBERS>;

impl<const MEMBERS: usize> Fixture for Etcd<MEMBERS> {
    const TTL: &'static str = "3s";
    const SERVER_CLOCK: bool = false;

    /// Leases count whole seconds: the interval is rounded up, and raised to the cluster's
    /// minimum lease (2 s at etcd's default pace, less at the faster one).
    fn interval_kept_at_most(interval: Duration) -> Duration {
        Duration::from_secs(interval.as_secs_f64().ceil() as u64).max(Duration::from_secs(2))
    }

    fn start() -> Self {
        let pace = if MEMBERS == 1 {
            Pace::Default
        } else {
            Pace::Fast
        };
        Cluster {
            cluster: EtcdCluster::sized(MEMBERS, pace),
        }
    }

    fn with_password(password: &str) -> Option<Self> {
        let mut etcd = Self::start();
        etcd.enable_auth(password);
        Some(etcd)
    }

    fn url_at(authority: &str) -> String {
        format!("etcd://{authority}")
    }

    fn malformed() -> Vec<(String, String)> {
        vec![
            ("etcd://u:hunter2@127.0.0.1:1?tls=1".into(), "tls".into()),
            (
                "etcd://127.0.0.1:1?cacert=/nonexistent/ca.pem".into(),
                "/nonexistent/ca.pem".into(),
            ),
        ]
    }

    /// Tokens are revisions kept in the members' data, which a crash keeps: a wipe changes
    /// nothing here.
    fn restart(&mut self, _wipe: bool) {
        self.cluster.restart_all();
    }

    fn counter(&self, _name: &str) -> Counter {
        let out = self.etcdctl(&["endpoint", "status", "-w", "json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("etcdctl endpoint status: {}", text(&out.stderr)));
        let revision = status[0]["Status"]["header"]["revision"]
            .as_u64()
            .unwrap_or_else(|| panic!("no revision in {status}"));
        Counter::AtLeast(revision)
    }
}
