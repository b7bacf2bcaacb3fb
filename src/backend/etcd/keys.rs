//! Where one name's state lives in etcd, and what a holder key stores.
//!
//! For a name `N`:
//! - `lockrun/N/#holders/<lease id, 16 hex digits>` — one key per run that holds or waits, attached
//!   to its lease, created once (a transaction checks `create_revision == 0`). Ordered by create
//!   revision, the keys are the line: the first `limit` hold, the rest wait. A holder's fencing
//!   token is its key's create revision, which the cluster never reuses or lowers.
//! - `lockrun/N/#slots/<K>` — with `--limit` above 1, semaphore slot `K`, claimed by a holder (a
//!   transaction: the slot key must not exist and the holder key must), attached to its lease, so it
//!   goes with the holder.
//!
//! Names cannot contain `#`, so `lockrun/a/#holders/` never prefixes a key of the name `a/b`.

use serde::{Deserialize, Serialize};

use crate::backend::HolderInfo;
use crate::name::LockName;

/// Every key lockrun writes starts with this.
pub const ROOT: &str = "lockrun/";
const HOLDERS: &str = "/#holders/";
const SLOTS: &str = "/#slots/";

/// The keys of one name.
#[derive(Clone, Debug)]
pub struct Keys {
    name: String,
}

impl Keys {
    pub fn new(name: &LockName) -> Self {
        Keys {
            name: name.to_string(),
        }
    }

    /// The prefix of every holder key of the name.
    pub fn holders(&self) -> String {
        format!("{ROOT}{}{HOLDERS}", self.name)
    }

    /// The holder key of the run with lease `lease`.
    pub fn holder(&self, lease: i64) -> String {
        format!("{}{:016x}", self.holders(), lease as u64)
    }

    /// The prefix of every slot key of the name.
    pub fn slots(&self) -> String {
        format!("{ROOT}{}{SLOTS}", self.name)
    }

    pub fn slot(&self, slot: u32) -> String {
        format!("{}{slot}", self.slots())
    }
}

/// The slot number a slot key names.
pub fn slot_of(key: &[u8]) -> Option<u32> {
    let key = std::str::from_utf8(key).ok()?;
    let (_, slot) = key.rsplit_once(SLOTS)?;
    slot.parse().ok()
}

/// The name a holder key belongs to, or `None` for any other key.
pub fn name_of_holder(key: &[u8]) -> Option<LockName> {
    let key = std::str::from_utf8(key).ok()?.strip_prefix(ROOT)?;
    let (name, _) = key.rsplit_once(HOLDERS)?;
    LockName::parse(name).ok()
}

/// What a holder key stores (JSON): who asked, the `--limit` they passed, and the slot once held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(flatten)]
    pub holder: HolderInfo,
    pub limit: u32,
    #[serde(default)]
    pub slot: Option<u32>,
}

impl Record {
    pub fn encode(&self) -> String {
        // A struct of strings and numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The record in a holder key's value; `None` for a value lockrun did not write.
    pub fn decode(value: &[u8]) -> Option<Record> {
        serde_json::from_slice(value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_nested_names_never_overlap() {
        let a = Keys::new(&LockName::parse("a").unwrap());
        let ab = Keys::new(&LockName::parse("a/holders").unwrap());
        assert_eq!(a.holder(255), "lockrun/a/#holders/00000000000000ff");
        assert!(!ab.holder(1).starts_with(&a.holders()));
        assert_eq!(a.slot(2), "lockrun/a/#slots/2");
        assert_eq!(slot_of(a.slot(2).as_bytes()), Some(2));
    }

    #[test]
    fn holder_keys_name_their_lock() {
        let name = LockName::parse("ci/deploy:prod").unwrap();
        let key = Keys::new(&name).holder(7);
        assert_eq!(name_of_holder(key.as_bytes()), Some(name));
        assert_eq!(name_of_holder(b"lockrun/x/#slots/0"), None);
        assert_eq!(name_of_holder(b"other"), None);
    }

    #[test]
    fn records_round_trip() {
        let record = Record {
            holder: HolderInfo {
                pid: 1,
                host: "h".into(),
                user: "u".into(),
                note: Some("n".into()),
                acquired_at: "2026-01-01T00:00:00Z".into(),
                mode: crate::backend::Mode::Exclusive,
            },
            limit: 3,
            slot: Some(2),
        };
        assert_eq!(Record::decode(record.encode().as_bytes()), Some(record));
        assert_eq!(Record::decode(b"junk"), None);
    }
}
