//! The drill's two holders: real `lockrun` processes (this very binary) started with the user's
//! backend, each the leader of its own process group, and the private directory they share with
//! the drill (the probe store, their markers, their stderr, the backend URL).
//!
//! Holders get a clean environment: no inherited `LOCKRUN_*` setting or `FENCING_TOKEN` can change
//! what they do, and the backend URL reaches them in a private file (`--backend-file`), never on a
//! command line. Each gets a parent-death signal, so a drill that dies does not leave a paused
//! holder behind, and anything still running when a [`Holder`] is dropped is killed.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::clock::BootInstant;

/// A private scratch directory, removed when dropped.
pub struct Workdir {
    path: PathBuf,
}

impl Workdir {
    /// Creates `lockrun-drill-PID-N` (mode 0700) in the system's temporary directory.
    pub fn create() -> io::Result<Self> {
        let base = std::env::temp_dir();
        let mut attempt = 0u32;
        loop {
            let path = base.join(format!("lockrun-drill-{}-{attempt}", std::process::id()));
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Workdir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A file in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to a new private file (mode 0600).
    pub fn write_private(&self, name: &str, contents: &[u8]) -> io::Result<PathBuf> {
        let path = self.join(name);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(contents)?;
        Ok(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What every holder is started with.
pub struct Plan<'a> {
    pub exe: &'a Path,
    pub workdir: &'a Workdir,
    pub backend_file: &'a Path,
    pub name: &'a str,
    pub ttl: Duration,
}

/// A holder: its lockrun, and once known, its command's process group.
pub struct Holder {
    process: std::process::Child,
    group: Pid,
    command_group: Option<Pid>,
    stderr: PathBuf,
    ended: Option<(BootInstant, u8)>,
}

impl Holder {
    /// Starts `lockrun --backend-file F --name N --ttl T --wait W -- sh -c SCRIPT`, its stderr in
    /// `TAG.err`. The script finds the lockrun binary in `$DRILL_EXE` and the shared directory in
    /// `$DRILL_DIR`.
    pub fn spawn(plan: &Plan<'_>, tag: &str, wait: Duration, script: &str) -> io::Result<Holder> {
        let stderr = plan.workdir.join(&format!("{tag}.err"));
        let mut command = Command::new(plan.exe);
        command
            .arg("--backend-file")
            .arg(plan.backend_file)
            .args(["--name", plan.name])
            .args(["--ttl", &millis(plan.ttl)])
            .args(["--wait", &millis(wait)])
            .args(["--", "sh", "-c", script]);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("LOCKRUN_") || key == "FENCING_TOKEN" {
                command.env_remove(key);
            }
        }
        command
            .env("DRILL_EXE", plan.exe)
            .env("DRILL_DIR", plan.workdir.path())
            .current_dir(plan.workdir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr)?)
            .process_group(0);
        crate::supervisor::die_with_parent(&mut command);
        let process = command.spawn()?;
        let group = Pid::from_raw(i32::try_from(process.id()).unwrap_or(i32::MAX));
        Ok(Holder {
            process,
            group,
            command_group: None,
            stderr,
            ended: None,
        })
    }

    /// The holder's command leads this process group (lockrun starts it as a group leader).
    pub fn set_command_group(&mut self, pid: i32) {
        self.command_group = Some(Pid::from_raw(pid));
    }

    pub fn pid(&self) -> i32 {
        self.group.as_raw()
    }

    /// Sends `signal` to lockrun's group and then to its command's group, as a VM pause or resume
    /// reaches every process at once.
    pub fn signal_all(&self, signal: Signal) {
        for group in std::iter::once(self.group).chain(self.command_group) {
            let _ = killpg(group, signal);
        }
    }

    /// When lockrun exited and with what status, once it has.
    pub fn poll_exit(&mut self) -> io::Result<Option<(BootInstant, u8)>> {
        if self.ended.is_none()
            && let Some(status) = self.process.try_wait()?
        {
            self.ended = Some((BootInstant::now(), crate::exit::from_wait_status(status)));
        }
        Ok(self.ended)
    }

    /// The last line lockrun printed on stderr, if any.
    pub fn last_message(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.stderr).ok()?;
        text.lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map(|line| line.trim().to_owned())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.ended.is_none() {
            // KILL reaches stopped processes too.
            self.signal_all(Signal::SIGKILL);
            let _ = self.process.wait();
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z' && state != 'X')
}

/// Whether process `pid` has stopped after a SIGSTOP: stopped (`T`), or in an uninterruptible
/// wait (`D`) from which it can only return to stop — a shell whose `vfork`ed child was stopped
/// before its `exec` waits like that for as long as the child is stopped.
pub fn stopped(pid: i32) -> bool {
    matches!(process_state(pid), Some('T' | 'D'))
}

/// The state letter from `/proc/PID/stat`.
pub fn state(pid: i32) -> Option<char> {
    process_state(pid)
}

fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// A duration as `lockrun` reads it back exactly.
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Sleeps briefly between polls.
pub async fn tick() {
    tokio::time::sleep(Duration::from_millis(2)).await;
}

/// `path`'s contents once it exists (markers are written whole, by rename).
pub fn read_marker(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}
