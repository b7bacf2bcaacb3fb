//! What a contender's znode holds: who it is (shown by `status` and in waiting messages), the
//! `--limit` it counts by, and the session timeout it was granted (the longest its lease can have
//! left, which `status` shows, since ZooKeeper does not say when a session was last heard from);
//! and the newest `--supersede` waiter of a name. Both are stored as JSON ([`Stored`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::backend::HolderInfo;

/// A contender's znode data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub holder: HolderInfo,
    pub limit: u32,
    pub ttl_ms: u64,
}

impl Stored for Record {}

/// The newest `--supersede` waiter of a name: its token (create zxid) and record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Newest {
    pub token: i64,
    pub holder: HolderInfo,
}

impl Stored for Newest {}

/// What lockrun keeps in a znode's data, as JSON.
pub trait Stored: Serialize + DeserializeOwned {
    fn encode(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Stored data; `None` when it is not one of lockrun's.
    fn decode(data: &[u8]) -> Option<Self> {
        serde_json::from_slice(data).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Mode;

    #[test]
    fn records_round_trip_and_foreign_data_is_none() {
        let record = Record {
            holder: HolderInfo::current(Some("n".into()), Mode::Shared),
            limit: 3,
            ttl_ms: 2000,
        };
        assert_eq!(Record::decode(&record.encode()), Some(record));
        assert_eq!(Record::decode(b"not json"), None);
        assert_eq!(Newest::decode(b""), None);
    }
}
