//! A private MariaDB server per test (Debian's `mariadb-server`; never the system service): a copy
//! of an initialised data directory in a temporary directory, `mariadbd` on a free loopback port
//! with its socket beside it, ready when it sends its greeting (polled, never a fixed sleep),
//! killed on drop. When the tests run as root, the server runs with `--user=root`.
//!
//! `mariadb-install-db` takes seconds, so it runs once into a template under the build's
//! temporary directory (`target/tmp`), kept between runs for the same server version, and each
//! test copies the template (about 20 MB with the small InnoDB files set here). Speed over
//! durability: `innodb_flush_log_at_trx_commit = 2` still survives a crash of the server process,
//! which is all the tests do to it.
//!
//! It can be killed (SIGKILL), paused (SIGSTOP), and restarted on the same port with its data —
//! or, wiping, with lockrun's rows deleted, as a restore from an old backup would leave them.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::fixture::{Counter, Fixture};
use super::server_process::{ServerProcess, sent};
use super::single_server::SingleServer;
use super::wait::{answer, text};

/// How long mariadbd may take to greet clients (InnoDB starts first).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The database the tests' URLs name.
pub const DATABASE: &str = "lockrun_test";
/// The user a password-protected server's clients log in as.
const APP_USER: &str = "app";

/// The InnoDB files kept small, for `mariadb-install-db` and `mariadbd` alike.
const SMALL: &[&str] = &[
    "--innodb-log-file-size=4M",
    "--innodb-data-file-path=ibdata1:4M:autoextend",
    "--innodb-autoextend-increment=1",
    "--innodb-undo-tablespaces=0",
    "--innodb-buffer-pool-size=32M",
    "--innodb-doublewrite=0",
    "--innodb-flush-log-at-trx-commit=2",
    "--skip-log-bin",
    "--skip-name-resolve",
];

/// A running `mariadbd` owned by one test.
pub struct MySqlServer {
    /// Declared first: killed (on drop) before its directory is removed.
    process: Option<ServerProcess>,
    port: u16,
    password: Option<String>,
    /// The directory holding `ca.crt`, `server.crt` and `server.key`, for a server that also
    /// accepts TLS.
    tls: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl MySqlServer {
    /// Starts a server that also accepts TLS, with the certificates in `certs` (see
    /// `support::certs`).
    pub fn with_tls(certs: &Path) -> Self {
        Self::start_with(None, Some(certs.to_owned()))
    }

    fn start_with(password: Option<String>, tls: Option<PathBuf>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        copy_dir(template(), &dir.path().join("data"));
        let mut server = MySqlServer {
            port: 0,
            password: None,
            tls,
            dir,
            process: None,
        };
        server.launch_on_fresh_ports();
        server.sql(&format!("CREATE DATABASE {DATABASE}"));
        if let Some(password) = &password {
            server.sql(&format!(
                "CREATE USER '{APP_USER}'@'%' IDENTIFIED BY '{password}'; \
                 GRANT ALL ON {DATABASE}.* TO '{APP_USER}'@'%'"
            ));
        }
        server.password = password;
        server
    }

    /// The `mariadbd` command for a server on `self.port`.
    fn command(&self) -> Command {
        let root = self.dir.path();
        // A temporary directory of its own: a server that starts deletes every `#sql*` file in
        // its tmpdir, and with a shared /tmp that would be another running server's temporary
        // tables ("Error on delete of '/tmp/#sql-temptable-…'").
        let tmp = root.join("tmp");
        std::fs::create_dir_all(&tmp).expect("create the server's tmpdir");
        let mut cmd = Command::new(mariadbd());
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", root.join("data").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", root.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", root.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", self.log_file().display()))
            .arg(format!("--port={}", self.port))
            // A TLS server also listens on 127.0.0.2, an address its certificate does not name.
            .arg(match self.tls {
                Some(_) => "--bind-address=127.0.0.1,127.0.0.2",
                None => "--bind-address=127.0.0.1",
            })
            .args(SMALL)
            .args([
                "--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
                // Pages go to the page cache, never synced. The default writes them straight
                // to the disk, the likeliest cause of the rare server that answered nothing for
                // 10 s under the whole suite's load. A killed server still recovers from the page
                // cache, as with the PostgreSQL fixture's `fsync=off`.
                "--innodb-flush-method=nosync",
                "--innodb-use-native-aio=0",
                "--innodb-buffer-pool-load-at-startup=0",
                "--innodb-buffer-pool-dump-at-shutdown=0",
                "--performance-schema=0",
                "--max-connections=400",
                "--table-open-cache=200",
                "--key-buffer-size=1M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some(certs) = &self.tls {
            cmd.arg(format!("--ssl-ca={}", certs.join("ca.crt").display()))
                .arg(format!("--ssl-cert={}", certs.join("server.crt").display()))
                .arg(format!("--ssl-key={}", certs.join("server.key").display()));
        }
        if nix::unistd::geteuid().is_root() {
            cmd.arg("--user=root");
        }
        cmd
    }

    /// The server's socket, for the `mariadb` client.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("mysqld.sock")
    }

    /// Runs SQL through the `mariadb` client as root, over the server's socket.
    pub fn client(&self, sql: &str) -> Output {
        self.client_within(Duration::from_secs(60), sql)
            .output()
            .expect("run the mariadb client")
    }

    /// The `mariadb` client for `sql`, ended (by `timeout`) after `limit`.
    fn client_within(&self, limit: Duration, sql: &str) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.arg(limit.as_secs().to_string()).arg("mariadb");
        self.client_args(&mut cmd, sql);
        cmd
    }

    /// The `mariadb` client for `sql` as a process of its own (to kill by its pid), for a
    /// session that must stay open while the test goes on.
    pub fn client_session(&self, sql: &str) -> Command {
        let mut cmd = Command::new("mariadb");
        self.client_args(&mut cmd, sql);
        cmd
    }

    /// The client's arguments: root, over the server's socket, `sql` in batch mode.
    fn client_args(&self, cmd: &mut Command, sql: &str) {
        cmd.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "--batch", "--skip-column-names", "-e", sql]);
    }

    /// The client's output for `sql`, trimmed; fails the test if it failed.
    pub fn sql(&self, sql: &str) -> String {
        answer(&self.client(sql), &format!("mariadb failed on {sql:?}"))
    }
}

