//! The watchdog: a tiny process that outlives lockrun and stops the command's whole tree if
//! lockrun dies without saying goodbye (SIGKILL, the OOM killer, a crash).
//!
//! The kernel's parent-death signal reaches only the command itself, and not even that once the
//! command has executed a setuid or file-capability program (`sudo`, `ping`); the command's own
//! children would run on beside the next holder. So before the command starts, lockrun forks the
//! watchdog — while it waits for the lock, or for the server's answer, when it has to (see
//! [`Standby`]: then the fork is not between the lock being won and the command starting), else
//! just before the command — in a session of its own (a kill of lockrun's process group spares
//! it). The watchdog keeps only the read end of a pipe, and a waiter's inotify instance (see
//! [`leave_last_close`]): every other descriptor is closed at once, so it never keeps the lock, a
//! backend connection or the terminal. The command stores its own process group, before its
//! exec, in a page shared with the watchdog (see [`GroupSlot`]), so that it is known however soon
//! lockrun dies. lockrun keeps the pipe's write end (close-on-exec, so the command never has it)
//! and writes to it the rest of what the watchdog must stop: each descendant lockrun saw leave the
//! command's group, and, once a command that runs for a while has been adopted into a cgroup of
//! its own (see `cgroup`), that cgroup — after which escapees need not be told. When lockrun ends
//! normally it writes "disarm" and the watchdog exits quietly (background processes a command
//! leaves behind after a normal end keep running, as with `flock`).
//!
//! When the pipe closes without that, lockrun is dying. The watchdog waits until lockrun's
//! children have been handed to a new parent, then sweeps `/proc` for the command's whole tree by
//! ancestry (see `sweep`), freezing each process it finds, so a descendant that left the group an
//! instant before lockrun died is still found through its parent; then it kills the cgroup
//! (`cgroup.kill`), the group and every process it found or was told of, and exits. For that the
//! command has no parent-death signal while a watchdog runs: it would kill the command before the
//! sweep could find its children through it.
//!
//! The watchdog is a fork made with `clone` onto a stack of its own, with every signal blocked
//! (and it keeps them blocked: none of lockrun's handlers ever runs in it) and without the C
//! library's fork handlers. It runs only async-signal-safe system calls on that stack — no
//! allocation, no locks — since lockrun may have had other threads.
//!
//! A fork copies lockrun's page tables and makes both processes fault on each page they write
//! afterwards: that was most of what the watchdog cost a run (about 0.45 ms of a 3.2 ms
//! `lockrun -- true` on a 2-core virtual machine, measured by leaving the watchdog out). So
//! lockrun's heap and its main thread's stack, which the watchdog never touches, are marked not
//! to be copied for the one fork (`MADV_DONTFORK`, cleared again at once): lockrun then writes
//! them without a fault: 31 fewer a run, 0.17 ms (3.67 → 3.50 ms for an uncontended run on the
//! file backend, interleaved with flock's 2.84 ms). A clone that shared lockrun's memory
//! (`CLONE_VM`, as the command's own start does) would save the rest, but the OOM killer kills
//! every process that shares its victim's memory, so an OOM kill of lockrun would take such a
//! watchdog with it, which is one of the deaths it is there for.
//!
//! What remains possible: a SIGKILL of the watchdog together with lockrun (then the command's
//! tree runs on), and, before adoption or without a cgroup, a descendant that left the command's
//! group *and* lost its parent in the tree (a double fork whose middle process exited) in the
//! moment between lockrun's last look (every 100 ms, and on every SIGCHLD) and lockrun's death.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use nix::unistd::Pid;

use super::cgroup::Cgroup;
use super::spawn::page_size;
use super::sweep::{Tree, freeze_tree};

/// Message tags on the pipe; each message is a tag and a pid (`i32`, native endian). A cgroup
/// message carries the length of the cgroup's path instead, and the path follows.
const TAG_PID: u8 = b'p';
const TAG_CGROUP: u8 = b'c';
/// The command's tree is in the cgroup: the pids told so far can be forgotten.
const TAG_ADOPTED: u8 = b'a';
const TAG_DISARM: u8 = b'd';
const MESSAGE: usize = 5;
/// The longest cgroup path the watchdog takes: a message and its path go in one write no longer
/// than `PIPE_BUF`, so that it never interleaves with the main thread's messages.
const MAX_CGROUP_PATH: usize = 4000;
/// What the watchdog appends to the cgroup's path to kill it.
const CGROUP_KILL: &[u8] = b"/cgroup.kill\0";

