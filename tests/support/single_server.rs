//! A backend that is one server process on one loopback port (MariaDB, PostgreSQL, Redis,
//! dynalite), written once for them all: started on fresh ports, reached directly or through a
//! fault proxy in front of that port, and launched again on the same port after a crash, with the
//! server's log in the message when it does not come up.

use std::path::PathBuf;

use super::fixture::{Reachable, free_port};
use super::proxy::Proxy;
use super::server_process::{ServerProcess, on_fresh_ports};

/// What a one-server fixture says about itself; [`Reachable`] follows from it.
pub trait SingleServer {
    /// What it runs, for messages (`mariadbd`, `postgres`…).
    const PROGRAM: &'static str;

    /// The port it listens on.
    fn port(&self) -> u16;

    /// The URL for a client connecting on `port` (the server's own, or a proxy's).
    fn url_on(&self, port: u16) -> String;

    /// The running server; `None` before it started or once it was killed.
    fn process(&self) -> Option<&ServerProcess>;

    /// Spawns the server on `port`, which becomes its port, and waits until it is ready; false if
    /// it exited or never got ready.
    fn launch(&mut self, port: u16) -> bool;

    /// The file the server writes its log to.
    fn log_file(&self) -> PathBuf;

    /// What the server has logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    /// Launches the server on fresh ports until one works; fails the test if none did.
    fn launch_on_fresh_ports(&mut self) {
        let started = on_fresh_ports(|_| self.launch(free_port()).then_some(()));
        assert!(
            started.is_some(),
            "{} did not start; log:\n{}",
            Self::PROGRAM,
            self.log()
        );
    }

    /// A crash (SIGKILL) and a launch again on the same port, with whatever data the server keeps
    /// on disk; fails the test if it does not come back.
    fn relaunch(&mut self) {
        if let Some(process) = self.process() {
            process.kill();
        }
        let port = self.port();
        assert!(
            self.launch(port),
            "{} did not restart on port {port}; log:\n{}",
            Self::PROGRAM,
            self.log()
        );
    }
}

impl<S: SingleServer> Reachable for S {
    fn url(&self) -> String {
        self.url_on(self.port())
    }

    fn proxied(&self) -> Option<(Proxy, String)> {
        Some(Proxy::in_front_of(self.port(), |port| self.url_on(port)))
    }

    fn servers(&self) -> Vec<&ServerProcess> {
        self.process().into_iter().collect()
    }
}
