//! The real `lockrun` binary as a test runs it: a command with a clean environment, and a running
//! process whose output is collected as it comes, so that every wait has a bound: a lockrun that
//! hangs fails its test, with what it printed, instead of hanging the suite.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, SigHandler, Signal, kill};
use nix::unistd::Pid;

use super::wait::{SOON, text, wait_until};

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// The longest any lockrun a test runs to completion may take.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// How long the output pipes may stay open after the process exited (a background grandchild
/// may hold them); what came by then is what the test sees.
const DRAIN: Duration = Duration::from_secs(2);

/// A `lockrun` command with no inherited `LOCKRUN_*` settings, stdin closed, and the signals it
/// forwards at their default: a suite started in the background by a shell without job control
/// (`nohup scripts/test.sh &`) would otherwise hand every run INT and QUIT ignored, which lockrun
/// keeps ignored, as `nohup` users expect (a test that wants that sets it itself, later).
pub fn lockrun() -> Command {
    let mut cmd = Command::new(BIN);
    scrub(&mut cmd);
    cmd.stdin(Stdio::null());
    // SAFETY: sigaction(2) only, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for forwarded in FORWARDED {
                signal::signal(forwarded, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    cmd
}

/// The signals lockrun forwards to its command (and leaves ignored when it finds them so).
const FORWARDED: [Signal; 6] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Removes what the test runner's own environment could slip into a run: `LOCKRUN_*` settings,
/// a fencing token, and AWS settings — in their place, the dummy credentials and region that the
/// tests' private DynamoDB accepts, and no instance metadata service (a test reaches nothing but
/// loopback; a developer's own AWS profile is never used).
pub fn scrub(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let text = key.to_string_lossy();
        if text.starts_with("LOCKRUN_") || text.starts_with("AWS_") || key == "FENCING_TOKEN" {
            cmd.env_remove(key);
        }
    }
    cmd.env("AWS_ACCESS_KEY_ID", "lockrun-test")
        .env("AWS_SECRET_ACCESS_KEY", "lockrun-test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/lockrun-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/lockrun-test/credentials",
        );
}

/// Runs `cmd` to completion within [`RUN_LIMIT`].
pub fn output(cmd: &mut Command) -> Output {
    Proc::spawn(cmd).wait(RUN_LIMIT)
}

/// A process started by a test, its stdout and stderr read as they come. Killed on drop (continued
/// first, should it be stopped).
pub struct Proc {
    child: Child,
    stdout: Pipe,
    stderr: Pipe,
}

/// One output pipe, read to its end by a thread.
struct Pipe {
    received: Arc<Mutex<Received>>,
    reader: Option<JoinHandle<()>>,
}

/// What came through a pipe so far, and when: each read's arrival and the length by then.
#[derive(Default)]
struct Received {
    bytes: Vec<u8>,
    arrivals: Vec<(Instant, usize)>,
}

impl Pipe {
    fn read(source: Option<impl Read + Send + 'static>) -> Pipe {
        let received = Arc::new(Mutex::new(Received::default()));
        let reader = source.map(|mut source| {
            let received = Arc::clone(&received);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match source.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut received = lock(&received);
                            received.bytes.extend_from_slice(&buf[..n]);
                            let length = received.bytes.len();
                            received.arrivals.push((Instant::now(), length));
                        }
                    }
                }
            })
        });
        Pipe { received, reader }
    }

    fn text(&self) -> String {
        text(&lock(&self.received).bytes)
    }

    /// Each complete line so far, with when the read that completed it arrived.
    fn lines(&self) -> Vec<(Instant, String)> {
        let received = lock(&self.received);
        let mut lines = Vec::new();
        let mut start = 0;
        for (at, byte) in received.bytes.iter().enumerate() {
            if *byte != b'\n' {
                continue;
            }
            let (arrived, _) = received
                .arrivals
                .iter()
                .find(|(_, length)| *length > at)
                .expect("every byte arrived in a read");
            lines.push((*arrived, text(&received.bytes[start..at])));
            start = at + 1;
        }
        lines
    }

    fn closed(&self) -> bool {
        self.reader.as_ref().is_none_or(JoinHandle::is_finished)
    }

    fn take(&mut self) -> Vec<u8> {
        if self.closed()
            && let Some(reader) = self.reader.take()
        {
            let _ = reader.join();
        }
        std::mem::take(&mut lock(&self.received).bytes)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Proc {
    /// Starts `cmd` with stdout and stderr captured.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        let stdout = Pipe::read(child.stdout.take());
        let stderr = Pipe::read(child.stderr.take());
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its stdin, when the command was given a pipe for it.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// Sends `signal` to the process (not its group).
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid()), signal).expect("signal a process the test started");
    }

    /// Whether it has exited (it is reaped then).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// What it wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.text()
    }

    /// The lines it wrote to stderr so far, each with when the test read it.
    pub fn stderr_lines(&self) -> Vec<(Instant, String)> {
        self.stderr.lines()
    }

    /// Waits up to `limit` for it to exit and returns its status and output; kills it and fails
    /// the test (showing its stderr) when it does not exit in time.
    pub fn wait(&mut self, limit: Duration) -> Output {
        if !wait_until(limit, || self.exited()) {
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!(
                "pid {} did not exit within {limit:?}; stderr so far:\n{}",
                self.pid(),
                self.stderr_so_far()
            );
        }
        let status = self.child.wait().expect("wait for an exited process");
        wait_until(DRAIN, || self.stdout.closed() && self.stderr.closed());
        Output {
            status,
            stdout: self.stdout.take(),
            stderr: self.stderr.take(),
        }
    }
}

/// What the first `most` of `procs` that have already exited wrote to stderr (each such one is
/// reaped): why some of a crowd that should all still run ended early.
pub fn stderr_of_exited(procs: &mut [Proc], most: usize) -> Vec<String> {
    procs
        .iter_mut()
        .filter_map(|p| p.exited().then(|| text(&p.wait(SOON).stderr)))
        .take(most)
        .collect()
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // A stopped process would not die of SIGKILL any later; continue it first.
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
