//! A holder: a lockrun whose command is the tests' critical section. When the command starts it
//! records its fencing token (`TAG.token`) and its granted TTL (`TAG.ttl`), appends a line to `overlaps` if any other critical section is still running, then
//! records its pid (`TAG.pid`) and runs until the file `TAG.release` appears (or it is stopped).
//! All files are in the working directory the test gave it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::lockrun::{Proc, RUN_LIMIT};
use super::wait::{SOON, alive, number_in, read_trimmed, wait_until};

/// The shell script of the critical section for `tag`.
pub fn critical(tag: &str) -> String {
    format!(
        "echo $FENCING_TOKEN > {tag}.token; echo $LOCKRUN_TTL_MS > {tag}.ttl; \
         for f in *.pid; do [ -e \"$f\" ] || continue; p=$(cat \"$f\"); \
         s=$(cut -d' ' -f2,3 \"/proc/$p/stat\" 2>/dev/null); \
         case \"$s\" in ''|'(sh) Z') ;; '(sh) '*) echo \"{tag} started while $f ran: $s\" >> overlaps;; esac; \
         done; \
         echo $$ > {tag}.pid; while [ ! -e {tag}.release ]; do sleep 0.02; done"
    )
}

/// A lockrun started with a command that may or may not get to run.
pub struct Holder {
    pub process: Proc,
    dir: PathBuf,
    tag: String,
}

impl Holder {
    /// Starts `cmd` (a lockrun command up to its options) with the critical section for `tag`;
    /// `dir` is the working directory the command runs in.
    pub fn spawn(cmd: Command, dir: &Path, tag: &str) -> Holder {
        Self::spawn_running(cmd, dir, tag, &critical(tag))
    }

    /// [`Holder::spawn`] with a script of the test's own, which must write `TAG.pid` (and
    /// `TAG.token`, for [`Holder::token`]) when it starts.
    pub fn spawn_running(mut cmd: Command, dir: &Path, tag: &str, script: &str) -> Holder {
        cmd.args(["--", "sh", "-c", script]).current_dir(dir);
        Holder {
            process: Proc::spawn(&mut cmd),
            dir: dir.to_owned(),
            tag: tag.to_owned(),
        }
    }

    /// [`Holder::spawn`] with lockrun leading a process group of its own, so that the test can
    /// stop lockrun's group and the command's, as a paused VM would ([`Holder::freeze`]).
    pub fn spawn_in_own_group(mut cmd: Command, dir: &Path, tag: &str) -> Holder {
        cmd.process_group(0);
        Self::spawn(cmd, dir, tag)
    }

    /// Waits until the command runs; fails the test, with lockrun's stderr, if it never does.
    pub fn started(self) -> Self {
        let running = wait_until(SOON, || self.running() || !alive(self.process.pid()));
        assert!(
            running && self.running(),
            "holder {} never started its command; lockrun said:\n{}",
            self.tag,
            self.process.stderr_so_far()
        );
        self
    }

    /// A file of this holder's: `TAG.SUFFIX`.
    pub fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.tag))
    }

    /// Whether its command has started (it writes its pid last).
    pub fn running(&self) -> bool {
        read_trimmed(&self.file("pid")).is_some()
    }

    /// The fencing token its command got.
    pub fn token(&self) -> u64 {
        number_in(&self.file("token"))
    }

    /// The lease the backend granted (`LOCKRUN_TTL_MS`).
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(number_in(&self.file("ttl")))
    }

    /// The command's pid (the `sh` of the critical section).
    pub fn child_pid(&self) -> i32 {
        number_in(&self.file("pid")) as i32
    }

    /// Whether the command is still alive.
    pub fn command_alive(&self) -> bool {
        alive(self.child_pid())
    }

    /// Each renewal lockrun has confirmed so far, from its `-vv` lines ("renewed in N ms"): when
    /// the test read the line, and how long the renewal took. Empty without `-vv`.
    pub fn renewals(&self) -> Vec<(Instant, Duration)> {
        self.process
            .stderr_lines()
            .into_iter()
            .filter_map(|(read, line)| {
                let ms = line
                    .strip_prefix("lockrun: renewed in ")?
                    .strip_suffix(" ms")?;
                Some((read, Duration::from_millis(ms.parse().ok()?)))
            })
            .collect()
    }

    /// A moment no earlier than when the last confirmed renewal was sent (it was sent N ms, or a
    /// little more, before its answer, which came before the test read the line).
    pub fn last_renewal_sent(&self) -> Option<Instant> {
        let (read, took) = self.renewals().pop()?;
        Some(read - took)
    }

    /// Lets the command end normally, and waits for lockrun to exit.
    pub fn finish(&mut self) -> Output {
        std::fs::write(self.file("release"), "").expect("write a release file");
        self.exit()
    }

    /// Waits for lockrun to exit on its own.
    pub fn exit(&mut self) -> Output {
        self.process.wait(RUN_LIMIT)
    }

    /// Signals the holding lockrun.
    pub fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    /// Stops lockrun's process group and the command's (started with
    /// [`Holder::spawn_in_own_group`]).
    pub fn freeze(&self) {
        self.signal_groups(Signal::SIGSTOP);
    }

    /// Continues what [`Holder::freeze`] stopped. The command's group may be gone by the time
    /// it is reached: lockrun, continued first, may have stopped it already.
    pub fn thaw(&self) {
        for group in [self.process.pid(), self.child_pid()] {
            let _ = killpg(Pid::from_raw(group), Signal::SIGCONT);
        }
    }

    fn signal_groups(&self, signal: Signal) {
        for group in [self.process.pid(), self.child_pid()] {
            killpg(Pid::from_raw(group), signal).expect("signal a process group");
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // The command may outlive a lockrun killed by a test that failed. Only a process still
        // working in this holder's directory is ours (a pid can be reused).
        let Some(pid) = read_trimmed(&self.file("pid")).and_then(|p| p.parse::<i32>().ok()) else {
            return;
        };
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == self.dir) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGCONT);
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}
