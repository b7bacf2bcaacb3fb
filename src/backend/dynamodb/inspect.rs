//! Reading and breaking DynamoDB leases from outside: `status` (the lock item, then the tickets in
//! line, `BatchGetItem` a hundred at a time), `list` (a paginated `Scan` of the lock items with a
//! holder — the table is never read into memory whole — then each name's status) and `release
//! --force` (one write that removes the holders it read, conditional on their owners).
//!
//! A look-once reader cannot watch a record for a lease, so what it shows of time is the holders'
//! and waiters' own wall clocks: `expires_in_ms` is the lease left counting from the holder's last
//! renewal by its clock (0 when that has run out: a waiter takes the seat over once it has seen it
//! unrenewed for a whole lease), and a waiter that has not beaten for a while is not shown.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::expr::{Expr, Update};
use super::item::{self, LockItem};
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use super::{interval, queue, write};
use crate::backend::inspect::held;
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, WaiterStatus,
};
use crate::name::LockName;

/// Items asked for per `Scan` page.
const SCAN_PAGE: i32 = 500;
/// How often a forced release reads again when holders changed under it.
const FORCE_TRIES: usize = 5;

#[async_trait]
impl Inspect for Link {
    /// Who holds `name`, and who waits, in line order.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        let lock = queue::lock_item(self, name)
            .await
            .map_err(|f| self.error(f))?;
        if !lock.exists {
            return Ok(LockStatus::free(name));
        }
        let now = item::wall_ms();
        let holders = lock
            .holders
            .iter()
            .map(|h| {
                let since = now.saturating_sub(h.beat_ms);
                let left = u64::try_from(h.ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .saturating_sub(since);
                HolderStatus::new(
                    HolderInfo::decode(h.record.as_bytes()),
                    h.token,
                    h.seat.slot(),
                    Duration::from_millis(left),
                )
            })
            .collect();
        let queue = queue::live_waiters(self, name, &lock)
            .await
            .map_err(|f| self.error(f))?
            .into_iter()
            .map(|t| WaiterStatus::new(HolderInfo::decode(t.record.as_bytes())))
            .collect();
        Ok(LockStatus::new(name, lock.limit, holders, queue))
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        let mut expr = Expr::default();
        let key = expr.name(item::KEY);
        let nx = expr.name(item::NX);
        let ns = expr.name(item::NS);
        let start = expr.text(format!("L#{prefix}"));
        let zero = expr.num(0);
        let filter = format!("begins_with({key}, {start}) AND ({nx} > {zero} OR {ns} > {zero})");
        let mut names = BTreeSet::new();
        let mut from: Option<std::collections::HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .read(
                    REQUEST_TIMEOUT,
                    "dynamodb:Scan",
                    self.client
                        .scan()
                        .table_name(&self.table)
                        .filter_expression(&filter)
                        .projection_expression(&key)
                        .set_expression_attribute_names(expr.names())
                        .set_expression_attribute_values(expr.values())
                        .set_exclusive_start_key(from.take())
                        .limit(SCAN_PAGE)
                        .send(),
                )
                .await
                .map_err(|f| self.error(f))?;
            let Some(page) = page else {
                return Ok(Vec::new());
            };
            names.extend(
                page.items()
                    .iter()
                    .filter_map(|i| i.get(item::KEY)?.as_s().ok())
                    .filter_map(|k| item::name_of(k)),
            );
            match page.last_evaluated_key() {
                Some(last) if !last.is_empty() => from = Some(last.clone()),
                _ => break,
            }
        }
        held(names, |name| async move { self.status(&name).await }).await
    }

    /// Drops every holder of `name`; the token counter is untouched. The holders find out at their
    /// next look at their seat (see the lease).
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        for _ in 0..FORCE_TRIES {
            let lock = queue::lock_item(self, name)
                .await
                .map_err(|f| self.error(f))?;
            if lock.holders.is_empty() {
                return Ok(0);
            }
            match drop_all(self, name, &lock).await {
                Ok(true) => return Ok(lock.holders.len()),
                Ok(false) => continue,
                Err(f) => return Err(self.error(f)),
            }
        }
        Err(self.failed(format!(
            "the holders of {name} kept changing; try release --force again"
        )))
    }

    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        interval::claim(self, name, interval).await
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        interval::ran_within(self, name, interval).await
    }

    async fn server_time(&self) -> Result<Option<SystemTime>, BackendError> {
        server_time(self).await.map(Some)
    }
}

/// Removes the holders `lock` lists, if they are still the ones listed; false otherwise.
async fn drop_all(link: &Link, name: &LockName, lock: &LockItem) -> Result<bool, Failure> {
    let mut u = Update::default();
    let (mut exclusive, mut shared) = (0u64, 0u64);
    for h in &lock.holders {
        u.require_owner(&h.seat, &h.owner);
        u.remove_seat(&h.seat);
        match h.seat.counter() {
            item::NX => exclusive += 1,
            _ => shared += 1,
        }
    }
    for (counter, dropped) in [(item::NX, exclusive), (item::NS, shared)] {
        if dropped > 0 {
            let attr = u.expr.name(counter);
            let by = u.expr.num(dropped);
            u.set(format!("{attr} = {attr} - {by}"));
        }
    }
    write::update(link, item::lock_key(name), &u, REQUEST_TIMEOUT).await
}

/// The server's wall clock, from a response's `Date` header (whole seconds: the middle of the
/// second it names, plus the time since), for the skew `lockrun drill` reports.
pub async fn server_time(link: &Link) -> Result<SystemTime, BackendError> {
    if link.server_now().is_none() {
        // Any answer carries the date; reading a key that is never written costs least.
        link.read(
            REQUEST_TIMEOUT,
            "dynamodb:GetItem",
            link.client
                .get_item()
                .table_name(&link.table)
                .set_key(Some(item::key_of("clock".into())))
                .send(),
        )
        .await
        .map_err(|f| link.error(f))?;
    }
    link.server_now()
        .map(|(earliest, _)| earliest + Duration::from_millis(500))
        .ok_or_else(|| link.failed("the server's answers carry no Date header".into()))
}
