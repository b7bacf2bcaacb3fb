//! Starting the command without copying lockrun: the child is made the way `posix_spawn` makes
//! it, with `clone(CLONE_VM | CLONE_VFORK)`, and runs lockrun's own steps between the clone and
//! the exec (its process group, the parent-death signal, the terminal, telling the watchdog).
//!
//! A `fork` copies lockrun's page tables, and then each of the two processes pays a fault for
//! every page it writes before the exec; on the file backend that was about 0.12 ms of a 2.8 ms
//! run (`bench/file_vs_flock.py`). Here the child borrows lockrun's memory and lockrun's thread
//! waits, suspended, until the child has executed the command or given up; the child runs on a
//! stack of its own. `std`'s `Command` does the same through `posix_spawn`, but only when nothing
//! is to be run between the clone and the exec, and lockrun always has something.
//!
//! What the child may do, since every byte it writes is lockrun's: system calls on what was
//! prepared before the clone (no allocation, no locks). Its signal handlers are lockrun's code, so
//! it starts with every signal blocked, resets every caught signal to its default, and only then
//! unblocks them all, as `std` leaves a spawned command's mask. An exec that fails leaves its
//! `errno` where lockrun reads it after the clone returns, and the child exits with 127.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::unistd::Pid;

/// What the child does between the clone and the exec, in this order (the order `std`'s
/// `pre_exec` closures ran in). The default is none of them.
#[derive(Default)]
pub struct Steps {
    /// The signal the kernel sends the command when lockrun dies, if any; a command whose
    /// parent is already gone by then kills itself.
    pub on_parent_death: Option<i32>,
    /// Make the command's group the terminal's foreground group.
    pub take_terminal: bool,
    /// Where to store the command's process group before the exec, for the watchdog.
    pub tell_group: Option<super::watchdog::GroupSlot>,
}

/// A started command: its pid (also its process group) and, where the kernel gives one, a pidfd
/// that turns readable when it exits.
pub struct Spawned {
    pub pid: Pid,
    pub pidfd: Option<OwnedFd>,
}

/// The child's stack: room for `execvpe`'s search buffer and, for a script without `#!`, its copy
/// of the arguments, besides the steps' few frames.
const STACK_BASE: usize = 256 * 1024;

/// Everything the child reads, built before the clone.
struct Prepared {
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    parent: libc::pid_t,
    steps: Steps,
    /// The child's `errno` when a step or the exec failed; 0 while all went well.
    failure: AtomicI32,
}

/// Starts `program` with `args` in its own process group, with the environment lockrun has minus
/// `env_remove` plus `env`, running `steps` before the exec. Returns once the command has been
/// executed, or with the exec's error (the child is then reaped).
pub fn spawn(
    program: &OsStr,
    args: &[OsString],
    env: &[(String, String)],
    env_remove: &[String],
    steps: Steps,
) -> io::Result<Spawned> {
    let program = c_string(program.as_bytes())?;
    let mut arguments = vec![program.clone()];
    for arg in args {
        arguments.push(c_string(arg.as_bytes())?);
    }
    let mut made = Vec::with_capacity(env.len());
    let prepared = Prepared {
        envp: environment(env, env_remove, &mut made)?,
        program,
        argv: pointers(&arguments),
        parent: std::process::id() as libc::pid_t,
        steps,
        failure: AtomicI32::new(0),
    };
    let stack = Stack::new(STACK_BASE + 8 * arguments.len())?;
    #[cfg(debug_assertions)]
    assert_only_known_signals_caught();
    let (pid, pidfd) = clone_child(&prepared, &stack)?;
    let failure = prepared.failure.load(Ordering::SeqCst);
    if failure != 0 {
        // The child has exited (127) by now; reap it so that no zombie is left.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(failure));
    }
    Ok(Spawned {
        pid: Pid::from_raw(pid),
        pidfd,
    })
}

fn c_string(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or variable holds a NUL byte",
        )
    })
}

