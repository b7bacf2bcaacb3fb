//! What a contender's znode holds: who it is (shown by `status` and in waiting messages), the
//! `--limit` it counts by, and the session timeout it was granted (the longest its lease can have
//! left, which `status` shows, since ZooKeeper does not say when a session was last heard from).

use serde::{Deserialize, Serialize};

use crate::backend::HolderInfo;

/// A contender's znode data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub holder: HolderInfo,
    pub limit: u32,
    pub ttl_ms: u64,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A stored record; `None` when the data is not one of lockrun's.
    pub fn decode(data: &[u8]) -> Option<Record> {
        serde_json::from_slice(data).ok()
    }
}

/// The newest `--supersede` waiter of a name: its token (create zxid) and record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Newest {
    pub token: i64,
    pub holder: HolderInfo,
}

impl Newest {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(data: &[u8]) -> Option<Newest> {
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
