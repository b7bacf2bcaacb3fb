//! Where one name's state lives in Redis: every key of a name shares the hash tag `{NAME}`, so all
//! of them land in one cluster slot and a script may touch several at once.
//!
//! For a name `N`:
//! - `lockrun:{N}:meta` — hash, never expires: `token` (the last fencing token issued), `limit`
//!   (the largest `--limit` seen, so `status` knows which slots to read), `arrivals` (the
//!   waiters' ticket counter), `sup_ticket`/`sup_owner` (the newest `--supersede` waiter) and
//!   `last_run` (`--min-interval`: when the name last ran, server microseconds).
//! - `lockrun:{N}:slot:K` — hash, one per exclusively held slot, expiring with the lease: `owner`,
//!   `token`, `limit`, `info` (the holder's JSON for `status`).
//! - `lockrun:{N}:readers` — sorted set of shared holders by lease expiry (server milliseconds),
//!   and `lockrun:{N}:rinfo` — hash of each one's `token|record`.
//! - `lockrun:{N}:queue` — sorted set of waiter ids by ticket: the line, first come first served;
//!   `lockrun:{N}:xqueue` the exclusive waiters among them, `lockrun:{N}:squeue` the
//!   `--supersede` ones, and `lockrun:{N}:qinfo` a hash of each waiter's record.
//! - `lockrun:{N}:beats` — sorted set of waiter ids by heartbeat deadline (server milliseconds): a
//!   waiter whose deadline passed is dropped from the line.
//! - `lockrun:{N}:wake:ID` — the pub/sub channel of waiter ID: a release publishes only to the
//!   waiters whose turn it may be, so one release never wakes the whole line.
//! - `lockrun:{N}:revoke:ID` — the channel of holder ID: `release --force` tells it there.
//!
//! Names cannot contain `{`, `}` or glob characters, so a name never breaks the hash tag or a
//! `SCAN` pattern.

use crate::name::LockName;

const ROOT: &str = "lockrun:{";
const META_SUFFIX: &str = "}:meta";

/// The keys of one name.
#[derive(Clone, Debug)]
pub struct Keys {
    /// `lockrun:{NAME}:`
    base: String,
}

impl Keys {
    pub fn new(name: &LockName) -> Self {
        Keys {
            base: format!("{ROOT}{name}}}:"),
        }
    }

    pub fn slot(&self, slot: u32) -> String {
        format!("{}slot:{slot}", self.base)
    }

    /// Slots `0..limit`, in order.
    pub fn slots(&self, limit: u32) -> Vec<String> {
        (0..limit).map(|k| self.slot(k)).collect()
    }

    /// The prefix of every waiter's wake-up channel; `wake:ID` is waiter ID's.
    pub fn wake_prefix(&self) -> String {
        format!("{}wake:", self.base)
    }

    /// Waiter `owner`'s wake-up channel.
    pub fn wake(&self, owner: &str) -> String {
        format!("{}{owner}", self.wake_prefix())
    }

    /// The prefix of every holder's revocation channel; `revoke:ID` is holder ID's.
    pub fn revoke_prefix(&self) -> String {
        format!("{}revoke:", self.base)
    }
}

/// One method per key of a name that is the same for every holder and waiter:
/// `keys.queue()` is `lockrun:{NAME}:queue`.
macro_rules! fixed_keys {
    ($($key:ident),+) => {
        impl Keys {
            $(pub fn $key(&self) -> String {
                format!("{}{}", self.base, stringify!($key))
            })+
        }
    };
}

fixed_keys!(meta, queue, beats, xqueue, squeue, qinfo, readers, rinfo);

/// The keys of a name that every script touching its whole line takes first, in the scripts'
/// order (on a Redis server and on each redlock master alike).
pub fn line_keys(keys: &Keys) -> [String; 8] {
    [
        keys.meta(),
        keys.queue(),
        keys.beats(),
        keys.xqueue(),
        keys.squeue(),
        keys.qinfo(),
        keys.readers(),
        keys.rinfo(),
    ]
}

/// The `SCAN MATCH` pattern for the meta keys of every name starting with `prefix`.
pub fn meta_pattern(prefix: &str) -> String {
    let mut pattern = String::from(ROOT);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern.push_str(META_SUFFIX);
    pattern
}

/// The name a meta key belongs to, or `None` for any other key.
pub fn name_of_meta(key: &str) -> Option<LockName> {
    let name = key.strip_prefix(ROOT)?.strip_suffix(META_SUFFIX)?;
    LockName::parse(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_hash_tag() {
        let keys = Keys::new(&LockName::parse("ci/deploy:prod").unwrap());
        assert_eq!(keys.meta(), "lockrun:{ci/deploy:prod}:meta");
        assert_eq!(keys.slot(2), "lockrun:{ci/deploy:prod}:slot:2");
        assert_eq!(keys.wake_prefix(), "lockrun:{ci/deploy:prod}:wake:");
    }

    #[test]
    fn meta_keys_round_trip_and_patterns_escape_globs() {
        let name = LockName::parse("a.b/c").unwrap();
        assert_eq!(name_of_meta(&Keys::new(&name).meta()), Some(name));
        assert_eq!(name_of_meta("lockrun:{a}:slot:0"), None);
        assert_eq!(name_of_meta("other"), None);
        assert_eq!(meta_pattern("ci/"), "lockrun:{ci/*}:meta");
        assert_eq!(meta_pattern("x*["), "lockrun:{x\\*\\[*}:meta");
    }
}
