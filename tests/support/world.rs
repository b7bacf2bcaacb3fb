//! One test's world for a networked backend: a server the test owns, the backend URL lockrun is
//! given (the server's own, or a proxy's in front of it), a scratch directory that is every
//! command's working directory, and holders whose commands run until told to finish.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::common::{Drive, alive, code, text, wait_exit, wait_for_file, wait_until};

/// Generous bound for things that should happen at once.
pub const SOON: Duration = Duration::from_secs(10);

/// A server a test starts and owns.
pub trait Server {
    /// Starts a fresh server on a free loopback port.
    fn start() -> Self;
    /// The backend URL that reaches it directly.
    fn url(&self) -> String;
}

/// A server, the URL lockrun uses, and a scratch directory.
pub struct World<S> {
    pub server: S,
    pub url: String,
    scratch: tempfile::TempDir,
}

impl<S: Server> World<S> {
    /// A fresh server.
    pub fn new() -> Self {
        Self::on(S::start())
    }

    /// A world around a server started some other way.
    pub fn on(server: S) -> Self {
        World {
            url: server.url(),
            server,
            scratch: tempfile::tempdir().expect("scratch dir"),
        }
    }
}

impl<S> Drive for World<S> {
    fn url(&self) -> String {
        self.url.clone()
    }

    fn workdir(&self) -> &Path {
        self.scratch.path()
    }
}

impl<S> World<S> {
    /// The scratch directory, every command's working directory.
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// A file in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// Starts a holder of NAME whose command records its token (`TAG.token`) and pid
    /// (`TAG.pid`), then runs until the file `TAG.release` appears (or it is killed).
    pub fn hold(&self, name: &str, tag: &str, extra: &[&str]) -> Holder {
        self.hold_as(name, tag, extra, false)
    }

    /// [`World::hold`], with lockrun leading a process group of its own when `own_group`, so the
    /// test can stop that whole group, as a paused VM would.
    pub fn hold_as(&self, name: &str, tag: &str, extra: &[&str], own_group: bool) -> Holder {
        self.start_holder(name, tag, extra, &Self::hold_script(tag), own_group)
    }

    /// Starts a holder running `script`, which must write `TAG.token` and `TAG.pid` first.
    pub fn hold_running(&self, name: &str, tag: &str, extra: &[&str], script: &str) -> Holder {
        self.start_holder(name, tag, extra, script, false)
    }

    fn hold_script(tag: &str) -> String {
        format!(
            "echo $FENCING_TOKEN > {tag}.token; echo $$ > {tag}.pid; \
             while [ ! -e {tag}.release ]; do sleep 0.02; done"
        )
    }

    fn start_holder(
        &self,
        name: &str,
        tag: &str,
        extra: &[&str],
        script: &str,
        own_group: bool,
    ) -> Holder {
        let mut args: Vec<&str> = vec!["--name", name];
        args.extend_from_slice(extra);
        args.extend(["--", "sh", "-c", script]);
        let mut cmd = self.cmd(&args);
        if own_group {
            cmd.process_group(0);
        }
        let process = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockrun");
        let token = wait_for_file(&self.path(&format!("{tag}.token")), SOON);
        let pid = wait_for_file(&self.path(&format!("{tag}.pid")), SOON);
        Holder {
            process,
            token: token.trim().parse().expect("token is a number"),
            child_pid: pid.trim().parse().expect("pid is a number"),
            release: self.path(&format!("{tag}.release")),
        }
    }
}

/// A running holder started by [`World::hold`].
pub struct Holder {
    pub process: Child,
    pub token: u64,
    pub child_pid: i32,
    release: PathBuf,
}

impl Holder {
    /// Lets the command end normally.
    pub fn finish(&mut self) -> Output {
        std::fs::write(&self.release, "").expect("write release file");
        wait_exit(&mut self.process, SOON)
    }

    /// Signals the holding lockrun.
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.process.id() as i32), signal).expect("signal lockrun");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // A stopped lockrun would not die of SIGKILL any later; continue it first.
        let _ = kill(Pid::from_raw(self.process.id() as i32), Signal::SIGCONT);
        let _ = kill(Pid::from_raw(self.child_pid), Signal::SIGKILL);
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The tokens written one per line to `path`.
pub fn tokens_in(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("token is a number"))
        .collect()
}

/// Asserts the holder's command dies before the lease could have expired (`ttl` after the moment
/// the server went away), and that lockrun then exits 76.
pub fn assert_stopped_before_expiry(holder: &mut Holder, lost_at: Instant, ttl: Duration) {
    let dead = wait_until(ttl * 2, || !alive(holder.child_pid));
    let after = lost_at.elapsed();
    assert!(dead, "the command was never stopped");
    assert!(
        after < ttl,
        "the command outlived the lease: stopped {after:?} after the loss"
    );
    let out = wait_exit(&mut holder.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}
