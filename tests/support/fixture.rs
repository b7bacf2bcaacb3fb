//! A backend under test: what the conformance suite needs to start one, reach it, break it and
//! look inside it. A networked fixture is a real server the test starts on free loopback ports in
//! a temporary directory, ready when it answers (polled), killed on drop; the file fixture is a
//! private state directory. Adding a backend is one implementation of [`Fixture`] (with
//! [`Reachable`], which a one-server backend or a cluster gets from `SingleServer` or `Members`)
//! and one line in `tests/conformance.rs`.
//!
//! Capabilities say where a backend's contract differs; the scenarios then assert the documented
//! alternative instead of skipping (a kernel lock never expires: a crashed holder frees it at once).

use std::net::TcpListener;
use std::time::Duration;

use super::proxy::Proxy;
use super::server_process::ServerProcess;

/// The counter a backend keeps for a name's fencing tokens, as read from the server.
pub enum Counter {
    /// The last token issued.
    Exact(u64),
    /// The backend's revision, which every token issued so far is at most (etcd's tokens are
    /// revisions).
    AtLeast(u64),
}

/// How tests reach a backend, and which processes a fault hits: written once for every backend
/// that is one server ([`SingleServer`](super::single_server::SingleServer)) and once for every
/// cluster ([`Members`](super::cluster::Members)).
pub trait Reachable {
    /// The backend URL that reaches it (with the password, if it has one).
    fn url(&self) -> String;

    /// A fault proxy in front of the server and the URL through it; `None` without a network.
    fn proxied(&self) -> Option<(Proxy, String)>;

    /// Every server process behind the backend (none for a state directory): a fault hits them
    /// all.
    fn servers(&self) -> Vec<&ServerProcess>;
}

/// The capabilities default to what the contract promises on a networked backend; a fixture
/// overrides what its backend does differently.
pub trait Fixture: Reachable + Sized {
    /// The TTL its scenarios ask for (etcd raises shorter leases to 2 s, so its fixtures use 3 s).
    const TTL: &'static str = "2s";
    /// Leases run out by the backend's clock when no renewal comes (not for a kernel lock, which
    /// lasts exactly as long as its holder process).
    const EXPIRES: bool = true;
    /// `release --force` breaks a holder (a kernel lock cannot be stolen).
    const FORCE_RELEASE: bool = true;
    /// How soon after `release --force` every holder's command is stopped (told at once; the
    /// bound leaves room for a slow test server).
    const REVOCATION_NOTICE: Duration = Duration::from_secs(1);
    /// Waiters are served in arrival order (promised on the networked backends).
    const FIFO: bool = true;
    /// The backend has a clock that `lockrun drill` can compare with the host's.
    const SERVER_CLOCK: bool = true;

    /// The longest `--min-interval INTERVAL` may keep a name from running again on this backend:
    /// the interval itself, where the backend reads a fine clock.
    fn interval_kept_at_most(interval: Duration) -> Duration {
        interval
    }

    /// [`Fixture::TTL`] as a duration.
    fn ttl() -> Duration {
        humantime::parse_duration(Self::TTL).expect("a fixture's TTL is a duration")
    }

    /// A `--ttl` of at least `least`: [`Fixture::TTL`] where that is longer.
    fn ttl_at_least(least: Duration) -> String {
        format!("{}ms", Self::ttl().max(least).as_millis())
    }

    /// Starts a fresh backend that no other test uses.
    fn start() -> Self;

    /// Starts one whose clients must give `password`; `None` when the backend has no passwords.
    fn with_password(password: &str) -> Option<Self>;

    /// A URL of this backend's scheme for `authority` (`userinfo@host:port`), as a user would
    /// write it.
    fn url_at(authority: &str) -> String;

    /// A URL that nobody answers, and the endpoint a message about it must name.
    fn unreachable() -> (String, String) {
        let endpoint = format!("127.0.0.1:{}", free_port());
        (Self::url_at(&format!("u:hunter2@{endpoint}")), endpoint)
    }

    /// Malformed URLs particular to this backend, each with a word its usage error must contain.
    fn malformed() -> Vec<(String, String)> {
        Vec::new()
    }

    /// The backend goes away under its clients (SIGKILL; a state directory overrides it).
    fn kill(&mut self) {
        for server in self.servers() {
            server.kill();
        }
    }

    /// The server freezes (SIGSTOP): connections stay open, nothing answers.
    fn pause(&self) {
        for server in self.servers() {
            server.pause();
        }
    }

    /// Undoes [`Fixture::pause`].
    fn resume(&self) {
        for server in self.servers() {
            server.resume();
        }
    }

    /// A crash and a start again on the same ports. With `wipe`, the backend comes back having
    /// lost what its contract says tokens must survive losing (Redis: every key; a state
    /// directory: what a reboot loses); without, it keeps its data.
    fn restart(&mut self, wipe: bool);

    /// The token counter NAME has on the backend.
    fn counter(&self, name: &str) -> Counter;
}

/// A loopback port that nothing listens on right now.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct ports free on loopback: each probe's listener is kept until all are taken, so
/// the kernel cannot hand the same port out twice.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("probe a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}
