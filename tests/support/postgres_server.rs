//! A private PostgreSQL cluster per test: `initdb` into a temporary directory, `postgres` on a free
//! loopback port with its socket in that directory and `fsync=off`, ready when `pg_isready` says
//! so (polled, never a fixed sleep), killed on drop. It can be killed (SIGKILL to the postmaster
//! and to every process it started — backends lead process groups of their own — so none lingers
//! on the shared memory) and restarted on the same port with the same data, and paused with
//! SIGSTOP. Its System V shared memory segment goes with it. When the tests run as root, the
//! server runs as the `postgres` user (or `nobody`), since PostgreSQL refuses to run as root.
//!
//! The token counter lives in a table that a crash keeps, so a wiping restart is a plain one.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::fixture::{Counter, Fixture};
use super::server_process::{ServerProcess, append_log};
use super::server_user::ServerUser;
use super::single_server::SingleServer;
use super::wait::answer;

/// How long a new PostgreSQL cluster may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The user name of the cluster's superuser.
pub const SUPERUSER: &str = "postgres";

/// A running `postgres` owned by one test.
pub struct PgServer {
    /// Declared first: killed (on drop) before its directory is removed.
    process: Option<ServerProcess>,
    port: u16,
    password: Option<String>,
    tls: bool,
    dir: tempfile::TempDir,
    bin: PathBuf,
    owner: ServerUser,
}

impl Drop for PgServer {
    /// Kills the server, then removes the System V shared memory segment that a killed postmaster
    /// leaves behind: the kernel allows 4,096 of them (`kernel.shmmni`), and a few hundred test
    /// runs had used them all up, after which no cluster could start ("could not create shared
    /// memory segment: No space left on device").
    fn drop(&mut self) {
        drop(self.process.take());
        remove_shared_memory(&self.dir.path().join("data"));
    }
}

