//! The requests on one name's line: joining it (one transaction that creates this run's holder
//! key, attached to its lease, and reads the nearest keys ahead), reading the keys ahead again,
//! reading single keys, rewriting this run's record (its hints, the time it won), and — once it
//! holds with `--limit` above 1 — claiming a semaphore slot.
//!
//! Joining is idempotent: the key is created only if it does not exist (`create_revision == 0`), so
//! a retry after a lost answer finds the key the first try made rather than making a second one.
//! A join reads only the keys nearest ahead (sorted by create revision, newest first): the join's
//! own key is the newest, so no revision needs to be known beforehand. With `--supersede` the same
//! transaction writes the marker, whose mod revision is then this key's create revision.
//!
//! Slots (`--limit` above 1) must be unique among holders and stable while held, which a position
//! in the line is not (it drops when someone ahead leaves). So a run that has become a holder claims
//! the lowest slot whose key does not exist, in a transaction that also checks its own holder key is
//! still there. Only holders claim slots and each holds at most one, and every holder ahead of this
//! run is one of the first `limit`, so while this run is among the first `limit` fewer than `limit`
//! slot keys belong to others: a free slot always exists (when every user passes the same limit).

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};

use super::keys::{Keys, slot_of};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use super::plan::Ahead;
use super::record::{Hints, Record};
use crate::backend::waiting::policy::random_bytes;
use crate::backend::{BackendError, HolderInfo, Mode};

/// How many keys ahead a shared contender's join reads (it looks for the last exclusive one).
const SHARED_JOIN_DEPTH: usize = 64;

/// What joining found.
#[derive(Debug)]
pub struct Joined {
    /// This run's key's create revision: its fencing token and place in line.
    pub token: i64,
    /// The nearest keys ahead (nearest first), and whether more lie beyond them; `None` when
    /// the key existed already (a retry) and the line must be read afresh.
    pub ahead: Option<(Vec<Ahead>, bool)>,
    /// How many keys are ahead.
    pub waiting: u64,
    /// Slots taken, and the lease that holds each (read only with `--limit` above 1).
    pub slots: Vec<(u32, i64)>,
}

/// Creates this run's holder key (unless a lost-answer retry already did) and reads the keys
/// nearest ahead (`depth` of them, all for `None`); `Ok(None)` if the key is not there (the lease
/// is gone). With `supersede`, also writes the `--supersede` marker.
pub async fn join(
    link: &Link,
    keys: &Keys,
    lease: i64,
    record: &Record,
    depth: Option<usize>,
    supersede: bool,
) -> Result<Option<Joined>, Failure> {
    let key = keys.holder(lease);
    let depth = depth.unwrap_or(SHARED_JOIN_DEPTH);
    let mut then = vec![TxnOp::put(
        key.clone(),
        record.encode(),
        Some(PutOptions::new().with_lease(lease)),
    )];
    if supersede {
        then.push(TxnOp::put(keys.supersede(), record.holder.encode(), None));
    }
    then.push(TxnOp::get(
        keys.holders(),
        Some(newest_first().with_limit(i64::try_from(depth.saturating_add(1)).unwrap_or(i64::MAX))),
    ));
    then.push(TxnOp::get(
        keys.holders(),
        Some(GetOptions::new().with_prefix().with_count_only()),
    ));
    if record.limit > 1 {
        then.push(slots_read(keys));
    }
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then(then)
        .or_else([TxnOp::get(key.clone(), None)]);
    let response = run(link, txn).await?;
    let mut gets = gets(&response);
    if !response.succeeded() {
        let Some(mine) = gets.next().and_then(|g| g.kvs().first().cloned()) else {
            return Ok(None);
        };
        return Ok(Some(Joined {
            token: mine.create_revision(),
            ahead: None,
            waiting: 0,
            slots: Vec::new(),
        }));
    }
    let (Some(line), Some(count)) = (gets.next(), gets.next()) else {
        return Ok(None);
    };
    let Some((mine, rest)) = line.kvs().split_first() else {
        return Ok(None);
    };
    if mine.key() != key.as_bytes() {
        return Ok(None);
    }
    Ok(Some(Joined {
        token: mine.create_revision(),
        ahead: Some((
            rest.iter().map(|kv| ahead_of(keys, kv)).collect(),
            line.more(),
        )),
        waiting: u64::try_from(count.count()).unwrap_or(1).saturating_sub(1),
        slots: gets.next().as_ref().map(slots_of).unwrap_or_default(),
    }))
}

/// The keys ahead of the key whose create revision is `token`, nearest first: `depth` of them
/// (all for `None`), and whether more lie beyond.
pub async fn look(
    link: &Link,
    keys: &Keys,
    token: i64,
    depth: Option<usize>,
) -> Result<(Vec<Ahead>, bool), BackendError> {
    let mut options = newest_first().with_max_create_revision(token - 1);
    if let Some(depth) = depth {
        options = options.with_limit(i64::try_from(depth).unwrap_or(i64::MAX));
    }
    let prefix = keys.holders();
    let found = link
        .call(REQUEST_TIMEOUT, |mut client| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { client.get(prefix, Some(options)).await }
        })
        .await?;
    Ok((
        found.kvs().iter().map(|kv| ahead_of(keys, kv)).collect(),
        found.more(),
    ))
}

/// Reads each of `wanted` (whole keys) in one consistent view; `None` for a key that does not exist.
pub async fn read(link: &Link, wanted: &[String]) -> Result<Vec<Option<KeyValue>>, BackendError> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let txn = Txn::new().and_then(
        wanted
            .iter()
            .map(|key| TxnOp::get(key.clone(), None))
            .collect::<Vec<_>>(),
    );
    let response = run(link, txn).await?;
    let mut gets = gets(&response);
    Ok(wanted
        .iter()
        .map(|_| gets.next().and_then(|g| g.kvs().first().cloned()))
        .collect())
}

