//! The line of waiters: a ticket lock kept in the lock item (`next`, the last ticket handed out,
//! and `serving`, the lowest one not yet served or skipped), with one ticket item per waiter
//! that it keeps alive by rewriting its version every [`BEAT_EVERY`].
//!
//! - Joining bumps `next` (one write to the lock item, which returns the ticket) and writes the
//!   ticket item. Only the ticket at `serving` may claim, and its claim moves `serving` on in the
//!   same write: waiters are served strictly in ticket order, across modes.
//! - A waiter that gives up moves `serving` past itself if it is at the head, else marks its
//!   ticket `left`, so the waiters behind skip it at once. Whoever moves `serving` onto a ticket
//!   marked `left` (a leaver, or a claim in turn) moves it on past the run of them.
//! - A waiter that dies in line is skipped by the ones just behind the head once they have seen
//!   its ticket unchanged (or missing) for [`HEARTBEAT`] on their own clocks — the clock-free
//!   rule of [`super::sightings`] again. When a run of dead waiters is longer than the watchers,
//!   the waiters further back watch too, once they see a seat stand free that the head leaves.
//! - Readers that look only once (`status`, a `--no-wait` try) cannot watch for a while: they
//!   take a ticket whose writer's wall clock is more than [`HEARTBEAT`] + [`WALL_GRACE`] old as
//!   gone. A host whose clock is off by more than the grace may be shown wrongly or passed by a
//!   `--no-wait` try; no lease ever depends on it.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};

use super::expr::{Expr, Update};
use super::item::{self, LockItem, TicketItem};
use super::link::{Failure, Link, REQUEST_TIMEOUT, conditional};
use super::write;
use crate::backend::Mode;
use crate::backend::waiting::policy::HEARTBEAT;
use crate::name::LockName;

/// How often a waiter rewrites its ticket: well inside [`HEARTBEAT`].
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// How far another host's wall clock may be off before a look-once reader misjudges its waiter.
pub const WALL_GRACE: Duration = Duration::from_secs(2);
/// Ticket items per `BatchGetItem` (DynamoDB's limit).
const BATCH: usize = 100;
/// Tickets read at a time when moving the head past waiters that left.
const SKIP_BATCH: u64 = 16;
/// The most tickets a look-once reader reads.
pub const MAX_READ: u64 = 5_000;

/// What a waiter stores in its ticket item.
pub struct Place<'a> {
    pub name: &'a LockName,
    pub owner: &'a str,
    pub record: &'a str,
    pub mode: Mode,
    pub supersede: bool,
}

/// Reads `name`'s lock item (an empty one when it does not exist).
pub async fn lock_item(link: &Link, name: &LockName) -> Result<LockItem, Failure> {
    lock_item_through(link, &link.client, name).await
}

/// [`lock_item`] through `client` (the link's, or the one aside).
pub async fn lock_item_through(
    link: &Link,
    client: &aws_sdk_dynamodb::Client,
    name: &LockName,
) -> Result<LockItem, Failure> {
    let key = item::key_of(item::lock_key(name));
    let out = link
        .read(
            REQUEST_TIMEOUT,
            "dynamodb:GetItem",
            client
                .get_item()
                .table_name(&link.table)
                .set_key(Some(key))
                .consistent_read(true)
                .send(),
        )
        .await?;
    Ok(LockItem::parse(out.as_ref().and_then(|o| o.item())))
}

/// Takes a ticket at the end of the line and writes its item; returns the ticket and the lock
/// item as the join left it.
pub async fn join(link: &Link, place: &Place<'_>) -> Result<(u64, LockItem), Failure> {
    let mut u = Update::default();
    let next = u.expr.name(item::NEXT);
    let serving = u.expr.name(item::SERVING);
    let zero = u.expr.num(0);
    let one = u.expr.num(1);
    let name = u.expr.name(item::NAME);
    let name_value = u.expr.text(place.name.as_str());
    u.set(format!("{next} = if_not_exists({next}, {zero}) + {one}"));
    u.set(format!("{serving} = if_not_exists({serving}, {one})"));
    u.set(format!("{name} = {name_value}"));
    if place.supersede {
        let sup = u.expr.name(item::SUP);
        u.set(format!("{sup} = if_not_exists({next}, {zero}) + {one}"));
    }
    // Unconditional: it always answers with the item.
    let lock = write::update_lock(link, place.name, &u)
        .await?
        .ok_or(Failure::Condition)?;
    let ticket = lock.next;
    beat(link, place, ticket, &super::claim::new_rvn()).await?;
    Ok((ticket, lock))
}