/// lockrun's end of the watchdog.
pub struct Watchdog {
    pid: Pid,
    pipe: Arc<OwnedFd>,
    group: GroupPage,
    told: std::collections::HashSet<i32>,
    adoption: Option<Adoption>,
}

/// The command's move into a cgroup of its own, on a thread of its own.
struct Adoption {
    thread: std::thread::JoinHandle<Option<Cgroup>>,
    /// Set by lockrun when it ends: stop moving processes.
    stop: Arc<AtomicBool>,
    /// Set by the thread once the tree is in the cgroup.
    done: Arc<AtomicBool>,
}

impl Watchdog {
    /// Forks the watchdog. Call before the command is spawned: after the lock is held, or while
    /// waiting for it (see [`Standby`]).
    pub fn start() -> io::Result<Watchdog> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let group = GroupPage::map()?;
        let lockrun = std::process::id() as i32;
        let child = fork_watch(read.as_raw_fd(), lockrun, group.slot)?;
        drop(read);
        Ok(Watchdog {
            pid: child,
            pipe: Arc::new(write),
            group,
            told: std::collections::HashSet::new(),
            adoption: None,
        })
    }

    /// The watchdog's pid (lockrun's descendant walks leave it out).
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Whether the command's tree is in a cgroup of its own (then escapees need not be told).
    pub fn adopted(&self) -> bool {
        self.adoption
            .as_ref()
            .is_some_and(|a| a.done.load(Ordering::Acquire))
    }

    /// Starts moving the command's tree into a cgroup of its own, on a thread (once; where the
    /// system allows no cgroup, nothing changes).
    pub fn adopt(&mut self) {
        if self.adoption.is_some() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (pipe, skip) = (Arc::clone(&self.pipe), self.pid);
        let (thread_stop, thread_done) = (Arc::clone(&stop), Arc::clone(&done));
        let thread = std::thread::Builder::new()
            .name("lockrun-adopt".into())
            .spawn(move || adopt_tree(&pipe, skip, &thread_stop, &thread_done));
        match thread {
            Ok(thread) => self.adoption = Some(Adoption { thread, stop, done }),
            Err(e) => crate::debug!("cannot adopt the command into a cgroup: {e}"),
        }
    }

    /// Where the command tells the watchdog its process group itself, before exec (see
    /// [`GroupSlot`]): lockrun may die the moment the command runs, before it could say so.
    pub fn group_slot(&self) -> GroupSlot {
        self.group.slot
    }

    /// Tells the watchdog a descendant that left the command's group (once per pid).
    pub fn watch_pid(&mut self, pid: Pid) {
        if !self.adopted() && self.told.insert(pid.as_raw()) {
            send(&self.pipe, TAG_PID, pid.as_raw());
        }
    }

    /// lockrun is ending normally: the watchdog exits without stopping anything, and what the
    /// command left running leaves its cgroup.
    pub fn disarm(self) {
        let cgroup = self.adoption.and_then(|adoption| {
            adoption.stop.store(true, Ordering::Relaxed);
            adoption.thread.join().ok().flatten()
        });
        send(&self.pipe, TAG_DISARM, 0);
        if let Some(cgroup) = cgroup {
            cgroup.remove();
        }
    }
}

/// A page lockrun maps shared before forking the watchdog, where the command stores its process
/// group between its clone and its exec: a store to memory the watchdog also sees, read only once
/// lockrun is gone. A write to the watchdog's pipe would wake it at the command's first instant,
/// and the scheduler, seeing one more runnable process on that CPU, then often moved the command
/// to the other one at its exec (load balancing on exec), where it waited behind whatever ran.
/// lockrun's mapping goes with its [`Watchdog`]; the watchdog keeps its own.
struct GroupPage {
    slot: GroupSlot,
}

impl GroupPage {
    fn map() -> io::Result<GroupPage> {
        // SAFETY: a fresh shared anonymous mapping of one page; nothing else refers to it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(GroupPage {
            slot: GroupSlot { at: at as usize },
        })
    }
}

impl Drop for GroupPage {
    /// The command, if one was started, has executed by now (its start returns only then), so
    /// nothing of lockrun's writes there any more.
    fn drop(&mut self) {
        // SAFETY: the page `map` made, no longer used in this process.
        unsafe { libc::munmap(self.slot.at as *mut libc::c_void, page_size()) };
    }
}

