//! A real PgBouncer per test, in front of the test's own PostgreSQL server: transaction pooling
//! on a free loopback port, its configuration and log in a temporary directory, run as the
//! server's user when the tests run as root (PgBouncer refuses to run as root), ready when a
//! query through it answers (polled, never a fixed sleep), killed on drop. [`Pooled`] is the pair
//! as one [`Fixture`], so the conformance suite runs behind PgBouncer too; [`PooledListening`]
//! also names the server itself (`listen=`), so the suite runs with waiters listening there.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::fixture::{Counter, Fixture, Reachable, free_port};
use super::postgres_server::{PgServer, SUPERUSER};
use super::proxy::Proxy;
use super::server_process::{ServerProcess, on_fresh_ports};
use super::server_user::ServerUser;
use super::single_server::SingleServer;

/// How a PgBouncer is configured.
#[derive(Clone, Debug)]
pub struct Options {
    /// `max_client_conn`: client connections PgBouncer accepts.
    pub max_client_conn: u32,
    /// `default_pool_size`: server connections per user and database.
    pub pool_size: u32,
    /// Whether `options` is in `ignore_startup_parameters` (as lockrun's README says it must).
    pub ignore_options: bool,
    /// The superuser's password, which PgBouncer then checks (SCRAM) and gives the server; no
    /// password means trust.
    pub password: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_client_conn: 500,
            pool_size: 20,
            ignore_options: true,
            password: None,
        }
    }
}

/// A running `pgbouncer` owned by one test.
pub struct PgBouncer {
    /// Held to be killed on drop (declared first: before its directory is removed).
    _process: ServerProcess,
    port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Transaction pooling in front of `server`, configured as lockrun's README says (with the
    /// [`Options`] a test changes); its database `aliased` is the server's `postgres`.
    pub fn with(server: &PgServer, options: Options) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let owner = ServerUser::find();
        owner.own(dir.path());
        // PgBouncer's trust still wants every user listed.
        let password = options.password.as_deref().unwrap_or_default();
        std::fs::write(
            dir.path().join("users.txt"),
            format!("\"{SUPERUSER}\" \"{password}\"\n\"app\" \"\"\n\"other\" \"\"\n"),
        )
        .expect("users.txt");
        let auth = match options.password {
            Some(_) => "scram-sha-256",
            None => "trust",
        };
        let started = on_fresh_ports(|_| {
            let port = free_port();
            let ini = dir.path().join("pgbouncer.ini");
            let ignored = match options.ignore_options {
                true => "extra_float_digits,options",
                false => "extra_float_digits",
            };
            std::fs::write(
                &ini,
                format!(
                    "[databases]\n\
                     aliased = host=127.0.0.1 port={server_port} dbname=postgres\n\
                     * = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\n\
                     listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                     auth_type = {auth}\nauth_file = {users}\npool_mode = transaction\n\
                     max_client_conn = {max}\ndefault_pool_size = {pool}\n\
                     server_login_retry = 1\n\
                     ignore_startup_parameters = {ignored}\nlogfile = {log}\n",
                    server_port = server.port(),
                    users = dir.path().join("users.txt").display(),
                    max = options.max_client_conn,
                    pool = options.pool_size,
                    log = dir.path().join("pgbouncer.log").display(),
                ),
            )
            .expect("pgbouncer.ini");
            std::fs::set_permissions(&ini, std::fs::Permissions::from_mode(0o644)).unwrap();
            let mut cmd = Command::new(program());
            owner
                .run(&mut cmd)
                .arg(&ini)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0);
            let psql = server.bin().join("psql");
            let ready = || {
                Command::new(&psql)
                    .args(["-X", "-q", "-A", "-t", "-h", "127.0.0.1"])
                    .args(["-p", &port.to_string(), "-U", SUPERUSER, "-d", "postgres"])
                    .args(["-c", "SELECT 1"])
                    .env("PGPASSWORD", password)
                    .env_remove("PGOPTIONS")
                    .output()
                    .is_ok_and(|out| out.status.success())
            };
            let name = "pgbouncer (apt-get install pgbouncer)";
            ServerProcess::spawn_ready(&mut cmd, name, port, Duration::from_secs(10), ready)
                .map(|process| (process, port))
        });
        match started {
            Some((process, port)) => PgBouncer {
                _process: process,
                port,
                dir,
            },
            None => panic!(
                "pgbouncer did not start; log:\n{}",
                std::fs::read_to_string(dir.path().join("pgbouncer.log")).unwrap_or_default()
            ),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What PgBouncer logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

/// `pgbouncer`, which Debian installs in /usr/sbin (not on every user's PATH).
fn program() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/pgbouncer");
    match sbin.exists() {
        true => sbin,
        false => PathBuf::from("pgbouncer"),
    }
}