/// Writes (or rewrites) the ticket item with version `rvn`; false when the ticket is no longer
/// this waiter's (it gave up, or another waiter holds that number).
pub async fn beat(link: &Link, place: &Place<'_>, ticket: u64, rvn: &str) -> Result<bool, Failure> {
    let mut expr = Expr::default();
    let key = expr.name(item::KEY);
    let mine = owned_by(&mut expr, place.owner);
    let left = expr.name(item::LEFT);
    let condition =
        format!("attribute_not_exists({key}) OR ({mine} AND attribute_not_exists({left}))");
    let fields = HashMap::from([
        (
            item::KEY.to_owned(),
            item::s(item::ticket_key(place.name, ticket)),
        ),
        (item::OWNER.to_owned(), item::s(place.owner)),
        (item::RVN.to_owned(), item::s(rvn)),
        (item::RECORD.to_owned(), item::s(place.record)),
        (item::MODE.to_owned(), item::s(item::mode_code(place.mode))),
        (
            item::SUPERSEDE.to_owned(),
            AttributeValue::Bool(place.supersede),
        ),
        (item::BEAT.to_owned(), item::n(item::wall_ms())),
    ]);
    let put = conditional(
        link.send(REQUEST_TIMEOUT, "dynamodb:PutItem", || {
            link.client
                .put_item()
                .table_name(&link.table)
                .set_item(Some(fields.clone()))
                .condition_expression(&condition)
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .send()
        })
        .await,
    )?;
    Ok(put.is_some())
}

/// Moves the head of the line from ticket `from` to `to`; false when the head was not `from`.
pub async fn advance(link: &Link, name: &LockName, from: u64, to: u64) -> Result<bool, Failure> {
    let mut u = Update::default();
    let serving = u.expr.name(item::SERVING);
    let was = u.expr.num(from);
    let now = u.expr.num(to);
    u.set(format!("{serving} = {now}"));
    u.condition(format!("{serving} = {was}"));
    write::update(link, item::lock_key(name), &u, REQUEST_TIMEOUT).await
}

/// Leaves the line: past itself at the head, else marked `left` for the waiters behind. A
/// waiter that marked its ticket while the head was reaching it finds itself at the head when it
/// tries again (every read and write here is strongly consistent: of a leaver marking its ticket
/// and a mover of the head reading it, one sees the other), so a ghost never holds the head.
pub async fn leave(link: &Link, name: &LockName, ticket: u64, owner: &str) -> Result<(), Failure> {
    let at_head = advance(link, name, ticket, ticket + 1).await? || {
        let mut u = Update::default();
        let left = u.expr.name(item::LEFT);
        let yes = u.expr.value(AttributeValue::Bool(true));
        let mine = owned_by(&mut u.expr, owner);
        u.set(format!("{left} = {yes}"));
        u.condition(mine);
        // A ticket no longer this waiter's is left as it is.
        write::update(link, item::ticket_key(name, ticket), &u, REQUEST_TIMEOUT).await?
            && advance(link, name, ticket, ticket + 1).await?
    };
    if at_head {
        forget(link, name, ticket, Some(owner)).await?;
        skip_left(link, name, ticket + 1).await?;
    }
    Ok(())
}

/// Moves the head of the line, just moved to `from`, past the tickets there whose waiters have
/// already left: they only marked their tickets, and the waiters far behind do not watch.
pub async fn skip_left(link: &Link, name: &LockName, mut from: u64) -> Result<(), Failure> {
    loop {
        let ahead = tickets(link, name, from..=from + SKIP_BATCH - 1).await?;
        let left = ahead
            .iter()
            .take_while(|(_, t)| t.as_ref().is_some_and(|t| t.left))
            .count() as u64;
        if left == 0 || !advance(link, name, from, from + left).await? {
            return Ok(());
        }
        crate::debug!("skipped {left} waiter(s) that left the line");
        for gone in from..from + left {
            let _ = forget(link, name, gone, None).await;
        }
        if left < SKIP_BATCH {
            return Ok(());
        }
        from += left;
    }
}

