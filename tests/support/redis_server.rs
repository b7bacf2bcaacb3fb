//! A private `redis-server` per test (never one that happens to run on the machine): on a free
//! loopback port, in a temporary directory, without periodic saves, ready when it answers PING
//! (polled), killed on drop. It can be killed, paused with SIGSTOP, and restarted on the same
//! port with its keys (saved just before the crash) or without any. A TLS variant serves
//! `rediss://` with throw-away certificates.

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::fixture::{Counter, Fixture};
use super::server_process::{ServerProcess, sent};
use super::single_server::SingleServer;
use super::wait::answer;

/// How long redis-server may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A running `redis-server` owned by one test.
pub struct RedisServer {
    /// Declared first: killed (on drop) before its directory is removed.
    process: Option<ServerProcess>,
    port: u16,
    password: Option<String>,
    /// The directory holding `ca.crt`, `server.crt` and `server.key`, for a TLS server.
    tls: Option<PathBuf>,
    /// What to preload (see `tools::faketime_for_redis`) and the file holding the clock offset,
    /// for a server whose wall clock a test steps.
    clock: Option<(String, PathBuf)>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a TLS-only server with the certificates in `certs` (see `support::certs`).
    pub fn with_tls(certs: &Path) -> Self {
        Self::start_with(None, Some(certs.to_owned()))
    }

    /// Starts a server whose wall clock (`TIME`, key expiry) is faked through libfaketime, with
    /// `preload` as `tools::faketime_for_redis` gives it, offset by what `offset` holds (`+0`,
    /// `+3600`, `-5`…), re-read on every call, so that writing the file steps the server's clock
    /// while it runs. Its monotonic clock is left alone.
    pub fn with_faketime(preload: &str, offset: &Path) -> Self {
        Self::start_as(None, None, Some((preload.to_owned(), offset.to_owned())))
    }

    fn start_with(password: Option<String>, tls: Option<PathBuf>) -> Self {
        Self::start_as(password, tls, None)
    }

    fn start_as(
        password: Option<String>,
        tls: Option<PathBuf>,
        clock: Option<(String, PathBuf)>,
    ) -> Self {
        let mut server = RedisServer {
            port: 0,
            password,
            tls,
            clock,
            dir: tempfile::tempdir().expect("temp dir"),
            process: None,
        };
        server.launch_on_fresh_ports();
        server
    }

    /// The `redis-server` command for a server on `self.port`.
    fn command(&self) -> Command {
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
        // No periodic saves; a dump.rdb left in the directory (see `restart`) is loaded.
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--logfile")
            .arg(self.log_file())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            cmd.args(["--requirepass", password]);
        }
        if let Some((preload, offset)) = &self.clock {
            cmd.env("LD_PRELOAD", preload)
                .env("FAKETIME_TIMESTAMP_FILE", offset)
                .env("FAKETIME_NO_CACHE", "1")
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        cmd
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

    /// `redis-cli`'s answer to `args`, trimmed; fails the test if it did not answer.
    pub fn ask(&self, args: &[&str]) -> String {
        answer(&self.cli(args), &format!("redis-cli {args:?}"))
    }
}

impl SingleServer for RedisServer {
    const PROGRAM: &'static str = "redis-server";

    fn port(&self) -> u16 {
        self.port
    }

    fn url_on(&self, port: u16) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        }
    }

    fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// Ready when it answers PING (or, speaking only TLS, when it listens).
    fn launch(&mut self, port: u16) -> bool {
        self.port = port;
        let mut cmd = self.command();
        let tls = self.tls.is_some();
        self.process =
            ServerProcess::spawn_ready(&mut cmd, Self::PROGRAM, port, READY_WITHIN, || {
                match tls {
                    // Listening is as much as can be seen without a TLS client.
                    true => TcpStream::connect(("127.0.0.1", port)).is_ok(),
                    false => answers_ping(port),
                }
            });
        self.process.is_some()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }
}

impl Fixture for RedisServer {
    /// A server without a password.
    fn start() -> Self {
        Self::start_with(None, None)
    }

    fn with_password(password: &str) -> Option<Self> {
        Some(Self::start_with(Some(password.to_owned()), None))
    }

    fn url_at(authority: &str) -> String {
        format!("redis://{authority}")
    }

    /// Keeping the keys: saved to `dump.rdb` just before the crash, loaded at the start. A marker
    /// key saved with them shows that the dump was written and read back (the keys themselves may
    /// change around the save, and a redlock master may have none: a won round does not wait for
    /// every master); it is removed again, so that tests see only their own keys.
    fn restart(&mut self, wipe: bool) {
        const MARKER: &str = "fixture:restart-marker";
        let dump = self.dir.path().join("dump.rdb");
        if wipe {
            let _ = std::fs::remove_file(&dump);
        } else {
            assert_eq!(self.ask(&["SET", MARKER, "1"]), "OK");
            assert_eq!(self.ask(&["SAVE"]), "OK");
        }
        self.relaunch();
        if wipe {
            let after = self.ask(&["DBSIZE"]);
            assert_eq!(after, "0", "a wiping restart kept {after} keys");
        } else {
            assert_eq!(
                self.ask(&["DEL", MARKER]),
                "1",
                "a restart lost the keys it saved"
            );
        }
    }

    fn counter(&self, name: &str) -> Counter {
        let token = self.ask(&["HGET", &format!("lockrun:{{{name}}}:meta"), "token"]);
        // Stored as an exact integer, never in floating-point notation.
        Counter::Exact(token.parse().expect("the stored token is an integer"))
    }
}

/// Whether something on `port` answers a RESP PING (an auth error counts: the server is up).
fn answers_ping(port: u16) -> bool {
    let Some(mut stream) = sent(port, b"*1\r\n$4\r\nPING\r\n", Duration::from_secs(1)) else {
        return false;
    };
    let mut reply = [0u8; 64];
    matches!(stream.read(&mut reply), Ok(n) if n > 0 && (reply[0] == b'+' || reply[0] == b'-') && !reply[..n].starts_with(b"-LOADING"))
}
