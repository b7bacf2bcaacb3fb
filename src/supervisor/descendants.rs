//! Every process the command started, including those that left its process group.
//!
//! A signal to the command's process group misses descendants that called `setsid` or
//! `setpgid` (daemons, double forks). lockrun therefore makes itself a *child subreaper*: an
//! orphaned descendant is reparented to lockrun instead of init, so it stays in lockrun's process
//! tree, which is read from `/proc`. When the lease is lost, every descendant is signalled, not
//! only the group. After a normal exit nothing is signalled: background processes the command
//! left behind keep running (without the lock, whose descriptors they never had).

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

/// The children of process `pid`, from `/proc/PID/task/*/children` (each thread lists the
/// children it forked, or that were reparented to it).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                list.split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// Process `pid`'s state letter and process group, from `/proc/PID/stat`.
fn state_and_group(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may contain spaces and parentheses.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

fn is_zombie(state: char) -> bool {
    matches!(state, 'Z' | 'X')
}

/// Live descendants of this process, parents before children, with their process groups, leaving
/// out `skip` (the watchdog). Walks the tree through the kernel's children lists, reading only our
/// own processes.
fn living_with_groups(skip: Option<Pid>) -> Vec<(Pid, i32)> {
    let mut found = Vec::new();
    let mut queue = children_of(getpid().as_raw());
    queue.retain(|pid| Some(Pid::from_raw(*pid)) != skip);
    while let Some(pid) = queue.pop() {
        let Some((state, pgrp)) = state_and_group(pid) else {
            continue;
        };
        if !is_zombie(state) {
            found.push((Pid::from_raw(pid), pgrp));
            queue.extend(children_of(pid));
        }
    }
    found
}

/// Live descendants of this process, leaving out `skip`.
pub fn living(skip: Option<Pid>) -> Vec<Pid> {
    living_with_groups(skip)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// Whether any descendant of this process but `skip` is still alive.
pub fn any_alive(skip: Option<Pid>) -> bool {
    !living_with_groups(skip).is_empty()
}

/// Live descendants outside process group `group`, leaving out `skip`.
pub fn outside(group: Pid, skip: Option<Pid>) -> Vec<Pid> {
    living_with_groups(skip)
        .into_iter()
        .filter(|(_, pgrp)| *pgrp != group.as_raw())
        .map(|(pid, _)| pid)
        .collect()
}

/// Sends `signal` to every live descendant outside process group `group` (which the caller
/// signals as a whole, so that no process gets the signal twice), leaving out `skip`.
pub fn signal_outside(group: Pid, skip: Option<Pid>, signal: Signal) {
    for pid in outside(group, skip) {
        let _ = kill(pid, signal);
    }
}

/// Reaps exited orphans that were reparented to this process, leaving `command` (whose exit the
/// runtime collects) alone.
pub fn reap_orphans(command: Pid) {
    for pid in children_of(getpid().as_raw()) {
        if pid != command.as_raw()
            && state_and_group(pid).is_some_and(|(state, _)| is_zombie(state))
        {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}
