//! Starting the command and signalling it.
//!
//! The command is executed directly (no shell) as the leader of a new process group, so a signal to
//! the group reaches everything it started that did not leave the group. It is started without
//! copying lockrun (see `spawn`), and its exit is seen through its pidfd. If lockrun is SIGKILLed,
//! the watchdog (see `watchdog`) stops the command's whole tree; where no watchdog could be
//! started, the command gets a parent-death signal instead, so the kernel kills at least the
//! command. That signal fires when the *thread* that forked it exits, so the command must be
//! spawned from a thread that lives as long as lockrun — the main thread, which drives lockrun's
//! single-threaded runtime.
//!
//! When lockrun runs in the foreground of a terminal, the command's group is given the terminal
//! (and lockrun takes it back afterwards), so an interactive command can read its input and gets
//! Ctrl-C itself.

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;

use nix::sys::signal::{SigHandler, Signal, killpg, signal};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgrp, getpid, getppid, isatty, tcgetpgrp, tcsetpgrp};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::spawn::Steps;
use super::watchdog::{Standby, Watchdog};
use crate::exit::{self, Error};

/// How long the command runs before lockrun moves it into a cgroup of its own (see `cgroup`):
/// moving costs milliseconds that a short command should not pay.
const ADOPT_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// What to start.
pub struct Launch<'a> {
    pub program: &'a OsString,
    pub args: &'a [OsString],
    /// Variables to set.
    pub env: Vec<(String, String)>,
    /// Variables to remove from the inherited environment (secrets).
    pub env_remove: Vec<String>,
    /// Whether every descendant of this process belongs to the command: then lockrun becomes a
    /// child subreaper and, on a lost lease, sweeps descendants that left the command's group. A
    /// process that runs other children besides the command (a test harness) must say no.
    pub sole_child: bool,
    /// A watchdog forked while lockrun waited, if one is ready (only for a sole child).
    pub standby: Standby,
}

/// The running command.
pub struct Child {
    /// The command's pid, which is also its process group.
    group: Pid,
    exit: ExitWatch,
    /// Its exit status, once reaped.
    status: Option<ExitStatus>,
    owns_terminal: bool,
    sole_child: bool,
    /// Stops the command's tree if lockrun dies; only for a sole child.
    watchdog: Option<Watchdog>,
    started: std::time::Instant,
}

impl Child {
    /// Starts the command. Needs a running tokio runtime; call from the main thread.
    pub fn spawn(mut launch: Launch<'_>) -> Result<Child, Error> {
        let take_terminal = lockrun_owns_terminal();
        if !take_terminal {
            super::job_control::catch()?;
        }
        // SIGCHLD: a command that owns the terminal was stopped, or an orphan reparented to
        // lockrun exited and must be reaped. Caught before the command starts, so that a refusal
        // (no descriptor left) ends the run with nothing started.
        super::signals::catch(Signal::SIGCHLD)
            .map_err(|e| Error::os("cannot watch the command", &e))?;
        let mut watchdog = None;
        if launch.sole_child {
            super::descendants::become_subreaper();
            watchdog = launch
                .standby
                .take()
                .map_or_else(Watchdog::start, Ok)
                .inspect_err(|e| {
                    crate::warn!(
                        "cannot start the watchdog ({}): if lockrun is killed, only the command itself is stopped",
                        crate::messages::io(e)
                    )
                })
                .ok();
        }
        // With a watchdog, lockrun's death leaves the command to it: a parent-death signal would
        // kill the command (or, stopping it, have the kernel hang up its orphaned group) before
        // the watchdog's sweep could find the command's children through it. Without one, the
        // command dies with lockrun.
        let steps = Steps {
            on_parent_death: watchdog.is_none().then_some(libc::SIGKILL),
            take_terminal,
            tell_group: watchdog.as_ref().map(Watchdog::group_slot),
        };
        let spawned = super::spawn::spawn(
            launch.program,
            launch.args,
            &launch.env,
            &launch.env_remove,
            steps,
        )
        .map_err(|e| spawn_error(launch.program, &e))?;
        let exit = ExitWatch::new(spawned.pidfd).map_err(|e| {
            // A command lockrun cannot watch must not run on without it.
            let _ = killpg(spawned.pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(spawned.pid, None);
            Error::os("cannot watch the command", &e)
        })?;
        Ok(Child {
            group: spawned.pid,
            exit,
            status: None,
            owns_terminal: take_terminal,
            sole_child: launch.sole_child,
            watchdog,
            started: std::time::Instant::now(),
        })
    }

    /// Tells the watchdog of descendants that left the command's group, until the command runs
    /// in a cgroup of its own; a command still running after `ADOPT_AFTER` is moved into one.
    /// Call on SIGCHLD and now and then while the command runs.
    pub fn track_escapees(&mut self) {
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        if watchdog.adopted() {
            return;
        }
        for pid in super::descendants::outside(self.group, Some(watchdog.pid())) {
            watchdog.watch_pid(pid);
        }
        if self.started.elapsed() >= ADOPT_AFTER {
            watchdog.adopt();
        }
    }

    /// Whether lockrun must look at the command's tree now and then (a watchdog whose command
    /// is not in a cgroup of its own yet).
    pub fn tracks_escapees(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|w| !w.adopted())
    }

