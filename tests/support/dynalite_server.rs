//! A private DynamoDB per test: `dynalite` (the DynamoDB API on LevelDB, installed by
//! `scripts/test.sh` into `tools/dynalite/`) on a free loopback port with its data in a temporary
//! directory, so that a restart keeps the table; ready when its port accepts connections
//! (polled), killed on drop. It can be killed, paused with SIGSTOP, and restarted on the same
//! port with the same data. Clients sign with the dummy credentials `support::lockrun` gives
//! every lockrun a test runs (dynalite checks their form, not their values).
//!
//! DynamoDB cannot push anything to a holder, so `release --force` reaches one at its next
//! renewal ([`Fixture::PUSHED_REVOCATION`] is false). The token counter lives in the table,
//! which a crash keeps: a wiping restart is a plain one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::fixture::{Counter, Fixture, free_port};
use super::server_process::{ServerProcess, append_log};
use super::single_server::SingleServer;

/// How long dynalite (node) may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// The table every test's URL names.
pub const TABLE: &str = "locks";

/// A running `dynalite` owned by one test.
pub struct Dynalite {
    /// Declared first: killed (on drop) before its directory is removed.
    process: Option<ServerProcess>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Dynalite {
    /// One DynamoDB call (`target` such as `GetItem`, `body` its JSON), signed with dummy
    /// credentials; the answer's JSON. Panics if the server does not answer.
    pub fn call(&self, target: &str, body: &serde_json::Value) -> serde_json::Value {
        let body = body.to_string();
        let request = format!(
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-amz-json-1.0\r\n\
             X-Amz-Target: DynamoDB_20120810.{target}\r\nX-Amz-Date: 20200101T000000Z\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=00\r\nContent-Length: {len}\r\n\
             Connection: close\r\n\r\n{body}",
            port = self.port,
            len = body.len()
        );
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to dynalite");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        stream
            .write_all(request.as_bytes())
            .expect("send to dynalite");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("read dynalite's answer");
        let (_, json) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
        serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {json}"))
    }

    /// The lock item of `name`, as stored.
    pub fn lock_item(&self, name: &str) -> serde_json::Value {
        self.call(
            "GetItem",
            &serde_json::json!({"TableName": TABLE, "Key": {"pk": {"S": format!("L#{name}")}},
                                "ConsistentRead": true}),
        )["Item"]
            .clone()
    }
}

/// `tools/dynalite/node_modules/.bin/dynalite`, as `scripts/test.sh` installs it.
fn binary() -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/dynalite/node_modules/.bin/dynalite");
    assert!(
        path.exists(),
        "dynalite is not installed at {} (scripts/test.sh installs it: npm ci --prefix tools/dynalite)",
        path.display()
    );
    path
}

impl SingleServer for Dynalite {
    const PROGRAM: &'static str = "dynalite";

    fn port(&self) -> u16 {
        self.port
    }

    fn url_on(&self, port: u16) -> String {
        format!("dynamodb://{TABLE}?endpoint=http://127.0.0.1:{port}")
    }

    fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// Ready when its port accepts connections.
    fn launch(&mut self, port: u16) -> bool {
        self.port = port;
        let log = append_log(&self.log_file());
        let mut cmd = Command::new(binary());
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--path")
            .arg(self.dir.path().join("data"))
            // Tables are usable sooner than DynamoDB's seconds, but not at once: lockrun must
            // still wait for ACTIVE.
            .args(["--createTableMs", "100"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log);
        self.process =
            ServerProcess::spawn_ready(&mut cmd, Self::PROGRAM, port, READY_WITHIN, || {
                TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
        self.process.is_some()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.path().join("dynalite.log")
    }
}

impl Fixture for Dynalite {
    /// dynalite is a Node.js server: it answers in milliseconds, but stalls for a second or more
    /// on a loaded test machine (past 1.25 s on a 2-core one running the whole suite), and a
    /// renewal may take a quarter of the TTL: 8 s leaves it 2 s.
    const TTL: &'static str = "8s";
    /// A holder reads its seat back every half second, then renews to find it gone: two answers
    /// after the release, either of which the stalls above can hold up.
    const REVOCATION_NOTICE: Duration = Duration::from_secs(3);

    /// The server's clock is read in whole seconds (the `Date` header) and kept to the safe side
    /// both ways: a run may be refused up to two seconds past its interval, plus the time an
    /// answer took to arrive (which dynalite on a loaded machine stretches).
    fn interval_kept_at_most(interval: Duration) -> Duration {
        interval + Duration::from_millis(2500)
    }

    /// A server with an empty store.
    fn start() -> Self {
        let mut server = Dynalite {
            port: 0,
            dir: tempfile::tempdir().expect("temp dir"),
            process: None,
        };
        server.launch_on_fresh_ports();
        server
    }

    fn with_password(_password: &str) -> Option<Self> {
        None
    }

    fn url_at(authority: &str) -> String {
        format!("dynamodb://{authority}")
    }

    fn unreachable() -> (String, String) {
        let endpoint = format!("127.0.0.1:{}", free_port());
        (
            format!("dynamodb://{TABLE}?endpoint=http://{endpoint}"),
            endpoint,
        )
    }

    fn malformed() -> Vec<(String, String)> {
        [
            ("dynamodb://u:hunter2@locks", "credentials"),
            ("dynamodb://locks?endpoint=ftp://127.0.0.1:1", "endpoint"),
            ("dynamodb://ab", "table"),
            ("dynamodb://locks?create=maybe", "create"),
        ]
        .into_iter()
        .map(|(url, word)| (url.to_owned(), word.to_owned()))
        .collect()
    }

    fn restart(&mut self, _wipe: bool) {
        self.relaunch();
    }

    fn counter(&self, name: &str) -> Counter {
        let item = self.lock_item(name);
        let token = item["token"]["N"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in the lock item of {name}: {item}"));
        Counter::Exact(token.parse().expect("the stored token is an integer"))
    }
}