/// The condition that a ticket item is `owner`'s.
fn owned_by(expr: &mut Expr, owner: &str) -> String {
    let who = expr.name(item::OWNER);
    let me = expr.text(owner);
    format!("{who} = {me}")
}

/// Deletes a ticket item that is out of the line (only `owner`'s, when given).
pub async fn forget(
    link: &Link,
    name: &LockName,
    ticket: u64,
    owner: Option<&str>,
) -> Result<(), Failure> {
    let mut expr = Expr::default();
    let condition = owner.map(|owner| owned_by(&mut expr, owner));
    let key = item::key_of(item::ticket_key(name, ticket));
    conditional(
        link.send(REQUEST_TIMEOUT, "dynamodb:DeleteItem", || {
            link.client
                .delete_item()
                .table_name(&link.table)
                .set_key(Some(key.clone()))
                .set_condition_expression(condition.clone())
                .set_expression_attribute_names(expr.names())
                .set_expression_attribute_values(expr.values())
                .send()
        })
        .await,
    )?;
    Ok(())
}

/// The ticket items of `tickets`, in order; `None` for a ticket without an item.
pub async fn tickets(
    link: &Link,
    name: &LockName,
    tickets: std::ops::RangeInclusive<u64>,
) -> Result<Vec<(u64, Option<TicketItem>)>, Failure> {
    let numbers: Vec<u64> = tickets.collect();
    let mut found: HashMap<u64, TicketItem> = HashMap::new();
    for chunk in numbers.chunks(BATCH) {
        let mut keys: Vec<HashMap<String, AttributeValue>> = chunk
            .iter()
            .map(|&t| item::key_of(item::ticket_key(name, t)))
            .collect();
        while !keys.is_empty() {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(keys.clone()))
                .consistent_read(true)
                .build()
                .map_err(|e| Failure::Refused {
                    code: "invalid request".into(),
                    message: e.to_string(),
                })?;
            let out = link
                .read(
                    REQUEST_TIMEOUT,
                    "dynamodb:BatchGetItem",
                    link.client
                        .batch_get_item()
                        .request_items(&link.table, request)
                        .send(),
                )
                .await?;
            let Some(out) = out else {
                return Ok(numbers.iter().map(|&t| (t, None)).collect());
            };
            for fields in out
                .responses()
                .and_then(|r| r.get(&link.table))
                .into_iter()
                .flatten()
            {
                let number = fields
                    .get(item::KEY)
                    .and_then(|k| k.as_s().ok())
                    .and_then(|k| TicketItem::number_of(k));
                if let Some(number) = number {
                    found.insert(number, TicketItem::parse(fields));
                }
            }
            // Keys the service did not get to (throttling) are asked for again.
            keys = out
                .unprocessed_keys()
                .and_then(|u| u.get(&link.table))
                .map(|k| k.keys().to_vec())
                .unwrap_or_default();
            if !keys.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    Ok(numbers.into_iter().map(|t| (t, found.remove(&t))).collect())
}

/// The look-once judgement: whether a ticket's waiter seems to be still beating, by its wall
/// clock against ours (see the module's documentation).
pub fn beating(ticket: &TicketItem, now_ms: u64) -> bool {
    let horizon = u64::try_from((HEARTBEAT + WALL_GRACE).as_millis()).unwrap_or(u64::MAX);
    !ticket.left && now_ms.saturating_sub(ticket.beat_ms) < horizon
}

/// The live waiters of `lock`'s line, first to last, as a look-once reader sees them.
pub async fn live_waiters(
    link: &Link,
    name: &LockName,
    lock: &LockItem,
) -> Result<Vec<TicketItem>, Failure> {
    if lock.line_empty() {
        return Ok(Vec::new());
    }
    let first = lock.serving.max(1);
    let last = lock.next.min(first.saturating_add(MAX_READ - 1));
    let now = item::wall_ms();
    Ok(tickets(link, name, first..=last)
        .await?
        .into_iter()
        .filter_map(|(_, t)| t)
        .filter(|t| beating(t, now))
        .collect())
}
