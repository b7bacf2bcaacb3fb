//! The watchdog: a tiny process that outlives lockrun and stops the command's whole tree if
//! lockrun dies without saying goodbye (SIGKILL, the OOM killer, a crash).
//!
//! The kernel's parent-death signal reaches only the command itself, and not even that once the
//! command has executed a setuid or file-capability program (`sudo`, `ping`); the command's own
//! children would run on beside the next holder. So just before the command starts, lockrun forks
//! the watchdog, which keeps only the read end of a pipe: every other descriptor is closed at
//! once, so it never keeps the lock, a backend connection or the terminal. lockrun keeps the
//! write end (close-on-exec, so the command never has it) and writes to it what the watchdog must
//! stop: the command's process group, and — where there is no cgroup of the command's own — each
//! descendant lockrun saw leave that group. When lockrun ends normally it writes "disarm" and the
//! watchdog exits quietly (background processes a command leaves behind after a normal end keep
//! running, as with `flock`). When the pipe closes without that, lockrun is gone: the watchdog
//! kills the cgroup (`cgroup.kill`), or the group and every pid it was told of, and exits.
//!
//! After the fork the watchdog runs only async-signal-safe system calls on its own stack — no
//! allocation, no locks — since lockrun may have had other threads.
//!
//! What remains possible: a SIGKILL of the watchdog itself (then lockrun runs on as before, with
//! only the parent-death signal), and, without a cgroup, a descendant that leaves the command's
//! group and escapes in the moment between lockrun's last look (every 100 ms, and on every
//! SIGCHLD) and lockrun's death.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::unistd::Pid;

use super::cgroup::Cgroup;

/// Message tags on the pipe; each message is a tag and a pid (`i32`, native endian).
const TAG_GROUP: u8 = b'g';
const TAG_PID: u8 = b'p';
const TAG_DISARM: u8 = b'd';
const MESSAGE: usize = 5;
/// Pids the watchdog can remember (escapees are rare; more are dropped, never overflow).
const MAX_PIDS: usize = 4096;

/// lockrun's end of the watchdog.
pub struct Watchdog {
    pid: Pid,
    pipe: OwnedFd,
    cgroup: Option<Cgroup>,
    told: std::collections::HashSet<i32>,
}

impl Watchdog {
    /// Forks the watchdog. Call before the command is spawned, after the lock is held.
    pub fn start() -> io::Result<Watchdog> {
        let cgroup = Cgroup::create(std::process::id());
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let paths = cgroup.as_ref().map(|c| (c.kill.as_ptr(), c.path.as_ptr()));
        // SAFETY: the child runs only `watch`, which makes async-signal-safe system calls on its
        // own stack and never returns (it ends with `_exit`); the parent continues normally.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => {
                // SAFETY: as above; `kill_path` points into `cgroup`, which the child's copy of
                // the address space keeps alive.
                unsafe { watch(read.as_raw_fd(), paths) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(read);
                Ok(Watchdog {
                    pid: child,
                    pipe: write,
                    cgroup,
                    told: std::collections::HashSet::new(),
                })
            }
        }
    }

    /// The watchdog's pid (lockrun's descendant walks leave it out).
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Whether the command runs in a cgroup of its own (then escapees need not be reported).
    pub fn has_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// The path the command writes its pid to before exec, to join its cgroup.
    pub fn cgroup_procs(&self) -> Option<&std::ffi::CStr> {
        self.cgroup.as_ref().map(|c| c.procs.as_c_str())
    }

    /// Tells the watchdog the command's process group.
    pub fn watch_group(&mut self, group: Pid) {
        self.send(TAG_GROUP, group.as_raw());
    }

    /// Tells the watchdog a descendant that left the command's group (once per pid).
    pub fn watch_pid(&mut self, pid: Pid) {
        if self.cgroup.is_none() && self.told.insert(pid.as_raw()) {
            self.send(TAG_PID, pid.as_raw());
        }
    }

    fn send(&self, tag: u8, pid: i32) {
        let mut message = [0u8; MESSAGE];
        message[0] = tag;
        message[1..].copy_from_slice(&pid.to_ne_bytes());
        if let Err(e) = nix::unistd::write(&self.pipe, &message) {
            crate::debug!("cannot tell the watchdog: {}", e.desc());
        }
    }

    /// lockrun is ending normally: the watchdog exits without stopping anything, and what the
    /// command left running leaves its cgroup.
    pub fn disarm(self) {
        self.send(TAG_DISARM, 0);
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
    }
}

/// The watchdog's whole life: read messages until "disarm" (exit quietly) or end of file
/// (lockrun died: kill everything it was told of), then `_exit`.
///
/// # Safety
/// Runs in a freshly forked child of a possibly multi-threaded process: it must only make
/// async-signal-safe calls, allocate nothing, and never return.
unsafe fn watch(pipe: RawFd, cgroup: Option<(*const libc::c_char, *const libc::c_char)>) -> ! {
    // SAFETY (whole body): plain system calls on values owned by this stack frame.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_NAME, c"lockrun-watch".as_ptr());
        close_all_but(pipe);
        let mut group: i32 = 0;
        let mut pids = [0i32; MAX_PIDS];
        let mut count = 0usize;
        let mut message = [0u8; MESSAGE];
        let mut filled = 0usize;
        loop {
            let n = libc::read(
                pipe,
                message.as_mut_ptr().add(filled).cast(),
                MESSAGE - filled,
            );
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            if n == 0 {
                break;
            }
            filled += n as usize;
            if filled < MESSAGE {
                continue;
            }
            filled = 0;
            let pid = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
            match message[0] {
                TAG_DISARM => libc::_exit(0),
                TAG_GROUP => group = pid,
                TAG_PID if count < MAX_PIDS => {
                    pids[count] = pid;
                    count += 1;
                }
                _ => {}
            }
        }
        // lockrun is gone without disarming: stop everything the command started.
        if let Some((kill, _)) = cgroup {
            let fd = libc::open(kill, libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, c"1".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
        if group > 0 {
            libc::kill(-group, libc::SIGKILL);
        }
        for pid in &pids[..count] {
            if *pid > 0 {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        // The cgroup can go once the killed processes are gone (a second at most).
        if let Some((_, dir)) = cgroup {
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            for _ in 0..100 {
                if libc::rmdir(dir) == 0 {
                    break;
                }
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
        }
        libc::_exit(0)
    }
}

/// Closes every descriptor but `keep`, so the watchdog holds no lock, connection or terminal.
///
/// # Safety
/// Async-signal-safe; for the forked watchdog only.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: close_range and close are plain system calls on descriptors of this process.
    unsafe {
        let max = libc::c_uint::MAX;
        let keep = keep as libc::c_uint;
        let low = if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0 as libc::c_uint, keep - 1, 0)
        } else {
            0
        };
        let high = libc::syscall(libc::SYS_close_range, keep + 1, max, 0);
        if low < 0 || high < 0 {
            // Kernels before 5.9: close them one by one, up to the descriptor limit.
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            for fd in 0..top {
                if fd as libc::c_uint != keep {
                    libc::close(fd);
                }
            }
        }
    }
}