    /// lockrun is ending normally: the watchdog stands down.
    pub fn disarm(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.disarm();
        }
    }

    /// The watchdog's pid, which lockrun's own walks of its descendants leave out.
    fn skip(&self) -> Option<Pid> {
        self.watchdog.as_ref().map(Watchdog::pid)
    }

    /// The command's pid, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.group.as_raw() as u32
    }

    /// Sends `signal` to the command's whole process group. A group that is already gone is fine.
    pub fn signal_group(&self, signal: Signal) {
        match killpg(self.group, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => crate::warn!(
                "cannot send {signal} to the command's process group: {}",
                e.desc()
            ),
        }
    }

    /// Sends `signal` to the command's process group and to every other descendant of lockrun,
    /// including those that left the group: how a command is stopped when the lease is lost.
    pub fn signal_everything(&self, signal: Signal) {
        self.signal_group(signal);
        if self.sole_child {
            super::descendants::signal_outside(self.group, self.skip(), signal);
        }
    }

    /// Reaps exited orphans that were reparented to lockrun.
    pub fn reap_orphans(&self) {
        if self.sole_child {
            super::descendants::reap_orphans(self.group);
        }
    }

    /// Whether anything the command started is still running (the command itself excluded once
    /// it was waited for). Without `sole_child`, only the command's group is looked at.
    pub fn descendants_alive(&self) -> bool {
        if self.sole_child {
            super::descendants::any_alive(self.skip())
        } else {
            killpg(self.group, None).is_ok()
        }
    }

    /// Whether [`Child::descendants_alive`] turns false as soon as the killed are gone: lockrun is
    /// their subreaper and reaps them. Otherwise the killed may linger as another parent's
    /// zombies, which still count as members of the command's group.
    pub fn sees_deaths(&self) -> bool {
        self.sole_child
    }

    /// Waits for the command itself to exit, and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = wait_for(self.group, &mut self.exit).await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Job control for a command that owns the terminal: when it was stopped (Ctrl-Z, or reading
    /// the terminal from the background), lockrun takes the terminal back and stops itself, so the
    /// shell sees the whole job stopped; when the shell continues lockrun (`fg`, `bg`), the command
    /// gets the terminal back and is continued — only if `may_resume` says the lease still holds
    /// (a stop longer than the lease leaves the command stopped, for the supervisor to kill
    /// without letting it run again). Call on SIGCHLD.
    pub fn follow_stop(&self, may_resume: impl FnOnce() -> bool) {
        if !self.owns_terminal {
            return;
        }
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG;
        if !matches!(
            waitid(Id::Pid(self.group), flags),
            Ok(WaitStatus::Stopped(..))
        ) {
            return;
        }
        self.restore_terminal();
        // Stops here until continued; a shell that resumes the job in the foreground has given
        // lockrun's group the terminal again by then.
        let _ = nix::sys::signal::raise(Signal::SIGTSTP);
        if tcgetpgrp(stdin()).is_ok_and(|pgrp| pgrp == getpgrp()) {
            let previous = ignore_sigttou();
            let _ = tcsetpgrp(stdin(), self.group);
            if let Some(previous) = previous {
                // SAFETY: reinstates the disposition that was in place a moment ago.
                let _ = unsafe { signal(Signal::SIGTTOU, previous) };
            }
        }
        if may_resume() {
            self.signal_group(Signal::SIGCONT);
        }
    }

    /// Takes the terminal back after the command ended, if it was handed over.
    pub fn restore_terminal(&self) {
        if self.owns_terminal {
            // lockrun is a background group now; without ignoring SIGTTOU it would be stopped.
            let previous = ignore_sigttou();
            let _ = tcsetpgrp(stdin(), getpgrp());
            if let Some(previous) = previous {
                // SAFETY: reinstates the disposition that was in place a moment ago.
                let _ = unsafe { signal(Signal::SIGTTOU, previous) };
            }
        }
    }
}