/// Rewrites this run's record, if its key is still the one it created (`token`); `false` when it
/// is gone.
pub async fn note(
    link: &Link,
    keys: &Keys,
    lease: i64,
    token: i64,
    record: &Record,
) -> Result<bool, BackendError> {
    let key = keys.holder(lease);
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
    Ok(run(link, txn).await?.succeeded())
}

/// Records this run as a holder: claims a slot (below `limit`) and writes `record` with it. `None`
/// if this run's key is gone. `slots` is what an earlier read saw; `ahead` is how many keys were
/// ahead of this run's when it joined.
///
/// Holders that start together would all try the lowest free slot, and each round only one of
/// them wins: hundreds of them took seconds, long enough for leases to lapse. So the first try
/// takes the free slot at this run's place among those still racing for one (`ahead`, less the
/// slots already taken: it differs between runs that joined together), and a try after a lost
/// race a random free one. Holders that come one at a time still take the lowest free slot.
#[allow(clippy::too_many_arguments)]
pub async fn claim_slot(
    link: &Link,
    keys: &Keys,
    lease: i64,
    token: i64,
    slots: &[(u32, i64)],
    record: &Record,
    limit: u32,
    ahead: u64,
) -> Result<Option<u32>, BackendError> {
    let key = keys.holder(lease);
    let still_mine = Compare::create_revision(key.clone(), CompareOp::Equal, token);
    let put = |slot: u32| {
        let mut record = record.clone();
        record.slot = Some(slot);
        TxnOp::put(
            key.clone(),
            record.encode(),
            Some(PutOptions::new().with_lease(lease)),
        )
    };
    // `slots` may be stale (a waiter's view of them is as old as its join): a try that fails, or
    // finds no free slot, reads them afresh. Each failed fresh try means another holder took a
    // slot first, and there are fewer than `limit` others.
    let mut slots = slots.to_vec();
    let mut fresh = false;
    // Keys ahead that already hold a slot are not in the race for the free ones.
    let mut pick = ahead.saturating_sub(u64::try_from(slots.len()).unwrap_or(0));
    for _ in 0..=limit.saturating_mul(2) {
        if let Some((slot, _)) = slots.iter().find(|(_, owner)| *owner == lease) {
            return Ok(Some(*slot));
        }
        let free_slots = || (0..limit).filter(|s| slots.iter().all(|(taken, _)| taken != s));
        let free_count = u64::try_from(free_slots().count()).unwrap_or(u64::MAX);
        let chosen = match free_count {
            0 => None,
            n => free_slots().nth(usize::try_from(pick % n).unwrap_or(0)),
        };
        pick = u64::from_le_bytes(random_bytes::<8>()?);
        let Some(free) = chosen else {
            if fresh {
                return Err(BackendError::Failed {
                    endpoint: link.endpoints(),
                    reason: format!(
                        "no free slot among --limit {limit}: every user of the name must pass the same --limit"
                    ),
                });
            }
            let txn = Txn::new()
                .when([still_mine.clone()])
                .and_then([slots_read(keys)]);
            let response = run(link, txn).await?;
            if !response.succeeded() {
                return Ok(None);
            }
            slots = gets(&response)
                .next()
                .as_ref()
                .map(slots_of)
                .unwrap_or_default();
            fresh = true;
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
            .or_else([TxnOp::get(key.clone(), None), slots_read(keys)]);
        let response = run(link, txn).await?;
        if response.succeeded() {
            return Ok(Some(free));
        }
        let mut found = gets(&response);
        let mine = found.next();
        let mine = mine.as_ref().and_then(|g| g.kvs().first());
        if mine.is_none_or(|kv| kv.create_revision() != token) {
            return Ok(None);
        }
        slots = found.next().as_ref().map(slots_of).unwrap_or_default();
        fresh = true;
    }
    Err(BackendError::Failed {
        endpoint: link.endpoints(),
        reason: "cannot claim a semaphore slot: the slots keep changing".into(),
    })
}

/// A key ahead, from its stored value (a value lockrun did not write counts as exclusive, with
/// nothing known of what is ahead of it).
pub fn ahead_of(keys: &Keys, kv: &KeyValue) -> Ahead {
    let record = Record::decode(kv.value());
    Ahead {
        id: keys.id_of(kv.key()).unwrap_or_default().to_owned(),
        mode: record.as_ref().map_or(Mode::Exclusive, |r| r.holder.mode),
        hints: record.as_ref().map_or_else(Hints::default, Record::hints),
    }
}

/// The `--supersede` marker as read: its mod revision and the record of who wrote it.
pub fn marker_of(kv: &KeyValue) -> (i64, HolderInfo) {
    (kv.mod_revision(), HolderInfo::decode(kv.value()))
}

/// The holder keys, newest first.
fn newest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
}

/// The slot keys, keys only.
fn slots_read(keys: &Keys) -> TxnOp {
    TxnOp::get(
        keys.slots(),
        Some(GetOptions::new().with_prefix().with_keys_only()),
    )
}

fn slots_of(get: &GetResponse) -> Vec<(u32, i64)> {
    get.kvs()
        .iter()
        .filter_map(|kv| Some((slot_of(kv.key())?, kv.lease())))
        .collect()
}

async fn run(link: &Link, txn: Txn) -> Result<TxnResponse, Failure> {
    link.call(REQUEST_TIMEOUT, |mut client| {
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
}

/// The range reads of a transaction's answer, in order.
fn gets(response: &TxnResponse) -> std::vec::IntoIter<GetResponse> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect::<Vec<_>>()
        .into_iter()
}
