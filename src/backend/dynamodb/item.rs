//! Where one name's state lives in the table, and how its items read.
//!
//! The table has one string partition key, [`KEY`]. For a name `N`:
//! - `L#N` — the **lock item**: everything that a claim must check and change in one conditional
//!   write. `token` (the last fencing token issued), `lim` (the `--limit` of the latest claim,
//!   for `status`), `nx`/`ns` (how many exclusive / shared holders it lists), `next`/`serving`
//!   (the line: the last ticket handed out, and the lowest ticket not yet served or skipped),
//!   `sup` (the newest `--supersede` waiter's ticket), `last` (`--min-interval`: when N last ran,
//!   by the server's clock) and one attribute per holder: `h_xK` for exclusive slot K, `h_rOWNER`
//!   for a shared holder — a map of its owner id `o`, record version number `v` (rewritten by
//!   every renewal), lease length `l` (ms), record `i` (JSON, for `status`), slot `k`, mode `m`
//!   and `b`, the holder's wall clock at its last renewal (shown by `status`, never used for a
//!   decision) — with its token beside it in `t_xK` / `t_rOWNER`.
//! - `Q#N#T` — the **ticket item** of the waiter with ticket T: owner `o`, record version `v`
//!   (rewritten by each heartbeat), record `i`, mode `m`, `s` for `--supersede`, `b` its wall
//!   clock at the last heartbeat (for `status` and a try-once, see [`super::queue`]) and `left`
//!   once it gave up.
//!
//! **Tokens.** Every claim — exclusive slot or shared hold, first come or takeover — is one
//! conditional `UpdateItem` of the lock item that also sets `token = token + 1` and copies the
//! new value into the holder's `t_` attribute. DynamoDB applies the writes to one item one at a
//! time, so every claim sees the counter that every earlier claim left: a token is strictly
//! greater than every token of N issued before it, across slots and modes, whatever the slots
//! and holders are. Separate items per slot could not give that (without transactions, which
//! the test server lacks, no write can bump a counter on another item atomically). Releases,
//! forced ones included, remove holder attributes and never touch the counter; the item is never
//! deleted. The counter starts from the creating host's clock in microseconds, so tokens still
//! rise should the table be dropped and created again. The price of one item per name: a write
//! costs one write unit per KB of the item, and the item holds every current holder (about 0.3
//! KB each), so a name held by hundreds at once makes each of its writes dearer, and DynamoDB's
//! 400 KB item limit caps how many can hold a name at once at about a thousand.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::backend::Mode;
use crate::name::LockName;

/// The table's partition key.
pub const KEY: &str = "pk";

pub const TOKEN: &str = "token";
pub const LIMIT: &str = "lim";
pub const NX: &str = "nx";
pub const NS: &str = "ns";
pub const NEXT: &str = "next";
pub const SERVING: &str = "serving";
pub const SUP: &str = "sup";
pub const LAST: &str = "last";
pub const NAME: &str = "name";

/// Fields of a holder map and of a ticket item.
pub const OWNER: &str = "o";
pub const RVN: &str = "v";
pub const TTL: &str = "l";
pub const RECORD: &str = "i";
pub const SLOT: &str = "k";
pub const MODE: &str = "m";
pub const BEAT: &str = "b";
pub const SUPERSEDE: &str = "s";
pub const LEFT: &str = "left";

/// The key of `name`'s lock item.
pub fn lock_key(name: &LockName) -> String {
    format!("L#{name}")
}

/// The key of the ticket item of `name`'s waiter number `ticket`.
pub fn ticket_key(name: &LockName, ticket: u64) -> String {
    format!("Q#{name}#{ticket}")
}

/// The name a lock item's key belongs to.
pub fn name_of(key: &str) -> Option<LockName> {
    LockName::parse(key.strip_prefix("L#")?).ok()
}

