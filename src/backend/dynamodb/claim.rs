//! Claims: the one conditional `UpdateItem` of the lock item that makes a contender a holder —
//! its seat, its token (the counter bumped in the same write), and, when it is a takeover, the
//! removal of holders that the contender watched stay unchanged for their whole lease (see
//! [`super::sightings`]), each conditional on the very version it watched.
//!
//! The rules are Redis's, as conditions: an exclusive contender takes a free slot (or a dead
//! holder's) when no shared holder remains; a shared one enters when no exclusive holder
//! remains; and only in turn — with its ticket at the head of the line, or with nobody in line.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::expr::Update;
use super::item::{self, Holder, LockItem, Seat};
use super::link::{Failure, Link};
use super::sightings::Sightings;
use super::write;
use crate::backend::Mode;
use crate::clock::BootInstant;
use crate::name::LockName;

/// Who claims, and for what.
pub struct Contender<'a> {
    pub name: &'a LockName,
    pub owner: &'a str,
    pub mode: Mode,
    pub limit: u32,
    pub ttl: Duration,
    /// The holder record, JSON.
    pub record: String,
}

/// Whose turn the claim relies on.
#[derive(Clone, Copy, Debug)]
pub enum Turn {
    /// This contender's ticket is at the head of the line (the claim moves the head on).
    Ticket(u64),
    /// Nobody stands in line.
    EmptyLine,
    /// The line is exactly as read (a try-once that judged every waiter in it gone).
    AsRead { serving: u64, next: u64 },
}

/// What one claim takes and removes.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seat: Seat,
    /// The version of the dead holder whose seat is taken over.
    pub takeover: Option<Holder>,
    /// Dead holders of the other mode, removed so that this one may enter.
    pub evict: Vec<Holder>,
}

/// The version a watcher keeps for a holder: its owner and its RVN.
pub fn version(holder: &Holder) -> String {
    format!("{}/{}", holder.owner, holder.rvn)
}

/// Whether `holder` has shown the same version for its whole lease, by this watcher's clock.
pub fn dead(holder: &Holder, seen: &Sightings<Seat>, now: BootInstant) -> bool {
    seen.gone(&holder.seat, &version(holder), holder.ttl, now)
}

/// The blind first try's plan: slot 0 or a shared hold, nothing taken over.
pub fn first(c: &Contender<'_>) -> Plan {
    Plan {
        seat: Seat::new(c.mode, 0, c.owner),
        takeover: None,
        evict: Vec::new(),
    }
}

/// What `c` may claim now, given the item and the watcher's sightings; `None` when it must wait.
pub fn plan(
    item: &LockItem,
    c: &Contender<'_>,
    seen: &Sightings<Seat>,
    now: BootInstant,
) -> Option<Plan> {
    let (others, same): (Vec<&Holder>, Vec<&Holder>) =
        item.holders.iter().partition(|h| h.seat.mode() != c.mode);
    if others.iter().any(|h| !dead(h, seen, now)) {
        return None;
    }
    let evict = others.into_iter().cloned().collect();
    match c.mode {
        Mode::Shared => Some(Plan {
            seat: Seat::Reader(c.owner.to_owned()),
            takeover: None,
            evict,
        }),
        Mode::Exclusive => {
            let in_slot = |k: u32| same.iter().find(|h| h.seat == Seat::Slot(k));
            if let Some(free) = (0..c.limit).find(|&k| in_slot(k).is_none()) {
                return Some(Plan {
                    seat: Seat::Slot(free),
                    takeover: None,
                    evict,
                });
            }
            let stale = (0..c.limit)
                .filter_map(in_slot)
                .find(|h| dead(h, seen, now))?;
            Some(Plan {
                seat: stale.seat.clone(),
                takeover: Some((*stale).clone()),
                evict,
            })
        }
    }
}

