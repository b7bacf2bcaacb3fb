//! The watchdog's last sweep when lockrun died: it finds the command's whole tree by ancestry in
//! `/proc` — every process whose parent is in the tree, starting from the command's process group
//! and the pids lockrun told it — and stops each one (SIGSTOP) as it finds it, pass after pass
//! until a pass finds nobody new, so that nothing forks away while the tree is being looked for.
//! The watchdog then kills what it found.
//!
//! This reaches a descendant that left the command's group a moment before lockrun died (too
//! late for lockrun's own looks), as long as its parent is still in the tree when the sweep
//! runs. Everything here runs in the forked watchdog: async-signal-safe system calls on fixed
//! buffers of this stack, no allocation.

/// Processes the sweep can hold: the command's tree and the pids lockrun told.
pub const MAX_TREE: usize = 4096;
/// Passes over `/proc` at most (each freezes the generation it finds, so few are ever needed).
const MAX_PASSES: usize = 32;
/// `getdents64` buffer.
const DIRENTS: usize = 8192;

/// A set of pids on the stack.
pub struct Tree {
    pids: [i32; MAX_TREE],
    len: usize,
}

impl Tree {
    pub const fn new() -> Tree {
        Tree {
            pids: [0; MAX_TREE],
            len: 0,
        }
    }

    /// Adds `pid`; false if it was there already, is not a pid, or the set is full.
    pub fn add(&mut self, pid: i32) -> bool {
        if pid <= 0 || self.len == MAX_TREE || self.contains(pid) {
            return false;
        }
        self.pids[self.len] = pid;
        self.len += 1;
        true
    }

    pub fn contains(&self, pid: i32) -> bool {
        self.pids[..self.len].contains(&pid)
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn pids(&self) -> &[i32] {
        &self.pids[..self.len]
    }
}

/// Stops, pass after pass over `/proc`, every process in process group `group` or whose parent is
/// in `tree`, adding each to `tree`.
///
/// # Safety
/// Async-signal-safe; for the forked watchdog only.
pub unsafe fn freeze_tree(group: i32, tree: &mut Tree) {
    // SAFETY (whole body): plain system calls on buffers of this frame.
    unsafe {
        let proc_dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if proc_dir < 0 {
            return;
        }
        let mut entries = [0u8; DIRENTS];
        for _ in 0..MAX_PASSES {
            let mut found = false;
            libc::lseek(proc_dir, 0, libc::SEEK_SET);
            loop {
                let n = libc::syscall(
                    libc::SYS_getdents64,
                    proc_dir,
                    entries.as_mut_ptr(),
                    entries.len(),
                );
                if n <= 0 {
                    break;
                }
                let mut at = 0usize;
                while at < n as usize {
                    // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name...
                    let reclen = u16::from_ne_bytes([entries[at + 16], entries[at + 17]]) as usize;
                    let name = &entries[at + 19..at + reclen];
                    at += reclen;
                    let Some(pid) = parse_pid(name) else {
                        continue;
                    };
                    if tree.contains(pid) {
                        continue;
                    }
                    let Some((parent, pgrp)) = parent_and_group(pid) else {
                        continue;
                    };
                    if ((group > 0 && pgrp == group) || tree.contains(parent)) && tree.add(pid) {
                        libc::kill(pid, libc::SIGSTOP);
                        found = true;
                    }
                }
            }
            if !found {
                break;
            }
        }
        libc::close(proc_dir);
    }
}

/// A directory entry's name as a pid (`/proc` also lists `self`, `sys`, …).
fn parse_pid(name: &[u8]) -> Option<i32> {
    let mut pid: i32 = 0;
    let mut digits = 0;
    for &b in name {
        if b == 0 {
            break;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        pid = pid.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        digits += 1;
    }
    (digits > 0).then_some(pid)
}

/// Process `pid`'s parent and process group, from `/proc/PID/stat`.
///
/// # Safety
/// Async-signal-safe; for the forked watchdog only.
unsafe fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let mut path = [0u8; 32];
    let mut len = 0;
    for &b in b"/proc/" {
        path[len] = b;
        len += 1;
    }
    let mut digits = [0u8; 12];
    let mut n = pid;
    let mut count = 0;
    while n > 0 {
        digits[count] = b'0' + (n % 10) as u8;
        n /= 10;
        count += 1;
    }
    for i in (0..count).rev() {
        path[len] = digits[i];
        len += 1;
    }
    for &b in b"/stat" {
        path[len] = b;
        len += 1;
    }
    // `path` ends with a NUL: it was zeroed and is longer than what was written.
    let mut stat = [0u8; 160];
    // SAFETY: plain system calls on buffers of this frame.
    let read = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let read = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        read
    };
    if read <= 0 {
        return None;
    }
    parse_stat(&stat[..read as usize])
}

/// `pid (comm) state ppid pgrp …` → (ppid, pgrp). The name may hold spaces and parentheses but
/// is at most 15 bytes, so the last `)` of the line's head closes it.
fn parse_stat(stat: &[u8]) -> Option<(i32, i32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let _state = fields.next()?;
    let parent = parse_pid(fields.next()?)?;
    let group = parse_pid(fields.next()?)?;
    Some((parent, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_parent_and_group() {
        assert_eq!(
            parse_stat(b"4242 (sh) S 4200 4242 4100 0 -1 4194560 100"),
            Some((4200, 4242))
        );
        assert_eq!(
            parse_stat(b"7 (a) b (c)) R 1 7 7 0"),
            Some((1, 7)),
            "a name with spaces and parentheses"
        );
        assert_eq!(parse_stat(b"garbage"), None);
    }

    #[test]
    fn only_numbers_are_pids() {
        assert_eq!(parse_pid(b"1234\0\0"), Some(1234));
        assert_eq!(parse_pid(b"self\0"), None);
        assert_eq!(parse_pid(b"\0"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
    }

    #[test]
    fn the_tree_holds_each_pid_once() {
        let mut tree = Tree::new();
        assert!(tree.add(5));
        assert!(!tree.add(5));
        assert!(!tree.add(0));
        assert!(!tree.add(-3));
        assert_eq!(tree.pids(), &[5]);
        tree.clear();
        assert!(tree.pids().is_empty());
    }
}