/// How lockrun learns that the command exited: its pidfd turns readable, or, on a kernel without
/// pidfds (older than 5.2), a look every [`EXIT_POLL`] (the supervisor loop also looks again at each
/// SIGCHLD, so under supervision that is at once).
enum ExitWatch {
    Pidfd(AsyncFd<OwnedFd>),
    Poll,
}

/// How often a command's exit is looked for on a kernel without pidfds.
const EXIT_POLL: std::time::Duration = std::time::Duration::from_millis(20);

impl ExitWatch {
    fn new(pidfd: Option<OwnedFd>) -> io::Result<ExitWatch> {
        Ok(match pidfd {
            // SAFETY: the pidfd is owned by the `AsyncFd` and never replaced or closed elsewhere.
            Some(pidfd) => ExitWatch::Pidfd(unsafe {
                AsyncFd::register_with_interest(pidfd, Interest::READABLE)?
            }),
            None => ExitWatch::Poll,
        })
    }

    /// Returns when the command may have exited.
    async fn changed(&mut self) -> io::Result<()> {
        match self {
            ExitWatch::Pidfd(pidfd) => pidfd.readable().await?.clear_ready(),
            ExitWatch::Poll => tokio::time::sleep(EXIT_POLL).await,
        }
        Ok(())
    }
}

/// Waits for the child `pid` to exit, and reaps it.
async fn wait_for(pid: Pid, exit: &mut ExitWatch) -> io::Result<ExitStatus> {
    loop {
        if let Some(status) = reap(pid)? {
            return Ok(status);
        }
        exit.changed().await?;
    }
}

/// The exit status of the child `pid`, if it exited (then it is reaped).
fn reap(pid: Pid) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: a non-blocking wait for our own child, into a local.
        match unsafe { libc::waitpid(pid.as_raw(), &mut status, libc::WNOHANG) } {
            0 => return Ok(None),
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            -1 => return Err(io::Error::last_os_error()),
            _ => return Ok(Some(ExitStatus::from_raw(status))),
        }
    }
}

fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process; lockrun never closes it.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// Makes the process `command` starts die (SIGKILL) when this process dies, however it dies: the
/// kernel's parent-death signal, armed in the child before exec — and, should this process have
/// died between the fork and the arming, the child kills itself at once.
///
/// For helpers started with `std`'s `Command` (the drill's holders); the command itself gets the
/// same from [`Steps::on_parent_death`].
pub fn die_with_parent(command: &mut std::process::Command) {
    let parent = getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid, raise); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if getppid() != parent {
                nix::sys::signal::raise(Signal::SIGKILL)?;
            }
            Ok(())
        });
    }
}

