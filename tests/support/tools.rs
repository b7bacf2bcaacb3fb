//! What some tests need from the machine besides the servers: root (and, with it, acting as
//! another user), `openssl`, libfaketime (and, to fake a `redis-server`'s clock, glibc's
//! malloc-debug library). A test whose prerequisite is missing fails and says what to install,
//! since in CI a skipped test must not pass; only with `LOCKRUN_TESTS_MAY_SKIP=1` in the
//! environment (a developer's machine; `.ci/run` never sets it) does it say so on stderr and pass
//! without running.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The opt-out: with it set, a missing prerequisite skips the test instead of failing it.
pub const MAY_SKIP: &str = "LOCKRUN_TESTS_MAY_SKIP";

/// Whether the test can go on: true when `present`; otherwise fails the test naming `what`, or,
/// with the opt-out, reports the skip and returns false.
pub fn prerequisite(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var_os(MAY_SKIP).is_some_and(|v| v == "1") {
        eprintln!("SKIPPED ({MAY_SKIP}=1): this test needs {what}");
        return false;
    }
    panic!("this test needs {what} (or set {MAY_SKIP}=1 to skip such tests outside CI)");
}

/// Running as root (to act as another user, or chown files to one).
pub fn root() -> bool {
    prerequisite(
        nix::unistd::geteuid().is_root(),
        "to run as root (it acts as another user)",
    )
}

/// The unprivileged user, and group, that tests act as: `nobody`.
pub const NOBODY: u32 = 65534;

/// `setpriv` set to run what follows as user `uid`, in [`NOBODY`]'s group and no other (the test
/// must run as [`root`]).
pub fn as_user(uid: u32) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={NOBODY}"))
        .args(["--clear-groups", "--"]);
    cmd
}

/// For a test that acts as another user: a temporary directory with permission bits `mode`
/// (0o755 lets [`NOBODY`] in, 0o777 lets it write), or `None` when the test cannot run as
/// [`root`].
pub fn dir_for_another_user(mode: u32) -> Option<tempfile::TempDir> {
    if !root() {
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    chmod(dir.path(), mode);
    Some(dir)
}

/// Sets the permission bits of `path` to `mode`.
pub fn chmod(path: impl AsRef<Path>, mode: u32) {
    let path = path.as_ref();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// A working `openssl` command, to make test certificates.
pub fn openssl() -> bool {
    let works = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    prerequisite(works, "the openssl command (apt-get install openssl)")
}

/// libfaketime's preload library (Debian's `libfaketime`, pulled in by `faketime`), wherever the
/// architecture puts it.
pub fn libfaketime() -> Option<PathBuf> {
    let found = library("faketime/libfaketime.so.1");
    prerequisite(found.is_some(), "libfaketime (apt-get install faketime)");
    found
}

/// What to preload into a `redis-server` to fake its clock: glibc's malloc-debug library, then
/// libfaketime. Debian's `redis-server` allocates with jemalloc, whose start-up reads the clock
/// while libfaketime, starting up too, allocates: the two deadlock (libfaketime issue #130). With
/// glibc's allocator preloaded first, every allocation goes to glibc and the server starts.
pub fn faketime_for_redis() -> Option<String> {
    let faketime = libfaketime()?;
    let malloc = library("libc_malloc_debug.so.0");
    prerequisite(
        malloc.is_some(),
        "glibc's libc_malloc_debug.so.0 (glibc 2.34 or later, package libc6)",
    );
    Some(format!("{} {}", malloc?.display(), faketime.display()))
}

/// A shared library at `relative` under the usual library directories or their per-architecture
/// subdirectories.
fn library(relative: &str) -> Option<PathBuf> {
    ["/usr/lib", "/usr/lib64", "/lib", "/usr/local/lib"]
        .into_iter()
        .flat_map(|root| {
            let arch_dirs = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.path());
            std::iter::once(PathBuf::from(root)).chain(arch_dirs)
        })
        .map(|dir| dir.join(relative))
        .find(|library| library.exists())
}