/// The command's environment: lockrun's own entries, in place, without the keys in `remove` or
/// `set`, then `set`'s (which so wins), built as `KEY=VALUE` strings kept in `made`.
fn environment(
    set: &[(String, String)],
    remove: &[String],
    made: &mut Vec<CString>,
) -> io::Result<Vec<*const libc::c_char>> {
    let mut out = Vec::with_capacity(64);
    for entry in crate::environment::entries() {
        let key = crate::environment::key(entry);
        let replaced = set.iter().any(|(k, _)| k.as_bytes() == key);
        let removed = remove.iter().any(|k| k.as_bytes() == key);
        if !(replaced || removed) {
            out.push(entry.as_ptr());
        }
    }
    for (key, value) in set {
        made.push(c_string(format!("{key}={value}"))?);
    }
    out.extend(made.iter().map(|s| s.as_ptr()));
    out.push(std::ptr::null());
    Ok(out)
}

/// A NULL-terminated array of pointers into `strings`, which must outlive it.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The system's page size (4 KiB on most, 16 or 64 KiB on some arm64 kernels), which `mmap`
/// lengths, `mprotect` and `madvise` ranges are counted in.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf only reads a value the kernel handed the process at exec.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// The child's stack: an anonymous mapping whose lowest page is left inaccessible, so an
/// overflow faults instead of writing over lockrun's memory.
pub(super) struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    pub(super) fn new(wanted: usize) -> io::Result<Stack> {
        let page = page_size();
        let len = (wanted.div_ceil(page) + 1) * page;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack's top (stacks grow down), 16-byte aligned.
    pub(super) fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, as `clone` wants.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child no longer runs on it (it has executed or
        // exited once `clone` returned).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Clones the child, with every signal blocked around it in lockrun; returns its pid and pidfd.
fn clone_child(prepared: &Prepared, stack: &Stack) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    let arg = std::ptr::from_ref(prepared)
        .cast_mut()
        .cast::<libc::c_void>();
    let blocked = block_all_signals()?;
    let mut pidfd: libc::c_int = -1;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: `child` runs on its own stack, reads only `prepared` (which outlives the call: this
    // thread is suspended until the child has executed or exited) and makes only system calls.
    let mut pid = unsafe {
        libc::clone(
            child,
            stack.top(),
            flags | libc::CLONE_PIDFD,
            arg,
            &mut pidfd as *mut libc::c_int,
        )
    };
    let mut error = io::Error::last_os_error();
    if pid < 0 && error.raw_os_error() == Some(libc::EINVAL) {
        // A kernel older than 5.2 has no CLONE_PIDFD; the exit is then found through SIGCHLD.
        pidfd = -1;
        // SAFETY: as above.
        pid = unsafe { libc::clone(child, stack.top(), flags, arg) };
        error = io::Error::last_os_error();
    }
    restore_signals(&blocked);
    if pid < 0 {
        return Err(error);
    }
    // SAFETY: the kernel made this descriptor for us, and nothing else owns it.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    Ok((pid, pidfd))
}

pub(super) fn block_all_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: plain out-parameters for the signal-mask calls.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        match libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous) {
            0 => Ok(previous),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

pub(super) fn restore_signals(previous: &libc::sigset_t) {
    // SAFETY: reinstates the mask saved by `block_all_signals`.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, previous, std::ptr::null_mut()) };
}

/// The child, between the clone and the exec. Makes only system calls, on its own stack, reading
/// `prepared`; returns only by exiting.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Prepared` that `spawn` keeps alive until this child has executed or
    // exited.
    let prepared = unsafe { &*arg.cast::<Prepared>() };
    // SAFETY: system calls on prepared, NUL-terminated data; see `steps`.
    let errno = unsafe {
        match steps(prepared) {
            Ok(()) => {
                libc::execvpe(
                    prepared.program.as_ptr(),
                    prepared.argv.as_ptr(),
                    prepared.envp.as_ptr(),
                );
                last_errno()
            }
            Err(errno) => errno,
        }
    };
    prepared.failure.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: ends the child without running anything of lockrun's (no atexit, no flush).
    unsafe { libc::_exit(127) }
}

/// # Safety
/// Only in the cloned child: it shares lockrun's memory, so it makes system calls and nothing
/// else.
unsafe fn steps(prepared: &Prepared) -> Result<(), i32> {
    // SAFETY: each call is a plain system call on values of this child's own stack.
    unsafe {
        check(libc::setpgid(0, 0))?;
        default_signals();
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut(),
        ))?;
        if let Some(signal) = prepared.steps.on_parent_death {
            check(libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong))?;
        }
        if libc::getppid() != prepared.parent {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        if prepared.steps.take_terminal {
            // A background group calling tcsetpgrp gets SIGTTOU unless it ignores it.
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            check(libc::tcsetpgrp(0, libc::getpid()))?;
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        }
        if let Some(slot) = prepared.steps.tell_group {
            slot.tell(libc::getpid());
        }
    }
    Ok(())
}

