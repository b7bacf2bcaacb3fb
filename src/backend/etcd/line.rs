//! The line of one name: joining it (one transaction that creates this run's holder key, attached to
//! its lease, and reads the line back), reading it again, and — once this run holds — claiming a
//! semaphore slot or stamping its record with the time it won.
//!
//! Joining is idempotent: the key is created only if it does not exist (`create_revision == 0`),
//! and both branches read the line, so a retry after a lost answer finds the key the first try made
//! rather than making a second one.
//!
//! Slots (`--limit` above 1) must be unique among holders and stable while held, which a position
//! in the line is not (it drops when someone ahead leaves). So a run that has become a holder claims
//! the lowest slot whose key does not exist, in a transaction that also checks its own holder key is
//! still there. Only holders claim slots and each holds at most one, and every holder ahead of this
//! run is one of the first `limit`, so while this run is among the first `limit` fewer than `limit`
//! slot keys belong to others: a free slot always exists (when every user passes the same limit).

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};

use super::keys::{Keys, Record, slot_of};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use crate::backend::BackendError;

/// Where this run stands in the line.
#[derive(Clone, Debug)]
pub struct Line {
    /// This run's key's create revision: its fencing token.
    pub token: i64,
    /// Keys ahead of this run, oldest first.
    pub ahead: Vec<Vec<u8>>,
    /// Slots taken, and the lease that holds each.
    pub slots: Vec<(u32, i64)>,
}

/// Creates this run's holder key (unless a lost-answer retry already did) and reads the line;
/// `None` if the key is not there (the lease is gone).
pub async fn join(
    link: &Link,
    keys: &Keys,
    lease: i64,
    record: &Record,
) -> Result<Option<Line>, Failure> {
    let key = keys.holder(lease);
    let reads = reads(keys);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then(
            [TxnOp::put(
                key.clone(),
                record.encode(),
                Some(PutOptions::new().with_lease(lease)),
            )]
            .into_iter()
            .chain(reads.clone())
            .collect::<Vec<_>>(),
        )
        .or_else(reads);
    let response = run(link, txn).await?;
    Ok(line_from(&response, key.as_bytes()))
}

/// Stamps this run's record with the time it won (a waiter's record says when it joined), if
/// its key is still the one it created.
pub async fn stamp(link: &Link, keys: &Keys, lease: i64, token: i64, record: &Record) {
    let key = keys.holder(lease);
    let record = Record {
        holder: record.holder.stamped(),
        ..record.clone()
    };
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            token,
        )])
        .and_then([TxnOp::put(
            key,
            record.encode(),
            Some(PutOptions::new().with_lease(lease)),
        )]);
    if let Err(e) = run(link, txn).await {
        crate::debug!(
            "cannot record when the lock was won: {}",
            BackendError::from(e)
        );
    }
}

/// Reads the line again; `None` if this run's key is gone.
pub async fn read(link: &Link, keys: &Keys, lease: i64) -> Result<Option<Line>, BackendError> {
    let key = keys.holder(lease);
    let response = run(link, Txn::new().and_then(reads(keys))).await?;
    Ok(line_from(&response, key.as_bytes()))
}

/// Records this run as a holder: claims a slot (below `limit`) and stamps the record with the time
/// it won. `None` if this run's key is gone.
pub async fn claim_slot(
    link: &Link,
    keys: &Keys,
    lease: i64,
    line: &Line,
    record: &Record,
    limit: u32,
) -> Result<Option<u32>, BackendError> {
    let key = keys.holder(lease);
    let still_mine = Compare::create_revision(key.clone(), CompareOp::Equal, line.token);
    let put = |slot: u32| {
        let record = Record {
            holder: record.holder.stamped(),
            slot: Some(slot),
            ..record.clone()
        };
        TxnOp::put(
            key.clone(),
            record.encode(),
            Some(PutOptions::new().with_lease(lease)),
        )
    };
    if limit <= 1 {
        let txn = Txn::new().when([still_mine]).and_then([put(0)]);
        return Ok(run(link, txn).await?.succeeded().then_some(0));
    }
    // `line` may be stale (a waiter's view of the slots is as old as its last read): a try that
    // fails, or finds no free slot, reads them afresh. Each failed fresh try means another holder
    // took a slot first, and there are fewer than `limit` others.
    let mut slots = line.slots.clone();
    let mut fresh = false;
    for _ in 0..=limit.saturating_mul(2) {
        if let Some((slot, _)) = slots.iter().find(|(_, owner)| *owner == lease) {
            return Ok(Some(*slot));
        }
        let Some(free) = (0..limit).find(|s| slots.iter().all(|(taken, _)| taken != s)) else {
            if fresh {
                return Err(BackendError::Failed {
                    endpoint: link.endpoints(),
                    reason: format!(
                        "no free slot among --limit {limit}: every user of the name must pass the same --limit"
                    ),
                });
            }
            match read(link, keys, lease).await? {
                Some(line) => (slots, fresh) = (line.slots, true),
                None => return Ok(None),
            }
            continue;
        };
        let slot_key = keys.slot(free);
        let txn = Txn::new()
            .when([
                still_mine.clone(),
                Compare::create_revision(slot_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([
                TxnOp::put(
                    slot_key,
                    format!("{:016x}", lease as u64),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                put(free),
            ])
            .or_else(reads(keys));
        let response = run(link, txn).await?;
        if response.succeeded() {
            return Ok(Some(free));
        }
        match line_from(&response, key.as_bytes()) {
            Some(line) => (slots, fresh) = (line.slots, true),
            None => return Ok(None),
        }
    }
    Err(BackendError::Failed {
        endpoint: link.endpoints(),
        reason: "cannot claim a semaphore slot: the slots keep changing".into(),
    })
}

/// The holder keys in line order and the slot keys, keys only.
fn reads(keys: &Keys) -> Vec<TxnOp> {
    vec![
        TxnOp::get(
            keys.holders(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_sort(SortTarget::Create, SortOrder::Ascend),
            ),
        ),
        TxnOp::get(
            keys.slots(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        ),
    ]
}

async fn run(link: &Link, txn: Txn) -> Result<TxnResponse, Failure> {
    link.call(REQUEST_TIMEOUT, |mut client| {
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
}

/// The line as the reads of `response` show it, from the point of view of `key`.
fn line_from(response: &TxnResponse, key: &[u8]) -> Option<Line> {
    let mut ranges = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
    let holders = ranges.next()?;
    let slots = ranges.next()?;
    let kvs: &[KeyValue] = holders.kvs();
    let position = kvs.iter().position(|kv| kv.key() == key)?;
    Some(Line {
        token: kvs[position].create_revision(),
        ahead: kvs[..position].iter().map(|kv| kv.key().to_vec()).collect(),
        slots: slots
            .kvs()
            .iter()
            .filter_map(|kv| Some((slot_of(kv.key())?, kv.lease())))
            .collect(),
    })
}
