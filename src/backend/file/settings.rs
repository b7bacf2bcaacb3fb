//! [`Settings`] of the `file://` backend: the state directory, absolute, from `file:///DIR`
//! (`file://localhost/DIR` too), or the per-user default for a bare `file://`. DIR is a URL's
//! path: percent-decoded (`%20` is a space), and a `?` or `#` in it is refused rather than made
//! part of a directory's name.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::FileBackend;
use crate::backend::url::UrlForms;
use crate::backend::{Backend, BackendError};

/// Where the kernel locks live.
#[derive(Clone, Debug)]
pub struct Settings {
    dir: PathBuf,
    /// `file://DIR`, which holds no secret.
    forms: UrlForms,
}

impl Settings {
    /// Parses `file:///DIR`; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let rest = raw.strip_prefix("file://").ok_or("expected file:///DIR")?;
        if rest.is_empty() {
            return Self::default_dir();
        }
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        if !path.starts_with('/') {
            return Err("give an absolute directory, as in file:///var/lib/lockrun".into());
        }
        // The query or the fragment, whichever comes first, holds the rest of the URL.
        if let Some(at) = path.find(['?', '#']) {
            let rest = &path[at..];
            return Err(match rest.starts_with('?') {
                true => format!(
                    "unexpected {rest:?}: file:// takes no options (write a ? in a directory's \
                     name as %3F)"
                ),
                false => format!(
                    "unexpected {rest:?}: a file:// URL ends with its directory (write a # in a \
                     directory's name as %23)"
                ),
            });
        }
        let path: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
        if path.contains(&0) {
            return Err("the directory contains a NUL byte".into());
        }
        let path = OsString::from_vec(path);
        let path = path.as_bytes();
        // Lock files beside /etc and /usr are no one's intent: a slash too many, or a directory
        // left out.
        if path.iter().all(|&b| b == b'/') {
            return Err(
                "that is the root directory: give lockrun a directory of its own, as in \
                 file:///var/lib/lockrun (file:// alone is the default state directory)"
                    .into(),
            );
        }
        Ok(Self::at(PathBuf::from(OsString::from_vec(path.to_vec()))))
    }

    /// The per-user state directory (see [`crate::backend::default_state_dir`]).
    pub fn default_dir() -> Result<Self, String> {
        crate::backend::default_state_dir().map(Self::at)
    }

    fn at(dir: PathBuf) -> Self {
        Settings {
            forms: UrlForms::public(format!("file://{}", url_path(&dir))),
            dir,
        }
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `dir` as a URL's path that [`Settings::parse`] reads back as `dir`: `%`, `?`, `#`, control
/// characters and bytes that are not UTF-8 percent-encoded, everything else as it is (a space or
/// an accented letter stays readable in messages).
fn url_path(dir: &Path) -> String {
    let mut text = String::new();
    for chunk in dir.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match matches!(c, '%' | '?' | '#') || c.is_control() {
                true => percent_encoded(&mut text, c.encode_utf8(&mut [0; 4]).as_bytes()),
                false => text.push(c),
            }
        }
        percent_encoded(&mut text, chunk.invalid());
    }
    text
}

/// Appends `bytes` to `text` as `%XX` each.
fn percent_encoded(text: &mut String, bytes: &[u8]) {
    for b in bytes {
        text.push_str(&format!("%{b:02X}"));
    }
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        &self.forms
    }

    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        Ok(Box::new(FileBackend::open(&self.dir)?))
    }

    /// A state directory that does not exist yet holds no lock: a look does not create it (a
    /// mistyped path would otherwise be made, private, by `status`).
    async fn open_to_look(&self) -> Result<Option<Box<dyn Backend>>, BackendError> {
        match std::fs::symlink_metadata(&self.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => self.open().await.map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Settings as _;

    #[test]
    fn a_directory_is_a_decoded_url_path() {
        let dir = |raw: &str| Settings::parse(raw).map(|s| s.dir().to_owned());
        assert_eq!(dir("file:///tmp/a%20b"), Ok(PathBuf::from("/tmp/a b")));
        assert_eq!(dir("file:///tmp/a b"), Ok(PathBuf::from("/tmp/a b")));
        assert_eq!(dir("file:///tmp/50%25"), Ok(PathBuf::from("/tmp/50%")));
        assert_eq!(dir("file://localhost/tmp/x"), Ok(PathBuf::from("/tmp/x")));
        assert_eq!(dir("file:///tmp/%3F%23"), Ok(PathBuf::from("/tmp/?#")));
        assert!(dir("file:///tmp/a%00b").unwrap_err().contains("NUL"));
        assert!(dir("file:///%2F").unwrap_err().contains("root directory"));
    }

    #[test]
    fn options_and_fragments_are_refused() {
        for (raw, shown) in [
            ("file:///tmp/d?x=1", "\"?x=1\""),
            ("file:///tmp/d?", "\"?\""),
            ("file:///tmp/d#frag", "\"#frag\""),
            ("file:///tmp/d#a?b", "\"#a?b\""),
        ] {
            let err = Settings::parse(raw).unwrap_err();
            assert!(
                err.starts_with(&format!("unexpected {shown}")),
                "{raw}: {err}"
            );
        }
    }

    /// The URL handed to another lockrun (the drill's holders) names the same directory.
    #[test]
    fn the_given_url_reads_back_as_the_same_directory() {
        for dir in [
            &b"/tmp/plain"[..],
            b"/tmp/a b",
            b"/tmp/50%",
            b"/tmp/q?h#",
            b"/tmp/caf\xc3\xa9",
            b"/tmp/line\nbreak",
            b"/tmp/not\xffutf8",
        ] {
            let dir = PathBuf::from(OsString::from_vec(dir.to_vec()));
            let given = Settings::at(dir.clone()).url();
            assert_eq!(
                Settings::parse(&given).map(|s| s.dir().to_owned()),
                Ok(dir),
                "{given}"
            );
        }
        assert_eq!(
            Settings::at("/tmp/café x".into()).url(),
            "file:///tmp/café x"
        );
    }
}
