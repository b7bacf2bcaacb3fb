//! A server process a fixture started, and how every fixture starts, stops and freezes one: spawned
//! from its command and polled until it is ready (never a fixed sleep), retried on fresh ports when
//! another process took a probed one, killed on drop. Signals reach the server and every process it
//! started (PostgreSQL's backends lead process groups of their own, so a group signal would miss
//! them), and a kill waits until none of them is left (an orphan could hold a port or shared memory
//! that a restart needs).

use std::fs::File;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::wait::{alive, wait_until};

/// How many times a fixture tries fresh ports before it gives up.
const ATTEMPTS: usize = 5;

/// Another process may take a probed port between probing and the server binding it: `attempt`
/// (which probes its ports afresh each time, and is given the attempt's number) is tried a few
/// times; the first server it starts, or `None`.
pub fn on_fresh_ports<T>(attempt: impl FnMut(usize) -> Option<T>) -> Option<T> {
    (0..ATTEMPTS).find_map(attempt)
}

/// A server process owned by a fixture; killed (SIGKILL) by [`ServerProcess::kill`] or on drop.
pub struct ServerProcess {
    /// `None` once killed.
    child: Mutex<Option<Child>>,
    /// What it is, for messages (`redis-server`, `postgres`…).
    name: &'static str,
}

impl ServerProcess {
    /// Spawns `cmd` (`name` says what it runs, and how to install it, if that needs saying).
    pub fn spawn(cmd: &mut Command, name: &'static str) -> Self {
        let child = cmd
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {name}: {err}"));
        ServerProcess {
            child: Mutex::new(Some(child)),
            name,
        }
    }

    /// Spawns `cmd`, a server that is to listen on `port`, and polls `ready` for up to `timeout`;
    /// `None` (and the process killed) if it exited or never got ready. Ready also means that
    /// this server holds the port: the answer `ready` saw may come from another test's server
    /// that took the port first, while this one fails to bind it.
    pub fn spawn_ready(
        cmd: &mut Command,
        name: &'static str,
        port: u16,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Option<Self> {
        let server = Self::spawn(cmd, name);
        let got_ready = wait_until(timeout, || {
            !server.running() || (ready() && listens_on(&server.processes(), port))
        });
        (got_ready && server.running()).then_some(server)
    }

    /// Whether `slot` holds a process that is running.
    pub fn runs_in(slot: &Option<Self>) -> bool {
        slot.as_ref().is_some_and(Self::running)
    }

    /// Whether the process is running: neither killed nor exited.
    pub fn running(&self) -> bool {
        self.child()
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_none())
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The server first, then every process it started; none once it is killed.
    fn processes(&self) -> Vec<i32> {
        let Some(server) = self.child().as_ref().map(|child| child.id() as i32) else {
            return Vec::new();
        };
        let mut pids = vec![server];
        pids.extend(children_of(server));
        pids
    }

    /// Freezes the server and what it started (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        let mut processes = self.processes().into_iter();
        if let Some(server) = processes.next() {
            signal(server, Signal::SIGSTOP)
                .unwrap_or_else(|err| panic!("SIGSTOP {}: {err}", self.name));
        }
        // A helper may have exited since it was listed.
        for pid in processes {
            let _ = signal(pid, Signal::SIGSTOP);
        }
    }

    /// Undoes [`ServerProcess::pause`], the processes the server started first.
    pub fn resume(&self) {
        for pid in self.processes().into_iter().rev() {
            let _ = signal(pid, Signal::SIGCONT);
        }
    }

    /// SIGKILL (no shutdown: crash recovery on a restart), continued in case it was paused, then
    /// waits until the server and everything it started are gone. Once killed, it stays so.
    pub fn kill(&self) {
        let processes = self.processes();
        let Some(mut child) = self.child().take() else {
            return;
        };
        for &pid in &processes {
            let _ = signal(pid, Signal::SIGKILL);
            let _ = signal(pid, Signal::SIGCONT);
        }
        let _ = child.wait();
        wait_until(Duration::from_secs(10), || {
            processes.iter().all(|&pid| !alive(pid))
        });
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether one of `pids` has a TCP socket listening on `port` (IPv4 or IPv6): the listening
/// sockets' inodes from `/proc/net/tcp{,6}`, found among the processes' descriptors.
fn listens_on(pids: &[i32], port: u16) -> bool {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            // `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
            // inode`; a port in hex after the address's last `:`, state 0A = LISTEN.
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|address| address.rsplit(':').next())
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            if local_port == Some(port) && fields.get(3) == Some(&"0A") {
                inodes.extend(fields.get(9).map(|inode| format!("socket:[{inode}]")));
            }
        }
    }
    pids.iter().any(|pid| {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
        fds.into_iter().flatten().flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| inodes.contains(target.to_string_lossy().as_ref()))
        })
    })
}

fn signal(pid: i32, signal: Signal) -> nix::Result<()> {
    kill(Pid::from_raw(pid), signal)
}

/// The processes whose parent is `parent`.
pub fn children_of(parent: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the fields after the last `)`.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}

/// A connection to a server on loopback `port` that has been sent `request` and waits up to
/// `timeout` for each read of the answer; `None` if nothing accepts it or the request cannot be
/// sent.
pub fn sent(port: u16, request: &[u8], timeout: Duration) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.write_all(request).ok()?;
    Some(stream)
}

/// `path` opened for appending (created if missing), for a server's output.
pub fn append_log(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|err| panic!("open {}: {err}", path.display()))
}

#[test]
fn a_port_counts_as_held_only_by_the_process_listening_on_it() {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert!(listens_on(&[std::process::id() as i32], port));
    assert!(!listens_on(&[1], port), "init does not hold it");
}