impl Drop for MySqlServer {
    /// When the test failed, says what the server was doing: its sessions, InnoDB's view of
    /// transactions and lock waits, and the end of its log (to find why a statement went
    /// unanswered).
    fn drop(&mut self) {
        if !std::thread::panicking() || self.process.is_none() {
            return;
        }
        // Never a second panic, and never a wait on a stalled server: at most 5 s a statement.
        let said = |sql: &str| {
            self.client_within(Duration::from_secs(5), sql)
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                .unwrap_or_else(|e| format!("(cannot ask: {e})"))
        };
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!(
            "mariadbd at the failure:\n--- sessions\n{}\n--- InnoDB\n{}\n--- log (last lines)\n{}",
            said("SHOW FULL PROCESSLIST"),
            said("SHOW ENGINE INNODB STATUS").replace("\\n", "\n"),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

impl SingleServer for MySqlServer {
    const PROGRAM: &'static str = "mariadbd";

    fn port(&self) -> u16 {
        self.port
    }

    fn url_on(&self, port: u16) -> String {
        match &self.password {
            Some(password) => {
                format!("mysql://{APP_USER}:{password}@127.0.0.1:{port}/{DATABASE}")
            }
            None => format!("mysql://root@127.0.0.1:{port}/{DATABASE}"),
        }
    }

    fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// Ready when it greets clients.
    fn launch(&mut self, port: u16) -> bool {
        self.port = port;
        let mut cmd = self.command();
        self.process =
            ServerProcess::spawn_ready(&mut cmd, Self::PROGRAM, port, READY_WITHIN, || {
                greets(port)
            });
        self.process.is_some()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("mysqld.log")
    }
}

impl Fixture for MySqlServer {
    /// A server whose root user needs no password.
    fn start() -> Self {
        Self::start_with(None, None)
    }

    fn with_password(password: &str) -> Option<Self> {
        Some(Self::start_with(Some(password.to_owned()), None))
    }

    fn url_at(authority: &str) -> String {
        format!("mysql://{authority}/{DATABASE}")
    }

    fn malformed() -> Vec<(String, String)> {
        vec![
            ("mysql://u:hunter2@127.0.0.1:1".into(), "no database".into()),
            (
                format!("mysql://u:hunter2@127.0.0.1:1/{DATABASE}?ssl-mode=sometimes"),
                "ssl-mode".into(),
            ),
            (
                format!("mysql://u:hunter2@127.0.0.1:1/{DATABASE}?lockrun_table_prefix=X-"),
                "lockrun_table_prefix".into(),
            ),
        ]
    }

    /// A crash and a start on the same port with the same data; wiping, lockrun's rows are then
    /// deleted (its token counters with them), as a restore from an old backup would leave them.
    fn restart(&mut self, wipe: bool) {
        self.relaunch();
        if wipe {
            self.sql(&format!(
                "DELETE FROM {DATABASE}.lockrun_names; DELETE FROM {DATABASE}.lockrun_leases; \
                 DELETE FROM {DATABASE}.lockrun_waiters"
            ));
        }
    }

    fn counter(&self, name: &str) -> Counter {
        let token = self.sql(&format!(
            "SELECT token FROM {DATABASE}.lockrun_names WHERE name = '{name}'"
        ));
        Counter::Exact(token.parse().expect("the stored token is a number"))
    }
}

/// Whether something on `port` sends a MySQL greeting (protocol version 10).
fn greets(port: u16) -> bool {
    let Some(mut stream) = sent(port, b"", Duration::from_secs(1)) else {
        return false;
    };
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).is_ok() && greeting[4] == 10
}

/// `mariadbd`, where Debian puts it.
fn mariadbd() -> PathBuf {
    ["/usr/sbin/mariadbd", "/usr/bin/mariadbd"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no mariadbd (apt-get install mariadb-server)")
}

/// The initialised data directory every test copies, made once per server version.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let version = Command::new(mariadbd())
            .arg("--version")
            .output()
            .expect("run mariadbd --version");
        let tag = text(&version.stdout)
            .split_whitespace()
            .find(|w| w.contains("MariaDB"))
            .unwrap_or("unknown")
            .replace(['/', '+'], "_");
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let template = root.join(format!("mariadb-template-{tag}"));
        if template.join("mysql").is_dir() {
            return template;
        }
        let building = tempfile::tempdir_in(&root).expect("temp dir for the template");
        let data = building.path().join("data");
        let tmp = building.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("create the template's tmpdir");
        let mut cmd = Command::new("mariadb-install-db");
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(SMALL);
        if nix::unistd::geteuid().is_root() {
            cmd.arg("--user=root");
        }
        let out = cmd.output().expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        // Another test process may have finished first: either copy is as good.
        if std::fs::rename(&data, &template).is_err() {
            assert!(
                template.join("mysql").is_dir(),
                "no template at {template:?}"
            );
        }
        template
    })
}

/// Copies the directory tree `from` to `to` (regular files and directories only).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a data directory");
    for entry in std::fs::read_dir(from).expect("read the template") {
        let entry = entry.expect("a template entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a template file");
        }
    }
}
