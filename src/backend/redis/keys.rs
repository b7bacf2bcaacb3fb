//! Where one name's state lives in Redis: every key of a name shares the hash tag `{NAME}`, so all
//! of them land in one cluster slot and a script may touch several at once.
//!
//! For a name `N`:
//! - `lockrun:{N}:meta` — hash, never expires: `token` (the last fencing token issued), `limit`
//!   (the largest `--limit` seen, so `status` knows which slots to read) and `arrivals` (the
//!   waiters' ticket counter).
//! - `lockrun:{N}:slot:K` — hash, one per held slot, expiring with the lease: `owner`, `token`,
//!   `limit`, `info` (the holder's JSON for `status`).
//! - `lockrun:{N}:queue` — sorted set of waiter ids by ticket: the line, first come first served.
//! - `lockrun:{N}:beats` — sorted set of waiter ids by heartbeat deadline (server milliseconds): a
//!   waiter whose deadline passed is dropped from the line.
//! - `lockrun:{N}:released` — the pub/sub channel a release publishes on.
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

    pub fn meta(&self) -> String {
        format!("{}meta", self.base)
    }

    pub fn slot(&self, slot: u32) -> String {
        format!("{}slot:{slot}", self.base)
    }

    /// Slots `0..limit`, in order.
    pub fn slots(&self, limit: u32) -> Vec<String> {
        (0..limit).map(|k| self.slot(k)).collect()
    }

    pub fn queue(&self) -> String {
        format!("{}queue", self.base)
    }

    pub fn beats(&self) -> String {
        format!("{}beats", self.base)
    }

    pub fn channel(&self) -> String {
        format!("{}released", self.base)
    }
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
        assert_eq!(keys.channel(), "lockrun:{ci/deploy:prod}:released");
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