/// Removes the System V shared memory segment a cluster's `postmaster.pid` names (its seventh
/// line holds the segment's key and id), if any.
fn remove_shared_memory(data: &std::path::Path) {
    let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return;
    };
    let id = pid_file
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|id| id.parse::<libc::c_int>().ok());
    if let Some(id) = id {
        // SAFETY: IPC_RMID takes no buffer; the segment is this test's own cluster's.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

impl PgServer {
    /// Starts a cluster that also accepts TLS, with a certificate for `127.0.0.1` signed by a
    /// private authority ([`PgServer::ca_file`]); callers check `tools::openssl` first.
    pub fn with_tls() -> Self {
        Self::start_with(None, true)
    }

    fn start_with(password: Option<String>, tls: bool) -> Self {
        let bin = bin_dir();
        let owner = ServerUser::find();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = PgServer {
            port: 0,
            password,
            tls,
            dir,
            bin,
            owner,
            process: None,
        };
        server.initdb();
        if tls {
            server.make_certificates();
        }
        server.launch_on_fresh_ports();
        server
    }

    fn initdb(&self) {
        let root = self.dir.path();
        self.owner.own(root);
        let mut cmd = self.as_owner(self.bin.join("initdb"));
        cmd.arg("-D").arg(root.join("data")).args([
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ]);
        match &self.password {
            Some(password) => {
                let file = root.join("pwfile");
                std::fs::write(&file, password).expect("write pwfile");
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                    .expect("pwfile mode");
                cmd.args(["-A", "scram-sha-256", "--pwfile"]).arg(&file);
            }
            None => {
                cmd.args(["-A", "trust"]);
            }
        }
        let out = cmd.output().expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(root.join("pwfile"));
    }

    /// A private authority and a server certificate for `127.0.0.1`, readable by the server.
    fn make_certificates(&self) {
        let root = self.dir.path();
        super::certs::make_in(root);
        for file in ["server.key", "server.crt"] {
            self.owner.own(&root.join(file));
        }
    }

    /// The PEM file of the authority that signed the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The `postgres` command for a server on `self.port`.
    fn command(&self) -> Command {
        let root = self.dir.path();
        let log = append_log(&self.log_file());
        let mut cmd = self.as_owner(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(root.join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", root.display()))
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=60", "-c", "shared_buffers=16MB"])
            // Dynamic shared memory in the data directory, not /dev/shm: a server the tests kill
            // with SIGKILL would otherwise leave its segments behind there.
            .args(["-c", "dynamic_shared_memory_type=mmap"]);
        if self.tls {
            cmd.args(["-c", "ssl=on"])
                .arg("-c")
                .arg(format!(
                    "ssl_cert_file={}",
                    root.join("server.crt").display()
                ))
                .arg("-c")
                .arg(format!(
                    "ssl_key_file={}",
                    root.join("server.key").display()
                ));
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            // Its own group, so a kill reaches every backend.
            .process_group(0);
        cmd
    }

    /// A command run as the server's user (when the tests run as root).
    fn as_owner(&self, program: PathBuf) -> Command {
        let mut cmd = Command::new(program);
        self.owner
            .run(&mut cmd)
            .env_remove("PGPASSWORD")
            .env("LC_ALL", "C");
        cmd
    }

    /// The directory of the server's programs (`psql`, `pg_ctl`, …).
    pub fn bin(&self) -> &std::path::Path {
        &self.bin
    }

    /// Runs one SQL text through `psql` (unaligned, tuples only) as the superuser.
    pub fn psql(&self, sql: &str) -> Output {
        self.psql_command(sql).output().expect("run psql")
    }

    /// The `psql` command that runs `sql`, to spawn.
    pub fn psql_command(&self, sql: &str) -> Command {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", SUPERUSER, "-d", "postgres", "-c", sql])
            .env_remove("PGPASSWORD");
        if let Some(password) = &self.password {
            cmd.env("PGPASSWORD", password);
        }
        cmd
    }

    /// `psql`'s output for `sql`, trimmed; panics if it failed.
    pub fn sql(&self, sql: &str) -> String {
        answer(&self.psql(sql), &format!("psql failed on {sql:?}"))
    }
}

impl SingleServer for PgServer {
    const PROGRAM: &'static str = "postgres";

    fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` (with the password, if any).
    fn url_on(&self, port: u16) -> String {
        match &self.password {
            Some(password) => {
                format!("postgres://{SUPERUSER}:{password}@127.0.0.1:{port}/postgres")
            }
            None => format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres"),
        }
    }

    /// The postmaster, whose backends a fault hits with it: none is left attached to the shared
    /// memory after a kill, which would stop a restart.
    fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// Ready when `pg_isready` says it accepts connections.
    fn launch(&mut self, port: u16) -> bool {
        self.port = port;
        let mut cmd = self.command();
        let isready = self.bin.join("pg_isready");
        self.process =
            ServerProcess::spawn_ready(&mut cmd, Self::PROGRAM, port, READY_WITHIN, || {
                Command::new(&isready)
                    .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
                    .status()
                    .is_ok_and(|s| s.success())
            });
        self.process.is_some()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }
}

impl Fixture for PgServer {
    /// A cluster that trusts every local connection.
    fn start() -> Self {
        Self::start_with(None, false)
    }

    fn with_password(password: &str) -> Option<Self> {
        Some(Self::start_with(Some(password.to_owned()), false))
    }

    fn url_at(authority: &str) -> String {
        format!("postgres://{authority}/postgres")
    }

    /// Starts the server again on the same port with the same data.
    fn restart(&mut self, _wipe: bool) {
        self.relaunch();
    }

    fn counter(&self, name: &str) -> Counter {
        let token = self.sql(&format!(
            "SELECT token FROM lockrun.names WHERE name = '{name}'"
        ));
        Counter::Exact(token.parse().expect("the stored token is a number"))
    }
}

/// The newest `/usr/lib/postgresql/*/bin` that has `initdb`.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("no PostgreSQL server under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}
