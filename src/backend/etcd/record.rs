//! What a holder key stores (JSON): who asked (with the mode), the `--limit` they passed, the slot
//! once held, and what the key last knew of the line ahead of it ([`Hints`]).
//!
//! The hints let the waiter behind a key find its next key to watch from the deleted key's last
//! value (which the deletion event carries), without reading the whole line: `prev` names the key
//! that was just ahead, `writer` the last exclusive key ahead. Each is true as of the moment it
//! was written, and stays true as long as the key it names exists — keys leave the line but never
//! join it ahead of anyone — so a waiter checks that the named key still exists before relying on
//! it, and takes "nothing ahead" as final. A hint that was never written is unknown.

use serde::{Deserialize, Serialize};

use crate::backend::HolderInfo;

/// What a key knew was at one place ahead of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Link {
    /// It never said.
    #[default]
    Unknown,
    /// Nothing was there (final: nothing joins the line ahead of a key).
    Nothing,
    /// This key (its id), when it was written.
    Key(String),
}

impl Link {
    /// As stored: absent when unknown, empty for nothing.
    fn stored(&self) -> Option<String> {
        match self {
            Link::Unknown => None,
            Link::Nothing => Some(String::new()),
            Link::Key(id) => Some(id.clone()),
        }
    }

    fn from_stored(stored: Option<&str>) -> Self {
        match stored {
            None => Link::Unknown,
            Some("") => Link::Nothing,
            Some(id) => Link::Key(id.to_owned()),
        }
    }
}

/// What a key knew of the line ahead of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// The key just ahead.
    pub prev: Link,
    /// The last exclusive key ahead.
    pub writer: Link,
}

/// A holder key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(flatten)]
    pub holder: HolderInfo,
    pub limit: u32,
    #[serde(default)]
    pub slot: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    writer: Option<String>,
}

impl Record {
    /// A record that knows nothing of the line yet.
    pub fn new(holder: HolderInfo, limit: u32, slot: Option<u32>) -> Self {
        Record {
            holder,
            limit,
            slot,
            prev: None,
            writer: None,
        }
    }

    pub fn hints(&self) -> Hints {
        Hints {
            prev: Link::from_stored(self.prev.as_deref()),
            writer: Link::from_stored(self.writer.as_deref()),
        }
    }

    /// The same record with `hints`.
    pub fn with_hints(&self, hints: &Hints) -> Self {
        Record {
            prev: hints.prev.stored(),
            writer: hints.writer.stored(),
            ..self.clone()
        }
    }

    /// The same record with `hints`, stamped with the time it won.
    pub fn stamped_with(&self, hints: &Hints) -> Self {
        Record {
            holder: self.holder.stamped(),
            ..self.with_hints(hints)
        }
    }

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
    use crate::backend::Mode;

    fn holder() -> HolderInfo {
        HolderInfo {
            pid: 1,
            host: "h".into(),
            user: "u".into(),
            note: Some("n".into()),
            acquired_at: "2026-01-01T00:00:00Z".into(),
            mode: Mode::Shared,
        }
    }

    #[test]
    fn records_round_trip_with_and_without_hints() {
        let record = Record::new(holder(), 3, Some(2));
        assert_eq!(
            Record::decode(record.encode().as_bytes()),
            Some(record.clone())
        );
        assert_eq!(record.hints(), Hints::default());
        let hints = Hints {
            prev: Link::Key("00000000000000ff".into()),
            writer: Link::Nothing,
        };
        let hinted = record.with_hints(&hints);
        let decoded = Record::decode(hinted.encode().as_bytes()).unwrap();
        assert_eq!(decoded.hints(), hints);
        assert_eq!(decoded.holder.mode, Mode::Shared);
        assert_eq!(Record::decode(b"junk"), None);
    }

    #[test]
    fn a_record_without_a_mode_is_exclusive() {
        let old = r#"{"pid":1,"host":"h","user":"u","note":null,"acquired_at":"","limit":1}"#;
        let record = Record::decode(old.as_bytes()).unwrap();
        assert_eq!(record.holder.mode, Mode::Exclusive);
        assert_eq!(record.hints(), Hints::default());
    }
}
