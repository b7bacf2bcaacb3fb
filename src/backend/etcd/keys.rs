//! Where one name's state lives in etcd.
//!
//! For a name `N`:
//! - `lockrun/N/#holders/<id>` — one key per run that holds or waits, `<id>` its lease id in 16
//!   hex digits, attached to that lease, created once (a transaction checks `create_revision ==
//!   0`). Ordered by create revision, the keys are the line; a holder's fencing token is its key's
//!   create revision, which the cluster never reuses or lowers. The value is a
//!   [`Record`](super::record::Record).
//! - `lockrun/N/#slots/<K>` — with `--limit` above 1, semaphore slot `K`, claimed by a holder (a
//!   transaction: the slot key must not exist and the holder key must), attached to its lease, so it
//!   goes with the holder.
//! - `lockrun/N/#supersede` — the newest `--supersede` waiter's record, written in the same
//!   transaction that created its holder key (so the marker's mod revision is that key's create
//!   revision). Attached to no lease: an older `--supersede` waiter that looks only after the
//!   newer one left must still find it; one small key per name that ever used `--supersede`.
//! - `lockrun/N/#interval` — `--min-interval`: exists while NAME ran less than the interval ago,
//!   attached to a lease as long as the interval.
//!
//! Names cannot contain `#`, so `lockrun/a/#holders/` never prefixes a key of the name `a/b`.

use crate::name::LockName;

/// Every key lockrun writes starts with this.
pub const ROOT: &str = "lockrun/";
const HOLDERS: &str = "/#holders/";
const SLOTS: &str = "/#slots/";
const SUPERSEDE: &str = "/#supersede";
const INTERVAL: &str = "/#interval";

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
        self.holder_by_id(&id_of_lease(lease))
    }

    /// The holder key whose id (lease, in hex) is `id`.
    pub fn holder_by_id(&self, id: &str) -> String {
        format!("{}{id}", self.holders())
    }

    /// The id part of one of this name's holder keys; `None` for any other key.
    pub fn id_of<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        std::str::from_utf8(key)
            .ok()?
            .strip_prefix(self.holders().as_str())
    }

    /// The prefix of every slot key of the name.
    pub fn slots(&self) -> String {
        format!("{ROOT}{}{SLOTS}", self.name)
    }

    pub fn slot(&self, slot: u32) -> String {
        format!("{}{slot}", self.slots())
    }

    /// The newest `--supersede` waiter's marker.
    pub fn supersede(&self) -> String {
        format!("{ROOT}{}{SUPERSEDE}", self.name)
    }

    /// The `--min-interval` key.
    pub fn interval(&self) -> String {
        format!("{ROOT}{}{INTERVAL}", self.name)
    }
}

/// A holder key's id: its lease id in 16 hex digits.
pub fn id_of_lease(lease: i64) -> String {
    format!("{:016x}", lease as u64)
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
        assert!(!a.supersede().starts_with(&a.holders()));
        assert!(!a.interval().starts_with(&a.holders()));
    }

    #[test]
    fn holder_keys_name_their_lock_and_their_id() {
        let name = LockName::parse("ci/deploy:prod").unwrap();
        let keys = Keys::new(&name);
        let key = keys.holder(7);
        assert_eq!(name_of_holder(key.as_bytes()), Some(name));
        assert_eq!(keys.id_of(key.as_bytes()), Some("0000000000000007"));
        assert_eq!(keys.holder_by_id("0000000000000007"), key);
        assert_eq!(keys.id_of(keys.slot(0).as_bytes()), None);
        assert_eq!(name_of_holder(b"lockrun/x/#slots/0"), None);
        assert_eq!(name_of_holder(b"lockrun/x/#supersede"), None);
        assert_eq!(name_of_holder(b"other"), None);
    }
}
