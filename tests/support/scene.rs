//! One test's scene: the backend URL lockrun is given and a scratch directory that is the working
//! directory of every command (where commands write their tokens, pids and logs). Everything that
//! runs lockrun goes through it: `run`, `spawn`, `status`, `list`, holders, and waiting for a
//! name's status to reach a state.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::asserts::assert_one_line;
use super::holder::Holder;
use super::lockrun::{Proc, lockrun, output};
use super::wait::{SOON, code, text, wait_until};

pub struct Scene {
    url: String,
    scratch: tempfile::TempDir,
}

impl Scene {
    /// A scene with a private `file://` state directory: `state/` in the scratch directory.
    pub fn file() -> Self {
        let scratch = tempfile::tempdir().expect("scratch dir");
        Scene {
            url: format!("file://{}/state", scratch.path().display()),
            scratch,
        }
    }

    /// The state directory of a scene made by [`Scene::file`].
    pub fn state(&self) -> PathBuf {
        self.path("state")
    }

    /// A scene whose lockruns use the backend at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Scene {
            url: url.into(),
            scratch: tempfile::tempdir().expect("scratch dir"),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// A file in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// `lockrun --backend URL ARGS...` in the scratch directory.
    pub fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd_via(&self.url, args)
    }

    /// [`Scene::cmd`] with another backend URL (a proxy's, a wrong password's).
    pub fn cmd_via<I, S>(&self, url: &str, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = lockrun();
        cmd.arg("--backend").arg(url).args(args);
        cmd.current_dir(self.dir());
        cmd
    }

    /// Runs `lockrun --backend URL ARGS...` to completion (within the run limit).
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        output(&mut self.cmd(args))
    }

    /// Starts `lockrun --backend URL ARGS...` in the background.
    pub fn spawn<I, S>(&self, args: I) -> Proc
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Proc::spawn(&mut self.cmd(args))
    }

    /// Runs `lockrun --backend URL --name NAME -- true` through `url`, which must succeed: the
    /// counterpart of [`Scene::refuses`].
    pub fn accepts(&self, url: &str, name: &str) {
        let out = output(&mut self.cmd_via(url, ["--name", name, "--", "true"]));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }

    /// Runs `lockrun --backend URL --name NAME -- touch ran` through `url`, which must fail with
    /// `status` and one line naming `needle`, and run nothing. Returns the line.
    pub fn refuses(&self, url: &str, name: &str, status: i32, needle: &str) -> String {
        let out = output(&mut self.cmd_via(url, ["--name", name, "--", "touch", "ran"]));
        let line = assert_one_line(&out, status, needle);
        assert!(!self.path("ran").exists(), "the command ran");
        line
    }

    /// Starts `lockrun --backend URL --name NAME --wait 60s OPTIONS... -- sh -c SCRIPT` in the
    /// background: a run that waits its turn.
    pub fn waiter(&self, name: &str, options: &[&str], script: &str) -> Proc {
        let mut cmd = self.cmd(["--name", name, "--wait", "60s"]);
        cmd.args(options).args(["--", "sh", "-c", script]);
        Proc::spawn(&mut cmd)
    }

    /// Starts `count` waiters for NAME (see [`Scene::waiter`]) one after another, each in line
    /// before the next starts, so that they queue in that order; waiter `i` runs `script(i)`.
    pub fn queue_waiters(
        &self,
        name: &str,
        options: &[&str],
        count: u64,
        script: impl Fn(u64) -> String,
    ) -> Vec<Proc> {
        (0..count)
            .map(|i| {
                let waiter = self.waiter(name, options, &script(i));
                self.wait_waiters(name, i + 1);
                waiter
            })
            .collect()
    }

    /// Starts a holder of NAME (see [`Holder`]) and waits until its command runs.
    pub fn hold(&self, name: &str, tag: &str, extra: &[&str]) -> Holder {
        self.hold_via(&self.url, name, tag, extra)
    }

    /// [`Scene::hold`] through another backend URL.
    pub fn hold_via(&self, url: &str, name: &str, tag: &str, extra: &[&str]) -> Holder {
        Holder::spawn(self.holder_cmd(url, name, extra), self.dir(), tag).started()
    }

    /// `lockrun --backend URL --name NAME EXTRA...`, for a [`Holder`] to complete.
    pub fn holder_cmd(&self, url: &str, name: &str, extra: &[&str]) -> Command {
        let mut cmd = self.cmd_via(url, ["--name", name]);
        cmd.args(extra);
        cmd
    }

    /// What the critical sections found when they started: empty when no two ran at once.
    pub fn overlaps(&self) -> String {
        std::fs::read_to_string(self.path("overlaps")).unwrap_or_default()
    }

    /// `status NAME --json`, parsed.
    pub fn status(&self, name: &str) -> Value {
        self.json(&["status", name, "--json"])
    }

    /// `list ARGS... --json`, parsed.
    pub fn list(&self, args: &[&str]) -> Value {
        self.json(&[&["list"], args, &["--json"]].concat())
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(code(&out), 0, "{args:?} failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}", text(&out.stdout)))
    }

    /// Waits until `check` holds for NAME's status; returns that status.
    pub fn wait_status(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let reached = wait_until(SOON, || {
            last = self.status(name);
            check(&last)
        });
        assert!(reached, "{name} never {what}: {last}");
        last
    }

    /// Waits until NAME has `holders` holders.
    pub fn wait_held(&self, name: &str, holders: usize) -> Value {
        self.wait_status(name, &format!("had {holders} holder(s)"), |s| {
            s["holders"].as_array().map_or(0, Vec::len) == holders
        })
    }

    /// Waits until NAME has `waiters` waiters.
    pub fn wait_waiters(&self, name: &str, waiters: u64) -> Value {
        self.wait_status(name, &format!("had {waiters} waiter(s)"), |s| {
            s["waiters"] == waiters
        })
    }
}
