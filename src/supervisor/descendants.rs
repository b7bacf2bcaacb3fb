//! Every process the command started, including those that left its process group.
//!
//! A signal to the command's process group misses descendants that called `setsid` or
//! `setpgid` (daemons, double forks). lockrun therefore makes itself a *child subreaper*: an
//! orphaned descendant is reparented to lockrun instead of init, so it stays in lockrun's process
//! tree, which is read from `/proc`. When the lease is lost, every descendant is signalled, not
//! only the group. After a normal exit nothing is signalled: background processes the command
//! left behind keep running (without the lock, whose descriptors they never had).

use std::collections::HashMap;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{Pid, getpid};

/// Makes orphaned descendants children of this process. Best effort: without it, descendants
/// that left the command's group are found only while their parents live.
pub fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        crate::debug!("cannot become a child subreaper: {}", e.desc());
    }
}

/// One process as `/proc/PID/stat` describes it.
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    zombie: bool,
}

fn processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some(Proc {
                pid,
                ppid,
                pgrp,
                zombie: state == "Z" || state == "X",
            })
        })
        .collect()
}

/// Live descendants of this process, parents before children, with their process groups.
fn living_with_groups() -> Vec<(Pid, i32)> {
    let all = processes();
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for p in &all {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut queue = vec![getpid().as_raw()];
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).map_or(&[][..], Vec::as_slice) {
            queue.push(child.pid);
            if !child.zombie {
                found.push((Pid::from_raw(child.pid), child.pgrp));
            }
        }
    }
    found
}

/// Whether any descendant of this process is still alive.
pub fn any_alive() -> bool {
    !living_with_groups().is_empty()
}

/// Sends `signal` to every live descendant outside process group `group` (which the caller
/// signals as a whole, so that no process gets the signal twice).
pub fn signal_outside(group: Pid, signal: Signal) {
    for (pid, pgrp) in living_with_groups() {
        if pgrp != group.as_raw() {
            let _ = kill(pid, signal);
        }
    }
}

/// Reaps exited orphans that were reparented to this process, leaving `command` (whose exit the
/// runtime collects) alone.
pub fn reap_orphans(command: Pid) {
    let me = getpid().as_raw();
    for p in processes() {
        if p.zombie && p.ppid == me && p.pid != command.as_raw() {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}
