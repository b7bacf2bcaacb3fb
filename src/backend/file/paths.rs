//! How lease names become file names inside the state directory, and back.
//!
//! The mapping is flat (one subdirectory per name at most, for its line) and bijective: `/`
//! becomes `%`, slot K > 0 adds `@K`, and a suffix says what the file is. Names cannot contain
//! `%`, `@` or `/`, so no name can reach another name's files, and no file name can leave the
//! directory.

use crate::name::LockName;

const LOCK_SUFFIX: &str = ".lock";

/// The file stem shared by all of a name's files.
pub fn stem(name: &LockName) -> String {
    name.as_str().replace('/', "%")
}

/// Slot `slot`'s lock file.
pub fn slot_file(name: &LockName, slot: u32) -> String {
    match slot {
        0 => format!("{}{LOCK_SUFFIX}", stem(name)),
        k => format!("{}@{k}{LOCK_SUFFIX}", stem(name)),
    }
}

/// The fencing counter file.
pub fn fence_file(name: &LockName) -> String {
    format!("{}.fence", stem(name))
}

/// The directory of the name's line: waiters' tickets and shared holders' records.
pub fn line_dir(name: &LockName) -> String {
    format!("{}.line", stem(name))
}

/// The name whose line directory `file_name` is, or `None` for any other file.
pub fn parse_line_dir(file_name: &str) -> Option<LockName> {
    let stem = file_name.strip_suffix(".line")?;
    LockName::parse(&stem.replace('%', "/")).ok()
}

/// The counter that numbers the name's tickets.
pub fn ticket_counter(name: &LockName) -> String {
    format!("{}.tickets", stem(name))
}

/// The file in which `--shared` holders and exclusive holders past slot 0 mark themselves (see
/// `modes`).
pub fn modes_file(name: &LockName) -> String {
    format!("{}.modes", stem(name))
}

/// The record of when the name last ran (`--min-interval`).
pub fn interval_file(name: &LockName) -> String {
    format!("{}.interval", stem(name))
}

/// The name and slot a lock file belongs to, or `None` for any other file.
pub fn parse_slot_file(file_name: &str) -> Option<(LockName, u32)> {
    let stem = file_name.strip_suffix(LOCK_SUFFIX)?;
    let (stem, slot) = match stem.rsplit_once('@') {
        Some((stem, k)) => (stem, k.parse().ok().filter(|&k| k > 0)?),
        None => (stem, 0),
    };
    let name = LockName::parse(&stem.replace('%', "/")).ok()?;
    Some((name, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        let name = LockName::parse("ci/deploy:prod").unwrap();
        assert_eq!(slot_file(&name, 0), "ci%deploy:prod.lock");
        assert_eq!(slot_file(&name, 3), "ci%deploy:prod@3.lock");
        assert_eq!(
            parse_slot_file("ci%deploy:prod.lock"),
            Some((name.clone(), 0))
        );
        assert_eq!(parse_slot_file("ci%deploy:prod@3.lock"), Some((name, 3)));
    }

    #[test]
    fn other_files_are_not_lock_files() {
        for other in [
            "x.fence",
            "x.line",
            "x.tickets",
            "x@0.lock",
            "x@y.lock",
            "%x.lock",
            ".lock",
            "x@-1.lock",
        ] {
            assert_eq!(parse_slot_file(other), None, "{other}");
        }
    }
}
