//! [`Settings`] of the `file://` backend: the state directory, absolute, from `file:///DIR`
//! (`file://localhost/DIR` too), or the per-user default for a bare `file://`.

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
        if path.contains('\0') {
            return Err("the directory contains a NUL byte".into());
        }
        // Lock files beside /etc and /usr are no one's intent: a slash too many, or a directory
        // left out.
        if path.trim_start_matches('/').is_empty() {
            return Err(
                "that is the root directory: give lockrun a directory of its own, as in \
                 file:///var/lib/lockrun (file:// alone is the default state directory)"
                    .into(),
            );
        }
        Ok(Self::at(PathBuf::from(path)))
    }

    /// The per-user state directory (see [`crate::backend::default_state_dir`]).
    pub fn default_dir() -> Result<Self, String> {
        crate::backend::default_state_dir().map(Self::at)
    }

    fn at(dir: PathBuf) -> Self {
        Settings {
            forms: UrlForms::public(format!("file://{}", dir.display())),
            dir,
        }
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
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