/// The command's way to its [`GroupPage`]: the page's address, valid while the [`Watchdog`] that
/// owns the page lives, and in the watchdog for good.
#[derive(Clone, Copy)]
pub struct GroupSlot {
    /// The page's address; an `AtomicI32` at its start.
    at: usize,
}

impl GroupSlot {
    fn cell(&self) -> &AtomicI32 {
        // SAFETY: the page is mapped (zeroed, so 0: no group yet) while it is used, aligned, and
        // only ever accessed through this atomic.
        unsafe { &*(self.at as *const AtomicI32) }
    }

    /// The command's process group is `group`. One store: safe between a clone and an exec.
    pub fn tell(self, group: libc::pid_t) {
        self.cell().store(group, Ordering::SeqCst);
    }

    /// The group told, or 0.
    fn told(&self) -> i32 {
        self.cell().load(Ordering::SeqCst)
    }
}

/// A watchdog forked while lockrun still waits for the lock, so that its fork (the largest part
/// of what a command's start costs lockrun) is not made between the lock being won and the
/// command starting, when every waiter behind waits for it too. Until the command starts it has
/// nothing to stop: dropped unused (the wait ended without the lock), it is disarmed.
#[derive(Default)]
pub struct Standby {
    watchdog: Option<Watchdog>,
}

impl Standby {
    /// Forks the watchdog, unless one is ready. A fork the system refuses now is tried again when
    /// the command starts, which says so if it fails then too.
    pub fn prepare(&mut self) {
        if self.watchdog.is_some() {
            return;
        }
        match Watchdog::start() {
            Ok(watchdog) => self.watchdog = Some(watchdog),
            Err(e) => crate::debug!(
                "cannot start the watchdog while waiting ({}); trying again at the start",
                crate::messages::io(&e)
            ),
        }
    }

    /// The ready watchdog, if there is one, for the command about to start.
    pub fn take(&mut self) -> Option<Watchdog> {
        self.watchdog.take()
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.disarm();
        }
    }
}

/// A descriptor of lockrun's whose last close is slow, which lockrun never closes itself: the
/// watchdog keeps the copy it inherits, so that the close happens when the watchdog exits, after
/// lockrun (and whoever waits for lockrun) has gone on. -1 while there is none.
static LEFT_TO_WATCHDOG: AtomicI32 = AtomicI32::new(-1);

/// Leaves the last close of `fd` to the watchdog (see [`LEFT_TO_WATCHDOG`]): an inotify
/// instance, whose close waits for the kernel to retire its watches (a grace period of 10-20 ms)
/// and would hold lockrun's exit back by that much. lockrun must never close `fd`; only the
/// first one left counts, and only a watchdog forked after this call keeps it.
pub fn leave_last_close(fd: RawFd) {
    let _ = LEFT_TO_WATCHDOG.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire);
}

/// The watchdog's stack: `watch` and the sweep keep their buffers there (about 30 KiB).
const WATCH_STACK: usize = 128 * 1024;

/// Where lockrun's heap began and its main thread's stack ends, as noted at its start (0: not
/// noted, as in unit tests, where nothing is left out of the watchdog's copy).
static HEAP_START: AtomicUsize = AtomicUsize::new(0);
static STACK_TOP: AtomicUsize = AtomicUsize::new(0);

/// Notes where the heap begins and the main thread's stack ends, for the watchdog's fork to leave
/// them out; call first thing on the main thread.
pub fn note_heap_and_stack() {
    // SAFETY: sbrk(0) only reads the current break.
    let brk = unsafe { libc::sbrk(0) } as usize;
    if brk != usize::MAX {
        HEAP_START.store(brk, Ordering::Relaxed);
    }
    let here = 0u8;
    STACK_TOP.store(
        std::ptr::addr_of!(here) as usize + page_size(),
        Ordering::Relaxed,
    );
}

/// What the watchdog's clone reads: values, kept on its own stack.
#[derive(Clone, Copy)]
struct WatchArgs {
    pipe: RawFd,
    lockrun: i32,
    /// A descriptor the watchdog keeps open (see [`leave_last_close`]), or -1.
    inherited: RawFd,
    group: GroupSlot,
}

/// The room [`WatchArgs`] take at the top of the watchdog's stack: its size, rounded up so that
/// the stack below stays 16-byte aligned.
const ARGS_ROOM: usize = std::mem::size_of::<WatchArgs>().next_multiple_of(16);

