//! Test support shared by the integration tests: a builder that drives the real `lockrun` binary
//! against a private state directory, and polling helpers (never fixed sleeps) for conditions.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// A `lockrun` command with a clean environment: no inherited `LOCKRUN_*` settings.
pub fn lockrun() -> Command {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("LOCKRUN_") || key == "FENCING_TOKEN" {
            cmd.env_remove(key);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// Driving `lockrun --backend URL ...` in one test's world: everything but the URL and the working
/// directory is the same for every backend.
pub trait Drive {
    /// The backend URL lockrun is given.
    fn url(&self) -> String;

    /// The commands' working directory (scratch files live there).
    fn workdir(&self) -> &Path;

    /// `lockrun --backend URL ARGS...`, run in the working directory.
    fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = lockrun();
        cmd.arg("--backend").arg(self.url()).args(args);
        cmd.current_dir(self.workdir());
        cmd
    }

    /// Runs to completion.
    fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd(args).output().expect("run lockrun")
    }

    /// Starts in the background with output captured.
    fn spawn<I, S>(&self, args: I) -> Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockrun")
    }

    /// `status NAME --json`, parsed.
    fn status(&self, name: &str) -> serde_json::Value {
        let out = self.run(["status", name, "--json"]);
        assert_eq!(code(&out), 0, "status failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status prints JSON")
    }

    /// `list ARGS --json`, parsed.
    fn list(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run([&["list"], args, &["--json"]].concat());
        assert_eq!(code(&out), 0, "list failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("list prints JSON")
    }

    /// Waits until `check` holds for NAME's status; returns that status.
    fn wait_status(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        let reached = wait_until(Duration::from_secs(10), || {
            last = self.status(name);
            check(&last)
        });
        assert!(reached, "{name} never {what}: {last}");
        last
    }

    /// Waits until NAME has `holders` holders.
    fn wait_held(&self, name: &str, holders: usize) -> serde_json::Value {
        self.wait_status(name, &format!("had {holders} holder(s)"), |s| {
            s["holders"].as_array().map_or(0, Vec::len) == holders
        })
    }

    /// Waits until NAME has `waiters` waiters.
    fn wait_waiters(&self, name: &str, waiters: u64) -> serde_json::Value {
        self.wait_status(name, &format!("had {waiters} waiter(s)"), |s| {
            s["waiters"] == waiters
        })
    }
}

/// A private `file://` state directory for one test.
pub struct FileEnv {
    dir: tempfile::TempDir,
}

impl FileEnv {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("scratch")).unwrap();
        FileEnv { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A scratch path inside the test's directory (for command output files).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join("scratch").join(name)
    }
}

impl Drive for FileEnv {
    fn url(&self) -> String {
        format!("file://{}/state", self.dir.path().display())
    }

    fn workdir(&self) -> &Path {
        self.dir.path()
    }
}

/// Polls `condition` every few milliseconds until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a file to exist and be non-empty; returns its contents.
pub fn wait_for_file(path: &Path, timeout: Duration) -> String {
    let mut contents = String::new();
    let found = wait_until(timeout, || {
        contents = std::fs::read_to_string(path).unwrap_or_default();
        !contents.trim().is_empty()
    });
    assert!(found, "{} never appeared", path.display());
    contents
}

/// Waits for a child process with a timeout; kills it and fails if it does not exit.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Output {
    let reached = wait_until(timeout, || child.try_wait().expect("try_wait").is_some());
    if !reached {
        let _ = child.kill();
        panic!("lockrun did not exit within {timeout:?}");
    }
    let mut out = Output {
        status: child.wait().unwrap(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    use std::io::Read;
    if let Some(mut s) = child.stdout.take() {
        s.read_to_end(&mut out.stdout).unwrap();
    }
    if let Some(mut s) = child.stderr.take() {
        s.read_to_end(&mut out.stderr).unwrap();
    }
    out
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}