/// Sends the claim; the token when it was made, `None` when its conditions did not hold.
pub async fn claim(
    link: &Link,
    c: &Contender<'_>,
    plan: &Plan,
    turn: Turn,
) -> Result<Option<u64>, Failure> {
    let mut u = Update::default();
    let seat = u.expr.name(&plan.seat.attr());
    let seat_token = u.expr.name(&plan.seat.token_attr());
    let token = u.expr.name(item::TOKEN);
    let base = u.expr.num(first_token());
    let one = u.expr.num(1);
    let entry = u.expr.value(entry(c, &plan.seat));
    let bumped = format!("if_not_exists({token}, {base}) + {one}");
    u.set(format!("{seat} = {entry}"));
    u.set(format!("{seat_token} = {bumped}"));
    u.set(format!("{token} = {bumped}"));
    let limit = u.expr.name(item::LIMIT);
    let limit_value = u.expr.num(c.limit.max(1));
    u.set(format!("{limit} = {limit_value}"));
    let name = u.expr.name(item::NAME);
    let name_value = u.expr.text(c.name.as_str());
    u.set(format!("{name} = {name_value}"));

    match &plan.takeover {
        Some(dead) => {
            let rvn = u.expr.path(&plan.seat.attr(), item::RVN);
            let owner = u.expr.path(&plan.seat.attr(), item::OWNER);
            let was_rvn = u.expr.text(&dead.rvn);
            let was_owner = u.expr.text(&dead.owner);
            u.condition(format!("{rvn} = {was_rvn} AND {owner} = {was_owner}"));
        }
        None => u.condition(format!("attribute_not_exists({seat})")),
    }
    for gone in &plan.evict {
        let attr = gone.seat.attr();
        let rvn = u.expr.path(&attr, item::RVN);
        let was = u.expr.text(&gone.rvn);
        u.condition(format!("{rvn} = {was}"));
        u.remove_seat(&gone.seat);
    }
    // The holder counters: this seat's goes up (unless it replaces a dead holder), the other
    // mode's must hold only the evicted, and goes down by them.
    if plan.takeover.is_none() {
        let ours = u.expr.name(plan.seat.counter());
        let zero = u.expr.num(0);
        u.set(format!("{ours} = if_not_exists({ours}, {zero}) + {one}"));
    }
    let theirs = u.expr.name(match plan.seat.counter() {
        item::NX => item::NS,
        _ => item::NX,
    });
    match plan.evict.len() {
        0 => {
            let zero = u.expr.num(0);
            u.condition(format!(
                "attribute_not_exists({theirs}) OR {theirs} = {zero}"
            ));
        }
        n => {
            let count = u.expr.num(n);
            u.condition(format!("{theirs} = {count}"));
            u.set(format!("{theirs} = {theirs} - {count}"));
        }
    }
    let serving = u.expr.name(item::SERVING);
    match turn {
        Turn::Ticket(t) => {
            let mine = u.expr.num(t);
            let after = u.expr.num(t + 1);
            u.condition(format!("{serving} = {mine}"));
            u.set(format!("{serving} = {after}"));
        }
        Turn::EmptyLine => {
            let next = u.expr.name(item::NEXT);
            u.condition(format!(
                "attribute_not_exists({next}) OR {serving} > {next}"
            ));
        }
        Turn::AsRead {
            serving: s,
            next: n,
        } => {
            let next = u.expr.name(item::NEXT);
            let s = u.expr.num(s);
            let n = u.expr.num(n);
            u.condition(format!("{serving} = {s} AND {next} = {n}"));
        }
    }
    let Some(item) = write::update_lock(link, c.name, &u).await? else {
        return Ok(None);
    };
    let token = item
        .holders
        .iter()
        .find(|h| h.seat == plan.seat && h.owner == c.owner)
        .map(|h| h.token)
        .ok_or_else(|| Failure::Refused {
            code: "an unexpected answer".into(),
            message: "the claimed seat is not in the item".into(),
        })?;
    Ok(Some(token))
}

/// A holder's map as stored: owner, a fresh RVN, lease length, record, slot, mode, wall clock.
pub fn entry(c: &Contender<'_>, seat: &Seat) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        (item::OWNER.to_owned(), item::s(c.owner)),
        (item::RVN.to_owned(), item::s(new_rvn())),
        (item::TTL.to_owned(), item::n(c.ttl.as_millis().max(1))),
        (item::RECORD.to_owned(), item::s(&c.record)),
        (item::SLOT.to_owned(), item::n(seat.slot())),
        (item::MODE.to_owned(), item::s(item::mode_code(c.mode))),
        (item::BEAT.to_owned(), item::n(item::wall_ms())),
    ]))
}

/// A fresh record version number: random, so that no version ever comes back.
pub fn new_rvn() -> String {
    crate::backend::waiting::policy::random_bytes::<8>()
        .map(|bytes| bytes.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_else(|_| format!("{:x}", BootInstant::now().since_boot().as_nanos()))
}

/// Where a name's counter starts: this host's clock in microseconds (see [`super::item`]).
fn first_token() -> u64 {
    item::wall_ms().saturating_mul(1000)
}