/// A PostgreSQL server with a PgBouncer in front: lockrun is given PgBouncer's URL, and with
/// `LISTEN` also the server's own address (`listen=`), where waiters near their turn listen.
pub struct BehindPgBouncer<const LISTEN: bool> {
    // Declared first: dropped (killed) before the server behind it.
    pub bouncer: PgBouncer,
    pub server: PgServer,
}

/// Behind PgBouncer, waiters looking at the line.
pub type Pooled = BehindPgBouncer<false>;
/// Behind PgBouncer, waiters near their turn listening at the server itself.
pub type PooledListening = BehindPgBouncer<true>;

impl<const LISTEN: bool> BehindPgBouncer<LISTEN> {
    /// PgBouncer, configured with `options`, in front of a fresh server (with the password
    /// there too, if the options have one).
    pub fn with(options: Options) -> Self {
        let server = match &options.password {
            Some(password) => PgServer::with_password(password).expect("postgres has passwords"),
            None => PgServer::start(),
        };
        BehindPgBouncer {
            bouncer: PgBouncer::with(&server, options),
            server,
        }
    }

    /// The URL of the server through `port` (PgBouncer's, or a proxy's in front of it).
    fn url_through(&self, port: u16) -> String {
        match LISTEN {
            true => listening_at(&self.server.url_on(port), self.server.port()),
            false => self.server.url_on(port),
        }
    }
}

/// `url` with `listen=` naming `127.0.0.1:port` as the server itself (the server's port, or a
/// proxy's in front of it).
pub fn listening_at(url: &str, port: u16) -> String {
    format!("{url}?listen=127.0.0.1:{port}")
}

/// Clients reach the server through PgBouncer, through the fault proxy too; the faults hit the
/// server behind it (and the connections to it a listening waiter opens, which no proxy sits on).
impl<const LISTEN: bool> Reachable for BehindPgBouncer<LISTEN> {
    fn url(&self) -> String {
        self.url_through(self.bouncer.port())
    }

    fn proxied(&self) -> Option<(Proxy, String)> {
        Some(Proxy::in_front_of(self.bouncer.port(), |port| {
            self.url_through(port)
        }))
    }

    fn servers(&self) -> Vec<&ServerProcess> {
        self.server.servers()
    }
}

/// The server's capabilities, reached through PgBouncer: the faults hit the server behind it
/// (PgBouncer keeps its clients' connections while the server goes away and comes back), and the
/// fault proxy sits between lockrun and PgBouncer.
impl<const LISTEN: bool> Fixture for BehindPgBouncer<LISTEN> {
    fn start() -> Self {
        Self::with(Options::default())
    }

    fn with_password(password: &str) -> Option<Self> {
        Some(Self::with(Options {
            password: Some(password.to_owned()),
            ..Options::default()
        }))
    }

    fn url_at(authority: &str) -> String {
        PgServer::url_at(authority)
    }

    fn restart(&mut self, wipe: bool) {
        self.server.restart(wipe);
    }

    fn counter(&self, name: &str) -> Counter {
        self.server.counter(name)
    }
}
