//! A private `redis-server` per test: on a free loopback port, in a temporary directory, with
//! persistence off (so a restart comes back empty), ready when it answers PING (polled, never a
//! fixed sleep), killed on drop. It can be restarted on the same port, and paused with SIGSTOP.
//! A TLS variant serves `rediss://` with a certificate from a throw-away CA made with `openssl`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::common::wait_until;

/// A running `redis-server` owned by one test.
pub struct RedisServer {
    port: u16,
    password: Option<String>,
    /// The directory holding `ca.crt`, `server.crt` and `server.key`, for a TLS server.
    tls: Option<PathBuf>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

#[expect(
    dead_code,
    reason = "issue 19: the frozen-server tests do not cover this backend yet"
)]
impl RedisServer {
    /// Starts a server without a password.
    pub fn start() -> Self {
        Self::start_with(None, None)
    }

    /// Starts a server that requires `password`.
    pub fn with_password(password: &str) -> Self {
        Self::start_with(Some(password.to_owned()), None)
    }

    /// Starts a TLS-only server with the certificates in `certs` (see [`make_certificates`]).
    pub fn with_tls(certs: &Path) -> Self {
        Self::start_with(None, Some(certs.to_owned()))
    }

    fn start_with(password: Option<String>, tls: Option<PathBuf>) -> Self {
        // Another process may take the port between probing and binding: try a few.
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port(),
                password: password.clone(),
                tls: tls.clone(),
                dir: tempfile::tempdir().expect("temp dir"),
                child: None,
            };
            if server.launch() {
                return server;
            }
        }
        panic!("redis-server did not start (is it installed?)");
    }

    /// Spawns the server on `self.port` and waits until it answers; false if it exited.
    fn launch(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some(certs) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(certs.join("server.crt"))
                .arg("--tls-key-file")
                .arg(certs.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(certs.join("ca.crt"))
                .args(["--tls-auth-clients", "no"]),
        };
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            cmd.args(["--requirepass", password]);
        }
        let mut child = cmd.spawn().expect("spawn redis-server");
        let ready = wait_until(Duration::from_secs(10), || {
            if child.try_wait().ok().flatten().is_some() {
                return true;
            }
            match self.tls {
                // Listening is as much as can be seen without a TLS client.
                Some(_) => TcpStream::connect(("127.0.0.1", self.port)).is_ok(),
                None => answers_ping(self.port),
            }
        });
        if !ready || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        self.child = Some(child);
        true
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (with the password, if any).
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server running").id() as i32
    }

    /// Kills the server (SIGKILL: no chance to save anything).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts an empty one on the same port.
    pub fn restart_empty(&mut self) {
        self.kill();
        assert!(
            self.launch(),
            "redis-server did not restart on port {}",
            self.port
        );
    }

    /// Freezes the server (SIGSTOP): it keeps its connections but answers nothing.
    pub fn pause(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGSTOP).expect("SIGSTOP redis-server");
    }

    pub fn resume(&self) {
        kill(Pid::from_raw(self.pid()), Signal::SIGCONT).expect("SIGCONT redis-server");
    }

    /// Runs `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &self.port.to_string()]);
        if let Some(password) = &self.password {
            cmd.env("REDISCLI_AUTH", password);
        }
        cmd.args(args).output().expect("run redis-cli")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server ignores SIGTERM; SIGKILL works regardless.
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        }
        self.kill();
    }
}

/// Makes a throw-away CA and a server certificate for `localhost` and `127.0.0.1` in `dir`
/// (`ca.crt`, `server.crt`, `server.key`); false if `openssl` is missing or fails.
pub fn make_certificates(dir: &Path) -> bool {
    let openssl = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let _ = std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=lockrun test CA",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
    ])
}

/// A loopback port that nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("probe a free port")
        .port()
}

/// Whether something on `port` answers a RESP PING (an auth error counts: the server is up).
fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 64];
    matches!(stream.read(&mut reply), Ok(n) if n > 0 && (reply[0] == b'+' || reply[0] == b'-') && !reply[..n].starts_with(b"-LOADING"))
}

impl super::world::Server for RedisServer {
    fn start() -> Self {
        RedisServer::start()
    }

    fn url(&self) -> String {
        RedisServer::url(self)
    }
}