/// `{KEY: key}`, as a request names an item.
pub fn key_of(key: String) -> HashMap<String, AttributeValue> {
    HashMap::from([(KEY.to_owned(), AttributeValue::S(key))])
}

/// Which holder attribute: an exclusive slot, or a shared holder by owner id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Seat {
    Slot(u32),
    Reader(String),
}

impl Seat {
    /// The seat of a holder in `mode`, in `slot` for an exclusive one.
    pub fn new(mode: Mode, slot: u32, owner: &str) -> Self {
        match mode {
            Mode::Exclusive => Seat::Slot(slot),
            Mode::Shared => Seat::Reader(owner.to_owned()),
        }
    }

    /// The holder map's attribute.
    pub fn attr(&self) -> String {
        match self {
            Seat::Slot(k) => format!("h_x{k}"),
            Seat::Reader(owner) => format!("h_r{owner}"),
        }
    }

    /// The holder token's attribute.
    pub fn token_attr(&self) -> String {
        format!("t_{}", &self.attr()[2..])
    }

    pub fn mode(&self) -> Mode {
        match self {
            Seat::Slot(_) => Mode::Exclusive,
            Seat::Reader(_) => Mode::Shared,
        }
    }

    /// The holder counter this seat counts in.
    pub fn counter(&self) -> &'static str {
        match self {
            Seat::Slot(_) => NX,
            Seat::Reader(_) => NS,
        }
    }

    pub fn slot(&self) -> u32 {
        match self {
            Seat::Slot(k) => *k,
            Seat::Reader(_) => 0,
        }
    }

    fn from_attr(attr: &str) -> Option<Seat> {
        let rest = attr.strip_prefix("h_")?;
        if let Some(k) = rest.strip_prefix('x') {
            return k.parse().ok().map(Seat::Slot);
        }
        rest.strip_prefix('r')
            .map(|owner| Seat::Reader(owner.to_owned()))
    }
}

/// One holder listed in a lock item.
#[derive(Clone, Debug)]
pub struct Holder {
    pub seat: Seat,
    pub owner: String,
    pub rvn: String,
    pub ttl: Duration,
    pub record: String,
    pub token: u64,
    /// The holder's wall clock at its last renewal, ms since the epoch (display only).
    pub beat_ms: u64,
}

/// A lock item, read.
#[derive(Clone, Debug, Default)]
pub struct LockItem {
    pub exists: bool,
    pub limit: u32,
    pub next: u64,
    pub serving: u64,
    pub sup: u64,
    pub last: Option<u64>,
    pub holders: Vec<Holder>,
}

impl LockItem {
    /// Reads an item as returned by `GetItem` or `ReturnValues`; missing attributes read as 0.
    pub fn parse(item: Option<&HashMap<String, AttributeValue>>) -> Self {
        let Some(item) = item else {
            return LockItem::default();
        };
        let num = |attr: &str| item.get(attr).and_then(number).unwrap_or(0);
        // The holder counters (`nx`, `ns`) are only ever read by conditions.
        let mut holders: Vec<Holder> = item
            .iter()
            .filter_map(|(attr, value)| {
                let seat = Seat::from_attr(attr)?;
                let map = value.as_m().ok()?;
                let token = item.get(&seat.token_attr()).and_then(number).unwrap_or(0);
                Some(Holder {
                    owner: text(map, OWNER),
                    rvn: text(map, RVN),
                    ttl: Duration::from_millis(map.get(TTL).and_then(number).unwrap_or(0)),
                    record: text(map, RECORD),
                    beat_ms: map.get(BEAT).and_then(number).unwrap_or(0),
                    token,
                    seat,
                })
            })
            .collect();
        holders.sort_by_key(|h| (h.seat.slot(), h.token));
        LockItem {
            exists: item.contains_key(KEY),
            limit: u32::try_from(num(LIMIT)).unwrap_or(1).max(1),
            next: num(NEXT),
            serving: num(SERVING),
            sup: num(SUP),
            last: item.get(LAST).and_then(number),
            holders,
        }
    }

