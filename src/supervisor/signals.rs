//! Signals lockrun receives, as one stream of typed events.
//!
//! Every signal lockrun handles has one handler, which writes the signal's number (one byte) into
//! a pipe and does nothing else (installed through `signal-hook-registry`, beside any handler tokio
//! adds for the same signal); the runtime reads the pipe like any other descriptor, and the
//! supervisor loop decides what each signal means. Handlers are installed once and stay: the
//! forwarded signals before waiting for the lock ([`listen`]), job control and SIGCHLD when the
//! command starts ([`catch`]). Tests feed the same loop from a channel instead.
//!
//! Why not tokio's signal streams: each of the nine costs a registration and a broadcast channel,
//! and merging the forwarded ones took a task each; about 0.2 ms of a 2.9 ms run on the file
//! backend (`lockrun -- true`, interleaved with a build without them), against a handful of
//! system calls here. Arrivals are kept in order and none is lost (short of 64 KiB of them
//! unread); SIGCHLDs read together count as one, as they mean "look again".

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use nix::sys::signal::Signal;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
#[cfg(test)]
use tokio::sync::mpsc;

/// The signals lockrun forwards to the command's process group.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Signals lockrun ignores for itself from its first instruction: SIGPIPE (a closed pipe is an
/// error to report, not a death) and SIGXFSZ (a file-size limit too: `ulimit -f` makes a write
/// fail with EFBIG instead of killing lockrun without a word). The command gets each back as
/// lockrun found it (see [`ignored_on_entry`]).
pub const IGNORED_BY_LOCKRUN: [libc::c_int; 2] = [libc::SIGPIPE, libc::SIGXFSZ];

/// Bit N set: signal N was already ignored when lockrun started.
static IGNORED_ON_ENTRY: AtomicU64 = AtomicU64::new(0);

/// Ignores [`IGNORED_BY_LOCKRUN`], noting which of them lockrun's parent had ignored already.
/// Called once, first thing in `main`.
pub fn ignore_for_lockrun() {
    for signal in IGNORED_BY_LOCKRUN {
        // SAFETY: SIG_IGN installs no handler code; the previous disposition is only compared.
        let previous = unsafe { libc::signal(signal, libc::SIG_IGN) };
        if previous == libc::SIG_IGN {
            IGNORED_ON_ENTRY.fetch_or(1 << signal, Ordering::Relaxed);
        }
    }
}

/// Whether `signal` (one of [`IGNORED_BY_LOCKRUN`]) was ignored when lockrun started: then the
/// command keeps it ignored, as across any exec; else it gets the default back. Reads an atomic
/// only, so a child between its fork and its exec may ask.
pub fn ignored_on_entry(signal: libc::c_int) -> bool {
    IGNORED_ON_ENTRY.load(Ordering::Relaxed) & (1 << signal) != 0
}

/// The pipe's write end, where the handler writes; -1 until [`listen`] made the pipe.
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

/// The arrivals of the signals lockrun handles, in order.
pub struct Signals {
    source: Source,
}

enum Source {
    /// The pipe's read end, and the arrivals read from it but not yet returned.
    Pipe(AsyncFd<ReadEnd>, VecDeque<Signal>),
    /// Signals a test sends.
    #[cfg(test)]
    Fed(mpsc::UnboundedReceiver<Signal>),
}

/// Makes the pipe, installs handlers for [`FORWARDED`] and returns the stream of their arrivals
/// (and of every signal [`catch`] adds later). Once per process; needs a running tokio runtime.
///
/// A forwarded signal that lockrun was started with ignored (`nohup`, `trap '' TERM`, a script's
/// background job) stays ignored, for lockrun and for the command, as across any exec. Every
/// signal lockrun handles is unblocked: a mask inherited from the parent must not make it deaf.
pub fn listen() -> io::Result<Signals> {
    let signals = pipe()?;
    for signal in FORWARDED {
        if !inherited_ignored(signal) {
            catch(signal)?;
        }
    }
    let mut handled = nix::sys::signal::SigSet::empty();
    for signal in FORWARDED
        .into_iter()
        .chain(super::job_control::PASSED_ON)
        .chain([Signal::SIGCHLD])
    {
        handled.add(signal);
    }
    handled.thread_unblock().map_err(io::Error::from)?;
    Ok(signals)
}

/// Whether `signal` is ignored now (before lockrun installed anything for it).
fn inherited_ignored(signal: Signal) -> bool {
    disposition(signal as libc::c_int) == Some(libc::SIG_IGN)
}

/// The handler `signal` has now (`SIG_DFL`, `SIG_IGN` or a function); `None` for a number that
/// is no signal. Async-signal-safe: one system call on this stack.
pub(super) fn disposition(signal: libc::c_int) -> Option<libc::sighandler_t> {
    // SAFETY: only queries the disposition into a zeroed structure on this stack.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        match libc::sigaction(signal, std::ptr::null(), &mut current) {
            0 => Some(current.sa_sigaction),
            _ => None,
        }
    }
}

/// Makes the pipe the handlers write to, and the stream that reads it.
fn pipe() -> io::Result<Signals> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills the two-element array with new descriptors.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Both ends live as long as the process: a handler may run at any moment, even as lockrun
    // exits, and a write to a pipe nobody can read any more would raise SIGPIPE.
    WRITE_END.store(ends[1], Ordering::Release);
    // SAFETY: the read end is registered once and never closed.
    let read = unsafe { AsyncFd::register_with_interest(ReadEnd(ends[0]), Interest::READABLE)? };
    Ok(Signals {
        source: Source::Pipe(read, VecDeque::new()),
    })
}

