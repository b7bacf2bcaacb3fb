//! Starting the command and signalling it.
//!
//! The command is executed directly (no shell) as the leader of a new process group, so a signal to
//! the group reaches everything it started that did not leave the group. If lockrun is SIGKILLed,
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
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;

use nix::sys::signal::{SigHandler, Signal, killpg, signal};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgrp, getpid, getppid, isatty, tcgetpgrp, tcsetpgrp};

use super::job_control::JobControl;
use super::watchdog::Watchdog;
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
}

/// The running command.
pub struct Child {
    process: tokio::process::Child,
    group: Pid,
    owns_terminal: bool,
    /// Without the terminal: lockrun's SIGTSTP and SIGCONT, caught since before the command
    /// started, until the supervisor takes them.
    job_control: Option<JobControl>,
    sole_child: bool,
    /// Stops the command's tree if lockrun dies; only for a sole child.
    watchdog: Option<Watchdog>,
    started: std::time::Instant,
}

impl Child {
    /// Starts the command. Needs a running tokio runtime; call from the main thread.
    pub fn spawn(launch: Launch<'_>) -> Result<Child, Error> {
        let mut command = std::process::Command::new(launch.program);
        command.args(launch.args);
        for var in &launch.env_remove {
            command.env_remove(var);
        }
        command.envs(launch.env);
        command.process_group(0);
        let take_terminal = lockrun_owns_terminal();
        let job_control = match take_terminal {
            true => None,
            false => Some(JobControl::listen()?),
        };
        let mut watchdog = None;
        if launch.sole_child {
            super::descendants::become_subreaper();
            watchdog = Watchdog::start()
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
        let on_death = watchdog.is_none().then_some(Signal::SIGKILL);
        on_parent_death(&mut command, on_death);
        if take_terminal {
            // SAFETY: the closure runs in the forked child before exec and only makes
            // async-signal-safe system calls (signal, tcsetpgrp, getpid); it allocates nothing.
            unsafe {
                command.pre_exec(|| {
                    // A background group calling tcsetpgrp gets SIGTTOU unless it ignores it.
                    signal(Signal::SIGTTOU, SigHandler::SigIgn)?;
                    tcsetpgrp(stdin(), getpid())?;
                    signal(Signal::SIGTTOU, SigHandler::SigDfl)?;
                    Ok(())
                });
            }
        }
        if let Some(watchdog) = &watchdog {
            watchdog.told_by(&mut command);
        }
        let process = tokio::process::Command::from(command)
            .spawn()
            .map_err(|e| spawn_error(launch.program, &e))?;
        let pid = process
            .id()
            .ok_or_else(|| Error::internal("the command exited before lockrun saw its pid"))?;
        let group = Pid::from_raw(pid as i32);
        Ok(Child {
            process,
            group,
            owns_terminal: take_terminal,
            job_control,
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

    /// Waits for the command itself to exit.
    pub async fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        self.process.wait().await
    }

    /// The job-control signals to pass on, when the command runs without the terminal.
    pub fn take_job_control(&mut self) -> Option<JobControl> {
        self.job_control.take()
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

fn stdin() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process; lockrun never closes it.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// Makes the process `command` starts die (SIGKILL) when this process dies, however it dies: the
/// kernel's parent-death signal, armed in the child before exec — and, should this process have
/// died between the fork and the arming, the child kills itself at once.
pub fn die_with_parent(command: &mut std::process::Command) {
    on_parent_death(command, Some(Signal::SIGKILL));
}

/// Arms the parent-death signal `signal` (if any) in the process `command` starts; a child whose
/// parent died before exec kills itself at once (it has started nothing yet).
fn on_parent_death(command: &mut std::process::Command, signal: Option<Signal>) {
    let parent = getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid, raise); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if let Some(signal) = signal {
                nix::sys::prctl::set_pdeathsig(signal)?;
            }
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
/// was not found and pointing at `sh -c` when the command looks like shell syntax.
fn spawn_error(program: &OsString, e: &io::Error) -> Error {
    let shown = program.to_string_lossy();
    let (code, what) = match e.kind() {
        io::ErrorKind::NotFound => (exit::NOT_FOUND, not_found(program)),
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