/// Forks the watchdog onto a stack of its own, with every signal blocked (it keeps them so:
/// none of lockrun's handlers ever runs in it), and without copying lockrun's heap and main stack,
/// which it never touches: lockrun then pays no copy-on-write fault for the pages it writes there
/// next.
fn fork_watch(pipe: RawFd, lockrun: i32, group: GroupSlot) -> io::Result<Pid> {
    use super::spawn::{Stack, block_all_signals, restore_signals};
    let stack = Stack::new(WATCH_STACK)?;
    // The arguments take the top of the stack; the child's stack starts below them.
    let args_at = stack
        .top()
        .cast::<u8>()
        .wrapping_sub(ARGS_ROOM)
        .cast::<WatchArgs>();
    let inherited = LEFT_TO_WATCHDOG.load(Ordering::Acquire);
    // SAFETY: the stack's top slot, in the mapping just made.
    unsafe {
        args_at.write(WatchArgs {
            pipe,
            lockrun,
            inherited,
            group,
        })
    };
    let blocked = block_all_signals()?;
    let uncopied = Uncopied::mark();
    // SAFETY: the child starts on its own copy of `stack`, reads `args` there, runs only `watch`
    // (system calls on its own stack, never returning) and shares nothing with lockrun.
    let pid = unsafe { libc::clone(watch_entry, args_at.cast(), libc::SIGCHLD, args_at.cast()) };
    let error = io::Error::last_os_error();
    uncopied.unmark();
    restore_signals(&blocked);
    if pid < 0 {
        return Err(error);
    }
    Ok(Pid::from_raw(pid))
}

extern "C" fn watch_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `fork_watch` put the arguments there, in this process's copy of the stack.
    let args = unsafe { *arg.cast::<WatchArgs>() };
    // SAFETY: a freshly forked child, on its own stack.
    unsafe { watch(args.pipe, args.lockrun, args.inherited, args.group) }
}

/// How far below its noted top the main thread's stack may reach (the usual `ulimit -s`): a fork
/// made from another thread's stack, far from it, leaves no stack out rather than a wild range.
const MAIN_STACK_MAX: usize = 8 << 20;

/// lockrun's heap and main stack, marked not to be copied into a child for one fork.
struct Uncopied {
    ranges: [(usize, usize); 2],
}

impl Uncopied {
    fn mark() -> Uncopied {
        let page = page_size();
        let heap_start = HEAP_START.load(Ordering::Relaxed);
        // SAFETY: sbrk(0) only reads the current break.
        let brk = unsafe { libc::sbrk(0) } as usize;
        let heap = match heap_start > 0 && brk != usize::MAX && brk > heap_start {
            true => (heap_start & !(page - 1), brk.next_multiple_of(page)),
            false => (0, 0),
        };
        let here = 0u8;
        let sp = (std::ptr::addr_of!(here) as usize) & !(page - 1);
        let top = STACK_TOP.load(Ordering::Relaxed) & !(page - 1);
        let stack = match top > sp && top - sp < MAIN_STACK_MAX {
            true => (sp, top),
            false => (0, 0),
        };
        let uncopied = Uncopied {
            ranges: [heap, stack],
        };
        uncopied.advise(libc::MADV_DONTFORK);
        uncopied
    }

    fn unmark(self) {
        self.advise(libc::MADV_DOFORK);
    }

    fn advise(&self, advice: libc::c_int) {
        for &(start, end) in &self.ranges {
            if end > start {
                // SAFETY: advice on lockrun's own mapped heap or stack; a part not mapped is
                // skipped by the kernel.
                unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
            }
        }
    }
}

/// The adoption thread: makes the cgroup, tells the watchdog, moves the tree, then tells the
/// watchdog to forget the pids it was told (and re-tells those that could not move).
fn adopt_tree(pipe: &OwnedFd, skip: Pid, stop: &AtomicBool, done: &AtomicBool) -> Option<Cgroup> {
    let cgroup = Cgroup::create(std::process::id())?;
    if !send_cgroup(pipe, cgroup.dir()) {
        cgroup.remove();
        return None;
    }
    let unmoved = cgroup.adopt(|| super::descendants::living(Some(skip)), stop);
    if stop.load(Ordering::Relaxed) {
        return Some(cgroup);
    }
    send(pipe, TAG_ADOPTED, 0);
    for pid in unmoved {
        send(pipe, TAG_PID, pid.as_raw());
    }
    done.store(true, Ordering::Release);
    crate::debug!("the command runs in the cgroup {}", cgroup.dir().display());
    Some(cgroup)
}