/// The pipe's read end, which is never closed (see [`pipe`]).
struct ReadEnd(RawFd);

impl AsRawFd for ReadEnd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The signals [`catch`] installed the handler for, as a bit each.
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// Adds `signal` to the stream [`listen`] returned, from now on (once: catching it again adds
/// nothing).
///
/// The handler goes through the registry tokio installs its own through, which keeps every
/// handler of a signal and runs each: tokio's reaper of the processes the AWS SDK starts for
/// `credential_process` may watch SIGCHLD beside the supervisor.
pub fn catch(signal: Signal) -> io::Result<()> {
    let bit = 1u64 << (signal as u32);
    if CAUGHT.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        return Ok(());
    }
    // SAFETY: the action only writes one byte to a pipe and keeps errno, both async-signal-safe.
    unsafe { signal_hook_registry::register(signal as libc::c_int, move || on_signal(signal)) }
        .map(drop)
        .inspect_err(|_| {
            CAUGHT.fetch_and(!bit, Ordering::AcqRel);
        })
}

/// What runs when a caught signal arrives: its number into the pipe.
fn on_signal(signal: Signal) {
    let byte = signal as u8;
    // SAFETY: write(2) is async-signal-safe; errno, which it may change, is put back for the code
    // the signal interrupted. A full pipe (or none yet) drops the byte.
    unsafe {
        let errno = *libc::__errno_location();
        libc::write(
            WRITE_END.load(Ordering::Acquire),
            std::ptr::from_ref(&byte).cast(),
            1,
        );
        *libc::__errno_location() = errno;
    }
}

impl Signals {
    /// A stream of what a test sends on the channel whose receiver is `fed`.
    #[cfg(test)]
    pub fn fed(fed: mpsc::UnboundedReceiver<Signal>) -> Signals {
        Signals {
            source: Source::Fed(fed),
        }
    }

    /// The next arrival; `None` once none can come any more. Cancel-safe: what was read and not
    /// returned is kept for the next call.
    pub async fn recv(&mut self) -> Option<Signal> {
        match &mut self.source {
            Source::Pipe(read, arrived) => loop {
                if let Some(signal) = arrived.pop_front() {
                    return Some(signal);
                }
                let mut ready = read.readable().await.ok()?;
                if let Ok(result) = ready.try_io(|read| read_arrivals(read.get_ref(), arrived)) {
                    result.ok()?;
                }
            },
            #[cfg(test)]
            Source::Fed(fed) => fed.recv().await,
        }
    }

    /// The next arrival if there is one already, without waiting.
    pub fn try_recv(&mut self) -> Option<Signal> {
        match &mut self.source {
            Source::Pipe(read, arrived) => {
                if arrived.is_empty() {
                    let _ = read_arrivals(read.get_ref(), arrived);
                }
                arrived.pop_front()
            }
            #[cfg(test)]
            Source::Fed(fed) => fed.try_recv().ok(),
        }
    }
}

/// Reads what the pipe holds onto `arrived`; `WouldBlock` when it holds nothing.
fn read_arrivals(read: &ReadEnd, arrived: &mut VecDeque<Signal>) -> io::Result<()> {
    let mut bytes = [0u8; 64];
    let n = loop {
        // SAFETY: reads into a local buffer of the length given.
        match unsafe { libc::read(read.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) } {
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            -1 => return Err(io::Error::last_os_error()),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => break n as usize,
        }
    };
    for &byte in &bytes[..n] {
        let Ok(signal) = Signal::try_from(i32::from(byte)) else {
            continue;
        };
        if signal == Signal::SIGCHLD && arrived.contains(&Signal::SIGCHLD) {
            continue;
        }
        arrived.push_back(signal);
    }
    Ok(())
}

/// `work`'s outcome, or the signal that came first (`work` is then dropped, unfinished).
pub async fn unless_signalled<T>(
    work: impl Future<Output = T>,
    signals: &mut Signals,
) -> Result<T, Signal> {
    tokio::select! {
        done = work => Ok(done),
        Some(signal) = signals.recv() => Err(signal),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;

    /// SIGUSR2 is one of lockrun's own (so the spawn tests' check of handlers allows it); nothing
    /// else in the unit tests catches or sends it.
    #[tokio::test]
    async fn a_caught_signal_arrives_once_and_a_handler_installed_before_still_runs() {
        let other = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&other);
        // SAFETY: the action only stores to an atomic.
        unsafe {
            signal_hook_registry::register(libc::SIGUSR2, move || {
                seen.store(true, Ordering::SeqCst)
            })
        }
        .unwrap();
        let mut signals = pipe().unwrap();
        catch(Signal::SIGUSR2).unwrap();
        catch(Signal::SIGUSR2).unwrap();
        nix::sys::signal::raise(Signal::SIGUSR2).unwrap();
        // Other unit tests in this process spawn children, so a SIGCHLD may come first or after.
        let usr2 = async {
            while let Some(signal) = signals.recv().await {
                if signal == Signal::SIGUSR2 {
                    return true;
                }
            }
            false
        };
        let arrived = tokio::time::timeout(Duration::from_secs(5), usr2).await;
        assert_eq!(arrived, Ok(true), "SIGUSR2 never arrived");
        assert!(
            other.load(Ordering::SeqCst),
            "the earlier handler did not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        while let Some(signal) = signals.try_recv() {
            assert_ne!(signal, Signal::SIGUSR2, "caught twice, it arrived twice");
        }
    }
}
