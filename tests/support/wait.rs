//! Waiting for a condition without deciding anything by a fixed sleep: poll it every few
//! milliseconds up to a bound, and fail the test with what was last seen when the bound passes.

use std::path::Path;
use std::process::Output;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Generous bound for something that should happen soon (a process starting, a file appearing).
pub const SOON: Duration = Duration::from_secs(10);

/// How often conditions are looked at.
const POLL: Duration = Duration::from_millis(10);

/// Polls `condition` until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] with a deadline instead of a timeout.
pub fn wait_before(deadline: Instant, condition: impl FnMut() -> bool) -> bool {
    wait_until(
        deadline.saturating_duration_since(Instant::now()),
        condition,
    )
}

/// Waits for `path` to exist and be non-empty; returns its contents, trimmed.
pub fn wait_for_file(path: &Path, timeout: Duration) -> String {
    let mut contents = None;
    let found = wait_until(timeout, || {
        contents = read_trimmed(path);
        contents.is_some()
    });
    assert!(found, "{} never appeared", path.display());
    contents.unwrap_or_default()
}

/// The file's contents, trimmed; `None` when it is missing or blank.
pub fn read_trimmed(path: &Path) -> Option<String> {
    let contents = std::fs::read_to_string(path).ok()?;
    let contents = contents.trim();
    (!contents.is_empty()).then(|| contents.to_owned())
}

/// The one number written in `path` (waiting for it to appear).
pub fn number_in(path: &Path) -> u64 {
    value_in(path)
}

/// The one value written in `path`, of type `T` (waiting for it to appear).
pub fn value_in<T: FromStr>(path: &Path) -> T {
    let value = wait_for_file(path, SOON);
    value.parse().unwrap_or_else(|_| {
        panic!(
            "{} holds {value:?}, not a {}",
            path.display(),
            std::any::type_name::<T>()
        )
    })
}

/// The numbers in `path`, one per line (none when it is missing).
pub fn numbers_in(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("a number per line"))
        .collect()
}

/// Whether a process exists and has not exited (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a client that must succeed answered, trimmed; fails the test, naming what it was asked
/// and what it said, if it failed.
pub fn answer(out: &Output, asked: &str) -> String {
    assert!(out.status.success(), "{asked}: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// The exit status; -1 for a process killed by a signal.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}
