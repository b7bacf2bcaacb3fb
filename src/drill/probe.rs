//! The drill's fenced probe store: a file that plays the storage a job writes to, and enforces
//! fencing as real storage should — a write is accepted only if its token is at least the highest
//! token accepted so far, and recorded as rejected otherwise.
//!
//! The file is an append-only journal, one line per attempt: `accepted|rejected BOOT_NS TOKEN
//! VALUE`, where `BOOT_NS` is the boot clock (system-wide, so every process's lines compare). Each
//! write holds an exclusive `flock` on the file while it reads the highest accepted token and
//! appends its line, so concurrent writers are judged one at a time. The holders' commands write
//! through it with `lockrun drill-probe STORE TOKEN VALUE` (internal: read before the command line
//! parser, so no help or completion lists it), which exits 0 when the write was accepted and
//! [`PROBE_REJECTED`] when it was not.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::exit::{Error, PROBE_REJECTED};

/// One attempt recorded in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub at: BootInstant,
    pub token: u64,
    pub value: String,
    pub accepted: bool,
}

/// What the store said to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Accepted,
    /// Rejected: `highest` is the highest token accepted before.
    Rejected {
        highest: u64,
    },
}

/// Writes `value` with `token` through the store at `path`, creating it if needed.
pub fn write(path: &Path, token: u64, value: &str) -> io::Result<Answer> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    // Released when the file is closed, after the line is written.
    file.lock()?;
    let journal = read_all(&mut file)?;
    let highest = highest_accepted(&journal);
    let answer = match highest {
        Some(highest) if token < highest => Answer::Rejected { highest },
        _ => Answer::Accepted,
    };
    let verb = match answer {
        Answer::Accepted => "accepted",
        Answer::Rejected { .. } => "rejected",
    };
    let at = BootInstant::now().since_boot().as_nanos();
    // One write, so that a writer killed mid-line (a holder's command stopped as its lease is
    // lost) cannot leave half a line; and a line of its own after one torn by older code or a
    // crash, which would otherwise swallow this one.
    let torn = !journal.is_empty() && !journal.ends_with('\n');
    let line = format!(
        "{}{verb} {at} {token} {value}\n",
        if torn { "\n" } else { "" }
    );
    file.write_all(line.as_bytes())?;
    Ok(answer)
}

/// Every attempt recorded in the store at `path`, in order; an absent store has none.
pub fn journal(path: &Path) -> io::Result<Vec<Entry>> {
    match File::open(path) {
        Ok(mut file) => Ok(parse(&read_all(&mut file)?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The first argument that asks for the probe writer.
pub const SUBCOMMAND: &str = "drill-probe";

/// `lockrun drill-probe STORE TOKEN VALUE`, if that is what `args` (with the program name) ask
/// for: runs it and returns the exit status. It is internal to the drill, so it is read before the
/// command line parser, which would list it in help and completions.
pub fn from_args(args: &[OsString]) -> Option<u8> {
    if args.get(1).is_none_or(|word| word != SUBCOMMAND) {
        return None;
    }
    let result = match &args[2..] {
        [store, token, value] => probe(
            Path::new(store),
            &token.to_string_lossy(),
            &value.to_string_lossy(),
        ),
        _ => Err(Error::usage(format!(
            "{SUBCOMMAND} is internal to lockrun drill: it takes STORE TOKEN VALUE"
        ))),
    };
    Some(result.unwrap_or_else(|e| {
        crate::error!("{e}");
        e.code()
    }))
}

/// One fenced write; its exit status says what happened.
fn probe(path: &Path, token: &str, value: &str) -> Result<u8, Error> {
    let token: u64 = token.trim().parse().map_err(|_| {
        Error::usage(format!(
            "invalid drill-probe token {token:?}: not a whole number"
        ))
    })?;
    if value.is_empty() || value.contains(char::is_whitespace) {
        return Err(Error::usage(format!(
            "invalid drill-probe value {value:?}: give one word"
        )));
    }
    let answer = write(path, token, value).map_err(|e| {
        Error::internal(format!(
            "cannot write the probe store {}: {}",
            path.display(),
            crate::messages::io(&e)
        ))
    })?;
    match answer {
        Answer::Accepted => Ok(0),
        Answer::Rejected { highest } => {
            crate::warn!("stale write rejected: token {token} is below {highest}");
            Ok(PROBE_REJECTED)
        }
    }
}

fn read_all(file: &mut File) -> io::Result<String> {
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

fn highest_accepted(text: &str) -> Option<u64> {
    parse(text)
        .iter()
        .filter(|e| e.accepted)
        .map(|e| e.token)
        .max()
}

/// The journal's lines; a line that cannot be read (a torn write) is skipped.
fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let accepted = match words.next()? {
                "accepted" => true,
                "rejected" => false,
                _ => return None,
            };
            let at: u64 = words.next()?.parse().ok()?;
            let token = words.next()?.parse().ok()?;
            let value = words.next()?.to_owned();
            Some(Entry {
                at: BootInstant::from_since_boot(Duration::from_nanos(at)),
                token,
                value,
                accepted,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_rising_and_equal_tokens_and_rejects_lower_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        assert_eq!(write(&store, 33, "a").unwrap(), Answer::Accepted);
        assert_eq!(write(&store, 33, "a2").unwrap(), Answer::Accepted);
        assert_eq!(write(&store, 34, "b").unwrap(), Answer::Accepted);
        assert_eq!(
            write(&store, 33, "late").unwrap(),
            Answer::Rejected { highest: 34 }
        );
        let entries = journal(&store).unwrap();
        let seen: Vec<(u64, &str, bool)> = entries
            .iter()
            .map(|e| (e.token, e.value.as_str(), e.accepted))
            .collect();
        assert_eq!(
            seen,
            [
                (33, "a", true),
                (33, "a2", true),
                (34, "b", true),
                (33, "late", false)
            ]
        );
        assert!(entries.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn an_absent_store_is_empty_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(journal(&dir.path().join("none")).unwrap().is_empty());
        let parsed = parse("accepted 1 2 x\ngarbage\naccepted 5 nope y\nrejected 3 1 z");
        assert_eq!(parsed.len(), 2);
        assert_eq!(highest_accepted("accepted 1 2 x\nrejected 3 9 z"), Some(2));
    }

    #[test]
    fn a_write_after_a_torn_line_is_still_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::write(&store, "accepted 1 10 a:before\naccepted 2 1").unwrap();
        assert_eq!(
            write(&store, 9, "a:delayed").unwrap(),
            Answer::Rejected { highest: 10 }
        );
        let seen: Vec<(u64, String)> = journal(&store)
            .unwrap()
            .into_iter()
            .map(|e| (e.token, e.value))
            .collect();
        assert_eq!(seen, [(10, "a:before".into()), (9, "a:delayed".into())]);
    }

    #[test]
    fn the_probe_reports_by_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        assert_eq!(probe(&store, "10", "a").unwrap(), 0);
        assert_eq!(probe(&store, "9", "b").unwrap(), PROBE_REJECTED);
        assert!(probe(&store, "x", "a").is_err());
        assert!(probe(&store, "1", "two words").is_err());
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(from_args(&args(&["lockrun", "status", "x"])), None);
        let store_arg = store.to_str().unwrap();
        assert_eq!(
            from_args(&args(&["lockrun", SUBCOMMAND, store_arg, "11", "c"])),
            Some(0)
        );
        assert_eq!(
            from_args(&args(&["lockrun", SUBCOMMAND, store_arg])),
            Some(crate::exit::USAGE)
        );
    }
}
