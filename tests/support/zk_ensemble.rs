//! Private ZooKeeper servers per test (Debian's `zookeeper` package, run straight from its jar —
//! never a system service): one standalone server, or a three-member ensemble, on free loopback
//! ports (client, peer, election), data in a temporary directory, killed on drop. `tickTime` is
//! 500 ms, so session timeouts from 1 s to 10 s are granted; the admin server is off. A member is
//! ready when it answers the `srvr` four-letter word with its mode (standalone, leader or
//! follower: polled, never a fixed sleep); the members of an ensemble start in parallel. A member
//! can be killed and restarted on its ports with its data.
//!
//! As a [`Fixture`], [`ZooKeeper<1>`] is the standalone server; a fault (a kill, a pause with
//! SIGSTOP) hits every member.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cluster::{Cluster, MemberProcesses, Members};
use super::fixture::{Counter, Fixture, free_port};
use super::server_process::{ServerProcess, append_log, sent};
use super::wait::wait_until;

/// The server's jar (its manifest names the libraries it needs).
const JAR: &str = "/usr/share/java/zookeeper.jar";
/// The user name of the digest identity in URLs with a password.
pub const USER: &str = "lockrun";

struct Member {
    client_port: u16,
    peer_port: u16,
    election_port: u16,
}

/// A running standalone server or ensemble owned by one test.
pub struct ZkEnsemble {
    /// Declared first: killed (on drop) before their directory is removed.
    processes: MemberProcesses,
    members: Vec<Member>,
    dir: tempfile::TempDir,
    password: Option<String>,
    properties: Vec<String>,
}

impl ZkEnsemble {
    /// `size` members (1: standalone), started together, each serving.
    pub fn start(size: usize) -> Self {
        Self::start_with(size, &[])
    }

    /// [`ZkEnsemble::start`] with Java system properties (`-Dkey=value`) for every member.
    pub fn start_with(size: usize, properties: &[&str]) -> Self {
        Self::started(|_| {
            let ensemble = ZkEnsemble {
                processes: MemberProcesses::new(size),
                dir: tempfile::tempdir().expect("temp dir"),
                members: (0..size)
                    .map(|_| Member {
                        client_port: free_port(),
                        peer_port: free_port(),
                        election_port: free_port(),
                    })
                    .collect(),
                password: None,
                properties: properties.iter().map(|p| (*p).to_owned()).collect(),
            };
            for i in 0..size {
                ensemble.configure(i);
            }
            ensemble
        })
    }

    fn member_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}"))
    }

    /// Writes member `i`'s `zoo.cfg` and `myid`.
    fn configure(&self, i: usize) {
        let dir = self.member_dir(i);
        std::fs::create_dir_all(dir.join("data")).expect("member data dir");
        let member = &self.members[i];
        let mut cfg = format!(
            "tickTime=500\ninitLimit=10\nsyncLimit=4\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nadmin.enableServer=false\nforceSync=no\n\
             maxClientCnxns=0\n4lw.commands.whitelist=srvr,ruok,wchp,dump\n",
            dir.join("data").display(),
            member.client_port
        );
        if self.members.len() > 1 {
            for (id, m) in self.members.iter().enumerate() {
                cfg.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    id + 1,
                    m.peer_port,
                    m.election_port
                ));
            }
            std::fs::write(dir.join("data/myid"), format!("{}\n", i + 1)).expect("myid");
        }
        std::fs::write(dir.join("zoo.cfg"), cfg).expect("zoo.cfg");
    }

    /// Member `i`'s answer to a four-letter word, if it answers.
    pub fn four_letters(&self, i: usize, word: &str) -> Option<String> {
        let port = self.members[i].client_port;
        let mut stream = sent(port, word.as_bytes(), Duration::from_secs(2))?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        Some(answer)
    }

    /// Member `i`'s mode (`standalone`, `leader`, `follower`) while it serves.
    pub fn mode(&self, i: usize) -> Option<String> {
        let answer = self.four_letters(i, "srvr")?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    }

    /// The member that leads (0 for a standalone server), once one does.
    pub fn leader(&self) -> usize {
        let mut found = None;
        let led = wait_until(Self::READY, || {
            found = (0..self.members.len())
                .find(|&i| matches!(self.mode(i).as_deref(), Some("leader" | "standalone")));
            found.is_some()
        });
        assert!(led, "no member leads");
        found.unwrap_or(0)
    }

    /// How many znodes member `i` holds.
    pub fn node_count(&self, i: usize) -> u64 {
        let answer = self.four_letters(i, "srvr").expect("srvr answered");
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Node count: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no node count in {answer}"))
    }

    /// The last zxid member `i` has seen.
    fn zxid(&self, i: usize) -> u64 {
        let answer = self.four_letters(i, "srvr").expect("srvr answered");
        let hex = answer
            .lines()
            .find_map(|l| l.strip_prefix("Zxid: 0x"))
            .unwrap_or_else(|| panic!("no zxid in {answer}"));
        u64::from_str_radix(hex.trim(), 16).expect("a hex zxid")
    }

    /// Starts member `i` again on its ports, with its data.
    pub fn restart_member(&mut self, i: usize) {
        self.kill_member(i);
        self.launch(i);
    }
}

