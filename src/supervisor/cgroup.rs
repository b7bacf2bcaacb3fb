//! A cgroup of the command's own, where one can be made: once the command's processes are in
//! it, every process they start is too, whatever it does to its process group or session
//! (`setsid`, double forks), so the watchdog can kill the whole tree at once (`cgroup.kill`) if
//! lockrun dies.
//!
//! Moving a process between cgroups costs the kernel a synchronisation that takes milliseconds,
//! which a command that runs for a moment should not pay. So the command starts in lockrun's own
//! cgroup, tracked by its process group and by the descendants lockrun sees leave it; only a
//! command still running after a while is *adopted*: lockrun makes the cgroup on a thread of its
//! own and moves the command's whole tree into it, looking again until a look finds nobody new
//! (a process forked during the move is caught by the next look).
//!
//! The cgroup is a child of lockrun's own cgroup in the cgroup v2 hierarchy, named
//! `lockrun-PID`; making it needs write access there (root, or a delegated user slice). Where that
//! is not possible (no cgroup v2, no permission), lockrun goes without, and the tracking by group
//! and escapees goes on. After a normal end, processes the command left running are moved back to
//! lockrun's cgroup and the directory is removed, so nothing accumulates.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::unistd::Pid;

/// Looks at the command's tree while adopting it, at most: a tree that forks faster than it can
/// be moved keeps its last newcomers outside (the watchdog still kills them by group or pid).
const ADOPTION_LOOKS: usize = 5;

/// The command's cgroup.
pub struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs` of lockrun's own cgroup, where leftovers go back.
    home_procs: PathBuf,
}

impl Cgroup {
    /// Makes a cgroup for the command of lockrun `pid`; `None` where this system does not allow
    /// it (the reason at `-vv`).
    pub fn create(pid: u32) -> Option<Cgroup> {
        match Self::try_create(pid) {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                crate::debug!(
                    "no cgroup for the command ({}); tracking its process group instead",
                    crate::messages::io(&e)
                );
                None
            }
        }
    }

    fn try_create(pid: u32) -> io::Result<Cgroup> {
        let home = own_cgroup_dir()?;
        let dir = home.join(format!("lockrun-{pid}"));
        std::fs::create_dir(&dir)?;
        let cgroup = Cgroup {
            home_procs: home.join("cgroup.procs"),
            dir,
        };
        // A cgroup the command cannot be moved into (a permission missing on the way) is no use.
        if let Err(e) = std::fs::OpenOptions::new().write(true).open(cgroup.procs()) {
            cgroup.remove();
            return Err(e);
        }
        Ok(cgroup)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves every process `members` lists into the cgroup, looking again until a look finds
    /// nobody new or `stop` is set. Returns the processes that could not be moved and still live.
    pub fn adopt(&self, members: impl Fn() -> Vec<Pid>, stop: &AtomicBool) -> Vec<Pid> {
        let procs = self.procs();
        let mut seen = std::collections::HashSet::new();
        let mut unmoved = Vec::new();
        for _ in 0..ADOPTION_LOOKS {
            let newcomers: Vec<Pid> = members()
                .into_iter()
                .filter(|pid| seen.insert(*pid))
                .collect();
            if newcomers.is_empty() {
                break;
            }
            for pid in newcomers {
                if stop.load(Ordering::Relaxed) {
                    return unmoved;
                }
                // A process that exited meanwhile cannot move (ESRCH), nor one this user may not
                // move (another owner's setuid program).
                if let Err(e) = std::fs::write(&procs, pid.as_raw().to_string())
                    && e.raw_os_error() != Some(libc::ESRCH)
                {
                    unmoved.push(pid);
                }
            }
        }
        unmoved
    }

    /// After a normal end: moves what the command left running back to lockrun's cgroup, then
    /// removes the directory (best effort).
    pub fn remove(&self) {
        if let Ok(procs) = std::fs::read_to_string(self.procs()) {
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(&self.home_procs, pid);
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            crate::debug!(
                "cannot remove the cgroup {}: {}",
                self.dir.display(),
                crate::messages::io(&e)
            );
        }
    }
}

/// The directory of this process's cgroup in the cgroup v2 hierarchy.
fn own_cgroup_dir() -> io::Result<PathBuf> {
    let membership = std::fs::read_to_string("/proc/self/cgroup")?;
    let relative = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("no cgroup v2 hierarchy"))?;
    let mount = cgroup2_mount()?;
    Ok(mount.join(relative.trim_start_matches('/')))
}

/// Where the cgroup v2 hierarchy is mounted, from `/proc/self/mountinfo`.
fn cgroup2_mount() -> io::Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    mounts
        .lines()
        .find_map(|line| {
            // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - TYPE SOURCE SUPER`
            let (fields, tail) = line.split_once(" - ")?;
            if !tail.starts_with("cgroup2 ") {
                return None;
            }
            let mut fields = fields.split(' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            // Only a mount of the hierarchy's root maps paths from /proc/self/cgroup directly.
            (root == "/").then(|| Path::new(&unescape(point)).to_owned())
        })
        .ok_or_else(|| io::Error::other("cgroup v2 is not mounted"))
}

/// Mount points escape spaces and the like as `\NNN` (octal).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let octal = |b: &[u8]| {
        let n = b.iter().try_fold(0u32, |n, &d| {
            (b'0'..=b'7')
                .contains(&d)
                .then(|| n * 8 + u32::from(d - b'0'))
        })?;
        u8::try_from(n).ok()
    };
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = bytes.get(i + 1..i + 4).and_then(octal)
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape("/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
