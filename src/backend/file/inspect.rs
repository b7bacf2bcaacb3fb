//! `status`, `list`, `release --force` and `--min-interval` on the `file://` backend: read from
//! the kernel's lock table plus the holders' and waiters' records, without touching any lock. A
//! kernel lock cannot be broken from outside: only its holder can drop it.

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use async_trait::async_trait;

use super::backend::FileBackend;
use super::lease::HolderRecord;
use super::line::{self, Line};
use super::proc_locks::LockTable;
use super::{interval, paths};
use crate::backend::{
    Backend, BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus,
    WaiterStatus,
};
use crate::name::LockName;

impl FileBackend {
    /// Reads the kernel's lock table and the directory once: every name's holders and waiters.
    fn snapshot(&self) -> io::Result<Snapshot> {
        let table = LockTable::read()?;
        let mut names: BTreeMap<LockName, Slots> = BTreeMap::new();
        for file_name in self.dir.file_names()? {
            if let Some((name, slot)) = paths::parse_slot_file(&file_name) {
                let slots = names.entry(name).or_default();
                slots.files += 1;
                if let Some(holder) = self.slot_holder(&table, &file_name, slot)? {
                    slots.holders.push(holder);
                }
            } else if let Some(name) = paths::parse_line_dir(&file_name) {
                let slots = names.entry(name.clone()).or_default();
                self.read_line(&table, &name, slots)?;
            }
        }
        for slots in names.values_mut() {
            slots.holders.sort_by_key(|(h, _)| (h.slot, h.token));
        }
        Ok(Snapshot { names })
    }

    /// A name's shared holders and waiters, from its line directory.
    fn read_line(&self, table: &LockTable, name: &LockName, slots: &mut Slots) -> io::Result<()> {
        let Some(line) = Line::existing(&self.dir, name)? else {
            return Ok(());
        };
        let mut files = line.dir.file_names()?;
        files.sort();
        for file_name in files {
            let Some(id) = line.dir.file_id(&file_name)? else {
                continue;
            };
            if table.exclusive_holder(id).is_none() {
                continue;
            }
            if line::is_holder_file(&file_name) {
                if let Some(file) = line.dir.open_existing(&file_name)?
                    && let Some(record) = HolderRecord::read(&file)
                {
                    let ttl = Duration::from_millis(record.ttl_ms);
                    let status = HolderStatus::new(record.holder, record.token, 0, ttl);
                    slots.holders.push((status, 1));
                }
            } else if line::Entry::parse(&file_name).is_some()
                && let Some(record) = line.waiter(&file_name)
            {
                slots.queue.push(WaiterStatus::new(record));
            }
        }
        Ok(())
    }

    fn slot_holder(
        &self,
        table: &LockTable,
        file_name: &str,
        slot: u32,
    ) -> io::Result<Option<(HolderStatus, u32)>> {
        let Some(id) = self.dir.file_id(file_name)? else {
            return Ok(None);
        };
        let Some(pid) = table.exclusive_holder(id) else {
            return Ok(None);
        };
        let Some(file) = self.dir.open_existing(file_name)? else {
            return Ok(None);
        };
        // A holder writes its record just after locking; give a brand-new one a moment.
        for attempt in 0..3 {
            if let Some(record) = HolderRecord::read(&file)
                && (pid == 0 || record.holder.pid == pid)
            {
                let ttl = Duration::from_millis(record.ttl_ms);
                return Ok(Some((
                    HolderStatus::new(record.holder, record.token, slot, ttl),
                    record.limit,
                )));
            }
            if attempt < 2 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Locked by something that wrote no record of ours (an outside `flock`, or a holder that
        // has not written it yet): report what the kernel knows.
        let unknown = HolderInfo {
            pid,
            ..HolderInfo::unknown()
        };
        Ok(Some((
            HolderStatus::new(unknown, 0, slot, Duration::ZERO),
            1,
        )))
    }

    /// NAME's status from a snapshot. The limit is the one its holders declared; for a free name,
    /// the number of slot files (the largest limit it was used with).
    fn status_in(snapshot: &Snapshot, name: &LockName) -> LockStatus {
        let Some(slots) = snapshot.names.get(name) else {
            return LockStatus::free(name);
        };
        let limit = slots
            .holders
            .iter()
            .map(|(_, limit)| *limit)
            .max()
            .unwrap_or(slots.files)
            .max(1);
        LockStatus::new(
            name,
            limit,
            slots.holders.iter().map(|(h, _)| h.clone()).collect(),
            slots.queue.clone(),
        )
    }
}

/// The directory's names, read once.
struct Snapshot {
    names: BTreeMap<LockName, Slots>,
}

/// One name's lock files, current holders (with the limit each declared) and waiters.
#[derive(Default)]
struct Slots {
    files: u32,
    holders: Vec<(HolderStatus, u32)>,
    queue: Vec<WaiterStatus>,
}

/// Read from the kernel's lock table and the records; a kernel lock cannot be broken from outside.
#[async_trait]
impl Inspect for FileBackend {
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        self.snapshot()
            .map(|snapshot| Self::status_in(&snapshot, name))
            .map_err(|e| self.failed(&e))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let snapshot = self.snapshot().map_err(|e| self.failed(&e))?;
        Ok(snapshot
            .names
            .iter()
            .filter(|(name, slots)| !slots.holders.is_empty() && name.as_str().starts_with(prefix))
            .map(|(name, _)| Self::status_in(&snapshot, name))
            .collect())
    }

    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        interval::claim(&self.dir, &paths::interval_file(name), interval)
            .await
            .map_err(|e| self.failed(&e))
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        interval::ran_within(&self.dir, &paths::interval_file(name), interval)
            .map_err(|e| self.failed(&e))
    }

    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        let status = self.status(name).await?;
        if status.holders.is_empty() {
            return Ok(0);
        }
        let pids: Vec<String> = status.holders.iter().map(|h| h.pid.to_string()).collect();
        Err(BackendError::Unsupported(format!(
            "cannot force-release {name} on {}: the kernel lock is held by pid {}, and only that process can drop it (it is released the moment the process exits: kill {})",
            self.describe(),
            pids.join(", pid "),
            pids.join(" ")
        )))
    }
}