    /// Whether nobody stands in line.
    pub fn line_empty(&self) -> bool {
        self.next == 0 || self.serving > self.next
    }

    /// This owner's holder, if the item lists one.
    pub fn held_by(&self, owner: &str) -> Option<&Holder> {
        self.holders.iter().find(|h| h.owner == owner)
    }
}

/// A ticket item, read.
#[derive(Clone, Debug)]
pub struct TicketItem {
    pub owner: String,
    pub rvn: String,
    pub record: String,
    pub supersede: bool,
    pub beat_ms: u64,
    pub left: bool,
}

impl TicketItem {
    pub fn parse(item: &HashMap<String, AttributeValue>) -> Self {
        TicketItem {
            owner: text(item, OWNER),
            rvn: text(item, RVN),
            record: text(item, RECORD),
            supersede: item.get(SUPERSEDE).and_then(|v| v.as_bool().ok()) == Some(&true),
            beat_ms: item.get(BEAT).and_then(number).unwrap_or(0),
            left: item.contains_key(LEFT),
        }
    }

    /// The ticket number of a ticket item's key.
    pub fn number_of(key: &str) -> Option<u64> {
        key.rsplit_once('#')?.1.parse().ok()
    }
}

/// A mode as stored: `x` or `s`.
pub fn mode_code(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "x",
        Mode::Shared => "s",
    }
}

/// A number attribute as an unsigned integer.
pub fn number(value: &AttributeValue) -> Option<u64> {
    value.as_n().ok()?.parse().ok()
}

fn text(map: &HashMap<String, AttributeValue>, field: &str) -> String {
    map.get(field)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// A number attribute.
pub fn n(value: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// Milliseconds since the epoch by this host's wall clock: only ever shown, or used to guess
/// whether a waiter still beats (see [`super::queue`]).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_round_trip_through_their_attributes() {
        for seat in [Seat::Slot(0), Seat::Slot(17), Seat::Reader("ab12".into())] {
            assert_eq!(Seat::from_attr(&seat.attr()), Some(seat.clone()));
        }
        assert_eq!(Seat::Slot(3).token_attr(), "t_x3");
        assert_eq!(Seat::Reader("ab".into()).token_attr(), "t_rab");
        assert_eq!(Seat::from_attr("token"), None);
    }

    #[test]
    fn keys_name_their_lock_and_ticket() {
        let name = LockName::parse("ci/deploy:prod").unwrap();
        assert_eq!(lock_key(&name), "L#ci/deploy:prod");
        assert_eq!(name_of(&lock_key(&name)), Some(name.clone()));
        assert_eq!(TicketItem::number_of(&ticket_key(&name, 42)), Some(42));
        assert_eq!(name_of("Q#x#1"), None);
    }

    #[test]
    fn an_item_reads_its_holders_with_their_tokens() {
        let entry = AttributeValue::M(HashMap::from([
            (OWNER.to_owned(), s("me")),
            (RVN.to_owned(), s("r1")),
            (TTL.to_owned(), n(2000)),
        ]));
        let item = HashMap::from([
            (KEY.to_owned(), s("L#x")),
            (TOKEN.to_owned(), n(9)),
            ("h_x1".to_owned(), entry),
            ("t_x1".to_owned(), n(9)),
            (NEXT.to_owned(), n(3)),
            (SERVING.to_owned(), n(4)),
        ]);
        let item = LockItem::parse(Some(&item));
        assert!(item.exists && item.line_empty());
        assert_eq!(item.holders.len(), 1);
        let h = &item.holders[0];
        assert_eq!(
            (h.seat.clone(), h.token, h.ttl),
            (Seat::Slot(1), 9, Duration::from_secs(2))
        );
        assert_eq!(item.held_by("me").map(|h| h.rvn.as_str()), Some("r1"));
    }
}
