//! Lease names: the one validated type every backend keys its state by.
//!
//! A name is 1–200 bytes of `A-Z a-z 0-9 . _ : -` in segments joined by single `/`, with no empty,
//! `.` or `..` segment. The rules keep names portable across backends (file names, Redis keys, etcd
//! prefixes, SQL text) and make it impossible for the file backend to be steered outside its state
//! directory.

use std::fmt;

/// Longest accepted name, in bytes.
pub const MAX_LEN: usize = 200;

/// A validated lease name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(String);

impl LockName {
    /// Validates `raw`; the error reads as a one-line usage message.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("invalid lock name \"\": it is empty".into());
        }
        if raw.len() > MAX_LEN {
            return Err(format!(
                "invalid lock name: {} bytes is longer than {MAX_LEN}",
                raw.len()
            ));
        }
        if let Some(bad) = raw.chars().find(|&c| !is_name_char(c) && c != '/') {
            return Err(format!(
                "invalid lock name {raw:?}: {bad:?} is not allowed (use A-Z a-z 0-9 . _ : - and / between segments)"
            ));
        }
        for segment in raw.split('/') {
            let problem = match segment {
                "" if raw.starts_with('/') => "it starts with /",
                "" => "it has an empty segment",
                "." | ".." => "a segment is . or ..",
                _ => continue,
            };
            return Err(format!("invalid lock name {raw:?}: {problem}"));
        }
        Ok(LockName(raw.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_segmented_names() {
        for ok in [
            "billing",
            "a/b/c",
            "job:nightly-1.5_x",
            "..a",
            "a..",
            "A/.b",
        ] {
            assert_eq!(LockName::parse(ok).unwrap().as_str(), ok);
        }
        assert!(LockName::parse(&"x".repeat(MAX_LEN)).is_ok());
    }

    #[test]
    fn rejects_names_that_could_escape_or_confuse() {
        for bad in [
            "", "/abs", "a//b", "a/", "..", ".", "a/../b", "a/./b", "a b", "ü", "a\\b", "a\0b",
            "a@b", "a%b", "a~b",
        ] {
            let err = LockName::parse(bad).unwrap_err();
            assert!(err.starts_with("invalid lock name"), "{bad:?}: {err}");
            assert!(!err.contains('\n'));
        }
        assert!(LockName::parse(&"x".repeat(MAX_LEN + 1)).is_err());
    }
}
