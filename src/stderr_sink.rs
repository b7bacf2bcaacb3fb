//! Where lockrun's own messages are written: standard error, without ever blocking lockrun.
//!
//! A stderr whose reader stopped reading (a pipe to a stuck logger, `2>&1 | less` left at a
//! prompt, a terminal paused with Ctrl-S) would stall whatever writes a message — and the
//! message that says the lease is lost comes right before the command is stopped, so a blocked
//! write would leave the command running past its lease. So a pipe or a terminal is written
//! through a descriptor of lockrun's own, opened non-blocking on the same object
//! (`/proc/self/fd/2` gives a new open file description: the command, which shares fd 2, still
//! writes in blocking mode), and a socket with `MSG_DONTWAIT`. What does not fit waits in a
//! bounded backlog, sent before the next message and at exit (for up to [`EXIT_FLUSH`]); past
//! [`BACKLOG`] bytes, further messages are dropped, and how many is said once there is room. A
//! file (or `/dev/null`) is written directly: it never stays full.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most message bytes kept waiting for a full stderr.
const BACKLOG: usize = 64 * 1024;
/// How long lockrun waits at exit for a full stderr to take what is still waiting.
pub const EXIT_FLUSH: Duration = Duration::from_secs(2);

const STDERR: RawFd = 2;

/// How messages reach stderr; chosen at the first message.
enum Way {
    /// Blocking writes on fd 2: a file, `/dev/null`, or what could not be reopened.
    Direct,
    /// Non-blocking writes on lockrun's own descriptor for the pipe or terminal on fd 2.
    Own(OwnedFd),
    /// Non-blocking sends on the socket at fd 2.
    Socket,
}

struct Sink {
    way: Option<Way>,
    /// Bytes not yet taken by a full stderr, in order.
    backlog: Vec<u8>,
    /// Messages dropped since the backlog filled.
    dropped: usize,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    way: None,
    backlog: Vec::new(),
    dropped: 0,
});

/// Writes `line` (a whole message, newline included) to stderr, or keeps it for later when
/// stderr cannot take it now. Never blocks on a pipe, terminal or socket.
pub fn write_line(line: &[u8]) {
    let mut sink = SINK.lock().unwrap_or_else(PoisonError::into_inner);
    sink.send_backlog();
    if sink.backlog.is_empty() {
        let sent = sink.send(line);
        sink.keep(&line[sent..]);
    } else {
        sink.keep(line);
    }
}

/// Sends what is waiting, giving a full stderr up to `limit` to take it: called at exit.
pub fn flush(limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut sink = SINK.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        sink.send_backlog();
        let left = deadline.saturating_duration_since(Instant::now());
        if sink.backlog.is_empty() || left.is_zero() || !sink.wait_writable(left) {
            return;
        }
    }
}

impl Sink {
    fn way(&mut self) -> &Way {
        self.way.get_or_insert_with(choose_way)
    }

    /// Sends as much of `bytes` as stderr takes now; returns how much went (all of it when
    /// stderr is gone: nothing would ever take it).
    fn send(&mut self, bytes: &[u8]) -> usize {
        let mut sent = 0;
        while sent < bytes.len() {
            let rest = &bytes[sent..];
            // SAFETY: writes from a live slice to a descriptor number; no memory is kept.
            let n = unsafe {
                match self.way() {
                    Way::Direct => libc::write(STDERR, rest.as_ptr().cast(), rest.len()),
                    Way::Own(fd) => libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()),
                    Way::Socket => libc::send(
                        STDERR,
                        rest.as_ptr().cast(),
                        rest.len(),
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    ),
                }
            };
            match usize::try_from(n) {
                Ok(0) => return bytes.len(),
                Ok(n) => sent += n,
                Err(_) => match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) => return sent,
                    // A closed, broken or failing stderr: the message has nowhere to go.
                    _ => return bytes.len(),
                },
            }
        }
        sent
    }

    fn send_backlog(&mut self) {
        if self.backlog.is_empty() {
            return;
        }
        let backlog = std::mem::take(&mut self.backlog);
        let sent = self.send(&backlog);
        self.backlog = backlog;
        self.backlog.drain(..sent);
        if self.backlog.is_empty() && self.dropped > 0 {
            let note = format!(
                "lockrun: {} message(s) dropped: stderr was not being read\n",
                self.dropped
            );
            self.dropped = 0;
            let sent = self.send(note.as_bytes());
            self.keep(&note.as_bytes()[sent..]);
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match self.backlog.len() + bytes.len() <= BACKLOG {
            true => self.backlog.extend_from_slice(bytes),
            false => self.dropped += 1,
        }
    }

    /// Waits up to `limit` for stderr to take more; `false` if it will not (a signal ends the
    /// wait early, and the caller tries again with what is left of its time).
    fn wait_writable(&mut self, limit: Duration) -> bool {
        let fd = match self.way() {
            Way::Direct => return false,
            Way::Own(fd) => fd.as_raw_fd(),
            Way::Socket => STDERR,
        };
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms = libc::c_int::try_from(limit.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: polls one entry of a local variable.
        match unsafe { libc::poll(&mut pollfd, 1, ms) } {
            ready if ready > 0 => pollfd.revents & libc::POLLOUT != 0,
            0 => false,
            _ => std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR),
        }
    }
}

/// A pipe or a terminal gets a non-blocking descriptor of lockrun's own, a socket non-blocking
/// sends; anything else (or a reopen that failed) is written as it is.
fn choose_way() -> Way {
    // SAFETY: a zeroed `stat` is a valid buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a descriptor number into a local buffer.
    if unsafe { libc::fstat(STDERR, &mut stat) } != 0 {
        return Way::Direct;
    }
    let kind = stat.st_mode & libc::S_IFMT;
    // SAFETY: asks about a descriptor number.
    let terminal = unsafe { libc::isatty(STDERR) } == 1;
    if kind == libc::S_IFSOCK {
        return Way::Socket;
    }
    if kind != libc::S_IFIFO && !terminal {
        return Way::Direct;
    }
    // O_NOCTTY: a terminal opened here never becomes lockrun's controlling terminal.
    let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: opens a path from a C string literal.
    let fd = unsafe { libc::open(c"/proc/self/fd/2".as_ptr(), flags) };
    match fd >= 0 {
        // SAFETY: a descriptor just opened, owned by nobody else.
        true => Way::Own(unsafe { OwnedFd::from_raw_fd(fd) }),
        false => Way::Direct,
    }
}