fn send(pipe: &OwnedFd, tag: u8, pid: i32) {
    let mut message = [0u8; MESSAGE];
    message[0] = tag;
    message[1..].copy_from_slice(&pid.to_ne_bytes());
    if let Err(e) = nix::unistd::write(pipe, &message) {
        crate::debug!("cannot tell the watchdog: {}", e.desc());
    }
}

/// Tells the watchdog the cgroup's directory, in one write; false if it cannot.
fn send_cgroup(pipe: &OwnedFd, dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = dir.as_os_str().as_bytes();
    if path.len() > MAX_CGROUP_PATH || path.contains(&0) {
        crate::debug!("the cgroup path is too long for the watchdog; going without");
        return false;
    }
    let mut message = Vec::with_capacity(MESSAGE + path.len());
    message.push(TAG_CGROUP);
    message.extend_from_slice(&(path.len() as i32).to_ne_bytes());
    message.extend_from_slice(path);
    match nix::unistd::write(pipe, &message) {
        Ok(n) if n == message.len() => true,
        result => {
            crate::debug!("cannot tell the watchdog the cgroup: {result:?}");
            false
        }
    }
}

/// The watchdog's whole life: read messages until "disarm" (exit quietly) or end of file
/// (lockrun died: kill everything it was told of), then `_exit`.
///
/// Most lives are one message, the disarm: this frame stays small, and the buffers for the pids
/// and the cgroup (20 KiB, whose pages a fresh stack faults in one by one, and which `Tree::new`
/// zeroes) are made only in [`follow`], on the first other message or at lockrun's death.
///
/// # Safety
/// Runs in a freshly forked child of a possibly multi-threaded process: it must only make
/// async-signal-safe calls, allocate nothing, and never return.
unsafe fn watch(pipe: RawFd, lockrun: i32, inherited: RawFd, told: GroupSlot) -> ! {
    // SAFETY (whole body): plain system calls on values owned by this stack frame.
    unsafe {
        // Every signal stays blocked, as `fork_watch` cloned it: a stray one (SIGTERM, SIGHUP,
        // SIGALRM, a terminal's SIGTSTP…) neither ends nor stops it, nor runs lockrun's handlers.
        libc::prctl(libc::PR_SET_NAME, c"lockrun-watch".as_ptr());
        // Batch scheduling: woken, it runs on a free CPU or at the next tick, and never preempts
        // the process that woke it. The disarm comes right after the release that hands the lock
        // on, where a normal wake-up switched to the watchdog's exit, and then often to another
        // runnable process, ahead of the next holder. A dying lockrun's watchdog still gets its
        // fair share at once: batch is a normal priority, without the wake-up preemption.
        let batch = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &batch);
        // A session of its own: a kill of lockrun's process group (a CI runner ending a job, a
        // shell's `kill -9 -PGID`) must not take the watchdog along with lockrun. A session, not
        // only a group: where the kernel groups scheduling by session (autogroup), the watchdog
        // then gets a share of its own, not a sliver of a session a busy command fills; a
        // `setpgid` saved the autogroup's cost (about 20 µs a run) but, in a soak, left a
        // disarmed watchdog waiting for the CPU after lockrun had gone.
        libc::setsid();
        close_all_but([pipe, inherited]);
        let mut message = [0u8; MESSAGE];
        let first = match read_exactly(pipe, &mut message) {
            true if message[0] == TAG_DISARM => libc::_exit(0),
            true => Some(message),
            false => None,
        };
        follow(pipe, lockrun, told, first)
    }
}