/// Every signal lockrun catches anywhere — the ones it forwards ([`FORWARDED`](super::FORWARDED)),
/// job control, SIGCHLD, and SIGSEGV and SIGBUS where the Rust runtime watches for stack
/// overflows — and SIGPIPE and SIGXFSZ, which it ignores: the dispositions the child puts back
/// before it unblocks signals. Checking only these, rather than asking the kernel about all 64,
/// saves the child (and lockrun, suspended meanwhile) about 15 µs (64 queries took 20 µs on a
/// 2-core VM); a debug build checks before each spawn that no other signal has a handler.
fn caught() -> impl Iterator<Item = libc::c_int> {
    const OTHERS: [libc::c_int; 7] = [
        libc::SIGTSTP,
        libc::SIGCONT,
        libc::SIGCHLD,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGPIPE,
        libc::SIGXFSZ,
    ];
    super::FORWARDED
        .into_iter()
        .map(|signal| signal as libc::c_int)
        .chain(OTHERS)
}

/// Fails (in debug builds, which the tests run) when a signal outside [`caught`] has a handler:
/// the child would not reset it, and a signal arriving before its exec would run lockrun's code
/// in it.
#[cfg(debug_assertions)]
fn assert_only_known_signals_caught() {
    for signal in 1..=libc::SIGRTMAX() {
        if caught().any(|known| known == signal) {
            continue;
        }
        let Some(handler) = super::signals::disposition(signal) else {
            continue;
        };
        assert!(
            handler == libc::SIG_DFL || handler == libc::SIG_IGN,
            "signal {signal} has a handler but is not in spawn::caught"
        );
    }
}

/// Every signal of [`caught`] that has a handler goes back to its default (the handler is
/// lockrun's code, which must never run in the child), and so do SIGPIPE and SIGXFSZ, which
/// lockrun ignores for itself, unless they were ignored already when lockrun started; other
/// ignored signals stay ignored, as across an exec.
///
/// # Safety
/// As [`steps`].
unsafe fn default_signals() {
    use super::signals::{IGNORED_BY_LOCKRUN, ignored_on_entry};
    for signal in caught() {
        let Some(handler) = super::signals::disposition(signal) else {
            continue;
        };
        let ignored_for_lockrun = IGNORED_BY_LOCKRUN.contains(&signal) && !ignored_on_entry(signal);
        if handler == libc::SIG_DFL || (handler == libc::SIG_IGN && !ignored_for_lockrun) {
            continue;
        }
        // SAFETY: sets a disposition with a structure on this stack.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
    }
}

fn check(result: libc::c_int) -> Result<(), i32> {
    match result {
        -1 => Err(last_errno()),
        _ => Ok(()),
    }
}

