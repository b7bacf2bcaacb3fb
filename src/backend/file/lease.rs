//! A held file lease: the locked slot file, the holder record written into it, and the checks that
//! stand in for renewal on a lock the kernel keeps for as long as the process lives.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::state_dir::{FileId, StateDir};
use crate::backend::{BackendError, Grant, HolderInfo, Lease, RenewError, Renewal};
use crate::messages::io as io_reason;

/// What a holder writes into its slot file for `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    pub token: u64,
    pub slot: u32,
    pub limit: u32,
    pub ttl_ms: u64,
    #[serde(flatten)]
    pub holder: HolderInfo,
}

impl HolderRecord {
    /// Reads the record from a slot file; `None` if it is empty or not (yet) complete.
    pub fn read(file: &File) -> Option<Self> {
        let mut buf = vec![0u8; 8192];
        let len = file.read_at(&mut buf, 0).ok()?;
        serde_json::from_slice(buf[..len].trim_ascii_end()).ok()
    }
}

/// A slot lock held by this process.
pub struct FileLease {
    dir: Arc<StateDir>,
    file_name: String,
    file: File,
    id: FileId,
    grant: Grant,
}

impl FileLease {
    /// Takes over a slot file whose `flock` this process holds, and records the holder in it.
    pub fn hold(
        dir: Arc<StateDir>,
        file_name: String,
        file: File,
        grant: Grant,
        record: &HolderRecord,
    ) -> io::Result<Self> {
        let mut json = serde_json::to_vec(record).map_err(io::Error::other)?;
        json.push(b'\n');
        file.write_all_at(&json, 0)?;
        file.set_len(json.len() as u64)?;
        let id = FileId::of(&file)?;
        Ok(FileLease {
            dir,
            file_name,
            file,
            id,
            grant,
        })
    }

    fn failed(&self, e: &io::Error) -> BackendError {
        BackendError::Failed {
            endpoint: self.dir.path().join(&self.file_name).display().to_string(),
            reason: io_reason(e),
        }
    }
}

#[async_trait]
impl Lease for FileLease {
    fn grant(&self) -> Grant {
        self.grant
    }

    /// The kernel keeps the lock while this process lives, so there is nothing to extend; what can
    /// go wrong is the lock file being removed or replaced, after which another process can lock a
    /// new file of the same name. That is a lost lease.
    async fn renew(&self) -> Result<Renewal, RenewError> {
        match self.dir.file_id(&self.file_name) {
            Ok(Some(id)) if id == self.id => Ok(Renewal { ttl: None }),
            Ok(_) => Err(RenewError::Lost(format!(
                "lock file {} was removed or replaced; another process may now hold the lock",
                self.dir.path().join(&self.file_name).display()
            ))),
            Err(e) => Err(RenewError::Unconfirmed(self.failed(&e))),
        }
    }

    /// Clears the holder record, then closes the file, which releases the lock and wakes waiters.
    async fn release(self: Box<Self>) -> Result<(), BackendError> {
        let cleared = self.file.set_len(0).map_err(|e| self.failed(&e));
        drop(self.file);
        cleared
    }
}