/// The rest of a life in which lockrun said more than "disarm" (`first`, read already), or died
/// without a word (`first` is `None`): keeps what it is told, and stops the command's tree when
/// the pipe closes without a disarm.
///
/// # Safety
/// As [`watch`], which it continues.
#[inline(never)]
unsafe fn follow(pipe: RawFd, lockrun: i32, told: GroupSlot, first: Option<[u8; MESSAGE]>) -> ! {
    // SAFETY (whole body): plain system calls on values owned by this stack frame.
    unsafe {
        let mut tree = Tree::new();
        // The cgroup's path, then room for `/cgroup.kill` and the terminating NUL.
        let mut cgroup = [0u8; MAX_CGROUP_PATH + CGROUP_KILL.len()];
        let mut cgroup_len = 0usize;
        let mut pending = first;
        loop {
            let message = match pending.take() {
                Some(message) => message,
                None => {
                    let mut message = [0u8; MESSAGE];
                    if !read_exactly(pipe, &mut message) {
                        break;
                    }
                    message
                }
            };
            let value = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
            match message[0] {
                TAG_DISARM => libc::_exit(0),
                TAG_PID => {
                    tree.add(value);
                }
                TAG_ADOPTED => tree.clear(),
                TAG_CGROUP if value > 0 && value as usize <= MAX_CGROUP_PATH => {
                    if !read_exactly(pipe, &mut cgroup[..value as usize]) {
                        break;
                    }
                    cgroup_len = value as usize;
                }
                _ => {}
            }
        }
        // The command's store, if one was started: it came before the command's exec, and so
        // before its copy of the pipe closed, the last.
        let group = told.told();
        // lockrun died while it waited (a watchdog forked while waiting): no command was ever
        // started, so there is nothing to look for.
        if group == 0 && tree.pids().is_empty() && cgroup_len == 0 {
            libc::_exit(0);
        }
        // lockrun is dying without having disarmed. Its children are handed to a new parent only
        // after its descriptors close; until then the command's group is not yet orphaned, and
        // stopping it now would have the kernel hang up the whole group (SIGHUP) the moment it
        // is, killing the command before the sweep could find its children through it.
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        for _ in 0..1000 {
            if libc::getppid() != lockrun {
                break;
            }
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
        // Stop everything the command started. First freeze
        // the tree, so that nothing forks away while it is looked for, then kill it.
        if group > 0 {
            libc::kill(-group, libc::SIGSTOP);
            tree.add(group);
        }
        for pid in tree.pids() {
            libc::kill(*pid, libc::SIGSTOP);
        }
        freeze_tree(group, &mut tree);
        if cgroup_len > 0 {
            cgroup[cgroup_len..cgroup_len + CGROUP_KILL.len()].copy_from_slice(CGROUP_KILL);
            let fd = libc::open(cgroup.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, c"1".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
        if group > 0 {
            libc::kill(-group, libc::SIGKILL);
        }
        for pid in tree.pids() {
            libc::kill(*pid, libc::SIGKILL);
        }
        // The cgroup can go once the killed processes are gone (a second at most).
        if cgroup_len > 0 {
            cgroup[cgroup_len] = 0;
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            for _ in 0..100 {
                if libc::rmdir(cgroup.as_ptr().cast()) == 0 {
                    break;
                }
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
        }
        libc::_exit(0)
    }
}

/// Fills `buffer` from `pipe`; false at end of file or on an error.
///
/// # Safety
/// Async-signal-safe; for the forked watchdog only.
unsafe fn read_exactly(pipe: RawFd, buffer: &mut [u8]) -> bool {
    let mut filled = 0usize;
    while filled < buffer.len() {
        // SAFETY: reads into the unfilled rest of `buffer`, which this frame borrows mutably.
        let n = unsafe {
            libc::read(
                pipe,
                buffer.as_mut_ptr().add(filled).cast(),
                buffer.len() - filled,
            )
        };
        if n < 0 {
            // SAFETY: errno is thread-local and always readable.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        filled += n as usize;
    }
    true
}

/// Closes every descriptor but `keep`, so the watchdog holds no lock, connection or terminal.
///
/// # Safety
/// Async-signal-safe; for the forked watchdog only.
unsafe fn close_all_but(keep: [RawFd; 2]) {
    let mut keep = keep.map(|fd| libc::c_uint::try_from(fd).ok());
    keep.sort_unstable();
    // SAFETY: close_range and close are plain system calls on descriptors of this process.
    unsafe {
        let mut failed = false;
        let mut low: libc::c_uint = 0;
        for fd in keep.into_iter().flatten() {
            if fd > low {
                failed |= libc::syscall(libc::SYS_close_range, low, fd - 1, 0) < 0;
            }
            low = low.max(fd + 1);
        }
        failed |= libc::syscall(libc::SYS_close_range, low, libc::c_uint::MAX, 0) < 0;
        if failed {
            // Kernels before 5.9: close them one by one, up to the descriptor limit.
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as libc::c_uint
            } else {
                1024
            };
            for fd in 0..top {
                if !keep.contains(&Some(fd)) {
                    libc::close(fd as libc::c_int);
                }
            }
        }
    }
}