/// Whether stdin is a terminal whose foreground process group is lockrun's own.
fn lockrun_owns_terminal() -> bool {
    isatty(stdin()).unwrap_or(false) && tcgetpgrp(stdin()).is_ok_and(|pgrp| pgrp == getpgrp())
}

fn ignore_sigttou() -> Option<SigHandler> {
    // SAFETY: SIG_IGN installs no handler code; the previous disposition is returned for restoring.
    unsafe { signal(Signal::SIGTTOU, SigHandler::SigIgn) }.ok()
}

/// Maps a failed exec to the shell's statuses (127 not found, 126 cannot execute), saying what
/// was not found and pointing at `sh -c` when the command looks like shell syntax. A system out
/// of processes, memory or descriptors is no fault of the command's: that is lockrun's 70.
fn spawn_error(program: &OsString, e: &io::Error) -> Error {
    let shown = program.to_string_lossy();
    if let Some(libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE) = e.raw_os_error() {
        return Error::os(&format!("cannot start {shown:?}"), e);
    }
    let (code, what) = match e.kind() {
        io::ErrorKind::NotFound => (exit::NOT_FOUND, not_found(program)),
        // The kernel refuses a directory as it does a file without execute permission.
        io::ErrorKind::PermissionDenied
            if program.as_encoded_bytes().contains(&b'/')
                && std::path::Path::new(program).is_dir() =>
        {
            (exit::NOT_EXECUTABLE, "it is a directory".to_owned())
        }
        io::ErrorKind::PermissionDenied => (
            exit::NOT_EXECUTABLE,
            "permission denied (is it executable? chmod +x, or run it with its interpreter)"
                .to_owned(),
        ),
        _ => (exit::NOT_EXECUTABLE, crate::messages::io(e)),
    };
    Error::Spawn {
        message: format!("cannot run {shown:?}: {what}"),
        code,
    }
}

/// Shell builtins that people run as commands by mistake.
const BUILTINS: [&str; 16] = [
    "cd", "export", "source", ".", "alias", "set", "unset", "ulimit", "umask", "eval", "exec",
    "exit", "read", "wait", "trap", "shopt",
];

/// Why `program` was not found: no such file, a missing `#!` interpreter, a builtin, a whole
/// command line in one word, or nothing of that name on `$PATH`.
fn not_found(program: &OsString) -> String {
    let text = program.to_string_lossy();
    if text.contains(char::is_whitespace) {
        return format!("no command is named that: to run a command line, use -- sh -c {text:?}");
    }
    if BUILTINS.contains(&text.as_ref()) {
        return format!("{text} is a shell builtin, not a program: use -- sh -c '{text} ...'");
    }
    if !text.contains('/') {
        return "command not found (not on $PATH)".to_owned();
    }
    let path = std::path::Path::new(program);
    if !path.exists() {
        return "no such file".to_owned();
    }
    match interpreter(path) {
        Some(interpreter) => {
            format!("its interpreter {interpreter} (from its #! line) was not found")
        }
        None => "the file exists but cannot be executed here (a missing loader or interpreter?)"
            .to_owned(),
    }
}

/// The interpreter named on a script's `#!` line.
fn interpreter(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let len = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..len].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    text.split_whitespace().next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit of a command started without a pidfd (a kernel older than 5.2) is found
    /// through SIGCHLD.
    #[test]
    fn without_a_pidfd_the_exit_is_found_through_sigchld() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let args = ["-c", "sleep 0.2; exit 7"].map(OsString::from);
            let steps = Steps::default();
            let spawned = super::super::spawn::spawn("sh".as_ref(), &args[..], &[], &[], steps);
            let spawned = spawned.unwrap();
            drop(spawned.pidfd);
            let mut exit = ExitWatch::new(None).unwrap();
            let status = wait_for(spawned.pid, &mut exit).await.unwrap();
            assert_eq!(status.code(), Some(7));
        });
    }
}