fn last_errno() -> i32 {
    // SAFETY: reads this thread's `errno`.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit_code(pid: Pid) -> i32 {
        let mut status = 0;
        // SAFETY: waits for a child this test started, into a local.
        assert_eq!(
            unsafe { libc::waitpid(pid.as_raw(), &mut status, 0) },
            pid.as_raw()
        );
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn the_command_gets_its_arguments_its_group_and_the_environment_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = r#"printf '%s|%s|%s|%s' "$1" "$LOCKRUN_SPAWN_TEST" "${HOME-unset}" "$(ps -o pgid= $$)" > "$2""#;
        let args = ["-c", script, "sh", "one two", out.to_str().unwrap()].map(OsString::from);
        let spawned = spawn(
            OsStr::new("sh"),
            &args[..],
            &[("LOCKRUN_SPAWN_TEST".into(), "set".into())],
            &["HOME".into()],
            Steps::default(),
        )
        .unwrap();
        assert!(spawned.pidfd.is_some());
        assert_eq!(exit_code(spawned.pid), 0);
        let seen = std::fs::read_to_string(&out).unwrap();
        let group = seen.rsplit('|').next().unwrap().trim();
        assert_eq!(group, spawned.pid.to_string(), "{seen}");
        assert!(seen.starts_with("one two|set|unset|"), "{seen}");
    }

    #[test]
    fn the_command_inherits_every_variable_once_and_a_variable_set_replaces_its_inherited_value() {
        let path = format!("/nowhere:{}", std::env::var("PATH").unwrap());
        let spawned = spawn(
            OsStr::new("sleep"),
            &[OsString::from("10")],
            &[("PATH".into(), path.clone())],
            &["HOME".into()],
            Steps::default(),
        )
        .unwrap();
        // What the kernel was handed at the exec, entry by entry (a shell would tidy it up). The
        // clone returns as the exec replaces the memory, before the new stack holds the
        // environment: until then the file reads empty.
        let read = || std::fs::read(format!("/proc/{}/environ", spawned.pid)).unwrap();
        let mut environ = read();
        for _ in 0..500 {
            if !environ.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            environ = read();
        }
        let _ = nix::sys::signal::kill(spawned.pid, nix::sys::signal::Signal::SIGKILL);
        exit_code(spawned.pid);
        let got: Vec<&[u8]> = environ
            .split(|&b| b == 0)
            .filter(|e| !e.is_empty())
            .collect();
        let mut wanted: Vec<Vec<u8>> = std::env::vars_os()
            .filter(|(key, _)| key != "PATH" && key != "HOME")
            .map(|(key, value)| [key.as_bytes(), b"=", value.as_bytes()].concat())
            .collect();
        wanted.push(format!("PATH={path}").into_bytes());
        assert_eq!(got, wanted);
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_an_error_of_its_kind() {
        let missing = spawn(
            OsStr::new("no-such-program-here"),
            &[],
            &[],
            &[],
            Steps::default(),
        );
        assert_eq!(missing.err().unwrap().kind(), io::ErrorKind::NotFound);
        let directory = spawn(OsStr::new("/"), &[], &[], &[], Steps::default());
        assert_eq!(
            directory.err().unwrap().kind(),
            io::ErrorKind::PermissionDenied
        );
        // The children that gave up were reaped: no zombie is left to this thread.
        let children = std::fs::read_to_string("/proc/thread-self/children").unwrap();
        assert_eq!(children.trim(), "");
    }

    #[test]
    fn a_step_that_fails_stops_the_spawn_with_its_error() {
        let steps = Steps {
            on_parent_death: Some(100_000),
            ..Steps::default()
        };
        let failed = spawn(OsStr::new("true"), &[], &[], &[], steps);
        assert_eq!(failed.err().unwrap().raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn a_nul_byte_in_an_argument_is_refused_before_anything_starts() {
        let args = [OsString::from("a\0b")];
        let refused = spawn(OsStr::new("true"), &args[..], &[], &[], Steps::default());
        assert_eq!(refused.err().unwrap().kind(), io::ErrorKind::InvalidInput);
    }
}