impl Members for ZkEnsemble {
    const SCHEME: &'static str = "zk";
    const NAME: &'static str = "zookeeper";
    const PACKAGE: &'static str = "the zookeeper package, with a JRE";
    const READY: Duration = Duration::from_secs(60);

    fn size(&self) -> usize {
        self.members.len()
    }

    fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// `USER:PASSWORD@`, or nothing.
    fn userinfo(&self) -> String {
        self.password
            .as_ref()
            .map_or_else(String::new, |password| format!("{USER}:{password}@"))
    }

    fn processes(&self) -> &MemberProcesses {
        &self.processes
    }

    fn processes_mut(&mut self) -> &mut MemberProcesses {
        &mut self.processes
    }

    /// With its configuration.
    fn launch(&mut self, i: usize) {
        let dir = self.member_dir(i);
        let log = append_log(&dir.join("server.log"));
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .args(["-cp", JAR, "-Dzookeeper.admin.enableServer=false"])
            .args(&self.properties)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        let process = ServerProcess::spawn(&mut cmd, "java (is a JRE installed?)");
        self.processes.set(i, process);
    }

    /// It answers `srvr` with its mode.
    fn serving(&self, i: usize) -> bool {
        self.mode(i).is_some()
    }
}

/// A ZooKeeper of `MEMBERS` members as a backend under test.
pub type ZooKeeper<const MEMBERS: usize> = Cluster<ZkEnsemble, MEMBERS>;

impl<const MEMBERS: usize> Fixture for ZooKeeper<MEMBERS> {
    fn start() -> Self {
        Cluster {
            cluster: ZkEnsemble::start(MEMBERS),
        }
    }

    /// Digest authentication: the first run creates the lock tree with an ACL for its identity,
    /// so a wrong password is another identity, refused.
    fn with_password(password: &str) -> Option<Self> {
        let mut zk = Self::start();
        zk.cluster.password = Some(password.to_owned());
        Some(zk)
    }

    fn url_at(authority: &str) -> String {
        format!("zk://{authority}")
    }

    fn malformed() -> Vec<(String, String)> {
        vec![
            ("zk://u:hunter2@127.0.0.1:1?x=1".into(), "x".into()),
            ("zk://u:hunter2@127.0.0.1:1/a/../b".into(), "chroot".into()),
            ("zk://u@127.0.0.1:1".into(), "USER:PASS".into()),
        ]
    }

    /// Tokens are zxids, kept in the members' transaction logs, which a crash keeps: a wipe
    /// changes nothing here.
    fn restart(&mut self, _wipe: bool) {
        self.cluster.restart_all();
    }

    fn counter(&self, _name: &str) -> Counter {
        Counter::AtLeast(self.cluster.zxid(self.cluster.leader()))
    }
}
