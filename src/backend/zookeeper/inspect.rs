//! Reading and breaking locks from the outside: `status`, `list`, `release --force`, and the
//! ensemble's clock for `lockrun drill`; each (and the `--min-interval` claim of [`interval`]) on
//! a session lent to it.
//!
//! A name's line is read in two round trips whatever its length: its children, then every
//! contender's and slot's data and stat in one multi-read. A contender holds by the rule of
//! [`Line`], counting by the `--limit` its own record declares; the limit shown is the largest
//! any contender declared (1 for an empty line). ZooKeeper does not say how long ago a session was
//! last heard from, so the time a holder has left is shown as its session timeout: the most it can
//! have. A forced release deletes the holders' znodes (and their slots), which tells each at once
//! through its watch; waiters keep their places, and tokens (create zxids) never go back.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{self as zk, MultiReadResult, Stat};

use super::interval;
use super::line::Line;
use super::link::{Link, REQUEST_TIMEOUT};
use super::paths::{self, Contender, slot_of};
use super::record::{Record, Stored};
use crate::backend::answer;
use crate::backend::inspect::held;
use crate::backend::{
    BackendError, HolderInfo, HolderStatus, Inspect, IntervalClaim, LockStatus, MAX_LIMIT,
    WaiterStatus,
};
use crate::name::LockName;

/// One contender as read.
struct Read {
    contender: Contender,
    record: Option<Record>,
    stat: Stat,
}

/// A name's line as read, with the slots taken.
struct View {
    /// The contenders still there when their data was read, first in line first.
    read: Vec<Read>,
    /// Slot of each holder's znode name.
    slots: HashMap<String, u32>,
}

impl View {
    fn line(&self) -> Line {
        Line {
            contenders: self.read.iter().map(|r| r.contender.clone()).collect(),
        }
    }

    fn limit_of(read: &Read) -> u32 {
        read.record
            .as_ref()
            .map_or(1, |r| r.limit.clamp(1, MAX_LIMIT))
    }

    /// Which contenders hold.
    fn holding(&self) -> Vec<bool> {
        let line = self.line();
        self.read
            .iter()
            .enumerate()
            .map(|(at, read)| line.holds(at, Self::limit_of(read)))
            .collect()
    }

    fn status(self, name: &LockName) -> LockStatus {
        let holding = self.holding();
        let limit = self.read.iter().map(Self::limit_of).max().unwrap_or(1);
        let (mut holders, mut queue) = (Vec::new(), Vec::new());
        for (at, read) in self.read.into_iter().enumerate() {
            let (info, ttl) = match read.record {
                Some(record) => (record.holder, Duration::from_millis(record.ttl_ms)),
                None => (HolderInfo::unknown(), Duration::ZERO),
            };
            if !holding[at] {
                queue.push(WaiterStatus::new(info));
                continue;
            }
            // A holder claims a slot znode only with `--limit` above 1; without one (an
            // exclusive holder, every shared one) its command was given slot 0.
            let slot = self.slots.get(&read.contender.node).copied().unwrap_or(0);
            let token = u64::try_from(read.stat.czxid).unwrap_or(0);
            holders.push(HolderStatus::new(info, token, slot, ttl));
        }
        LockStatus::new(name, limit, holders, queue)
    }
}

#[async_trait]
impl Inspect for Link {
    /// Who holds `name` now, and who waits.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError> {
        lent(self, async |client| {
            Ok(view(self, client, name).await?.status(name))
        })
        .await
    }

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError> {
        lent(self, async |client| list_with(self, client, prefix).await).await
    }

    /// Deletes every holder's znode (and slot) of `name`; returns how many there were.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError> {
        lent(self, async |client| {
            force_release_with(self, client, name).await
        })
        .await
    }

    /// `--min-interval`, by the ensemble's clock (see [`interval`]).
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError> {
        lent(self, async |client| {
            interval::judge(self, client, name, interval, true).await
        })
        .await
    }

    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError> {
        let looked = lent(self, async |client| {
            interval::judge(self, client, name, interval, false).await
        })
        .await?;
        Ok(match looked {
            IntervalClaim::TooSoon { ago } => Some(ago),
            IntervalClaim::Claimed => None,
        })
    }

    /// The ensemble's clock: the modification time the leader gives a write to the root node.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        lent(self, async |client| server_time_with(self, client).await).await
    }
}

/// Runs `inspection` on a session lent to it: the run's own, or one opened for it alone and
/// closed as soon as it is over.
async fn lent<T>(
    link: &Link,
    inspection: impl AsyncFnOnce(&zk::Client) -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    let lent = link.inspector().await?;
    let result = inspection(&lent.client).await;
    lent.done().await;
    result
}

async fn list_with(
    link: &Link,
    client: &zk::Client,
    prefix: &str,
) -> Result<Vec<LockStatus>, BackendError> {
    let root = link.paths.root();
    let children = match link
        .call(REQUEST_TIMEOUT, client.list_children(&root))
        .await
    {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(link.failed(&e)),
    };
    let names: BTreeSet<LockName> = children
        .iter()
        .filter_map(|child| paths::decode(child))
        .filter(|name| name.as_str().starts_with(prefix))
        .collect();
    held(names, |name| async move {
        Ok(view(link, client, &name).await?.status(&name))
    })
    .await
}

async fn force_release_with(
    link: &Link,
    client: &zk::Client,
    name: &LockName,
) -> Result<usize, BackendError> {
    let view = view(link, client, name).await?;
    let holding = view.holding();
    let dir = link.paths.dir(name);
    let mut dropped = 0;
    for (read, _) in view.read.iter().zip(holding).filter(|(_, holds)| *holds) {
        let node = format!("{dir}/{}", read.contender.node);
        let slot = view
            .slots
            .get(&read.contender.node)
            .map(|slot| link.paths.slot(name, *slot));
        // The znode and its slot together, so no newcomer finds the slot still taken.
        let mut writer = client.new_multi_writer();
        let together = match &slot {
            Some(slot) => {
                let added = writer
                    .add_delete(slot, None)
                    .and(writer.add_delete(&node, None));
                match added {
                    Ok(()) => matches!(
                        answer::within(REQUEST_TIMEOUT, writer.commit()).await,
                        Ok(Ok(_))
                    ),
                    Err(_) => false,
                }
            }
            None => false,
        };
        if together {
            dropped += 1;
            continue;
        }
        match link.call(REQUEST_TIMEOUT, client.delete(&node, None)).await {
            Ok(()) => dropped += 1,
            // It left meanwhile.
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(link.failed(&e)),
        }
    }
    Ok(dropped)
}

async fn server_time_with(
    link: &Link,
    client: &zk::Client,
) -> Result<Option<std::time::SystemTime>, BackendError> {
    let root = link.paths.root();
    let mut touched = link
        .call(REQUEST_TIMEOUT, client.set_data(&root, &[], None))
        .await;
    if matches!(touched, Err(zk::Error::NoNode)) {
        link.make_root(client).await.map_err(|e| link.failed(&e))?;
        touched = link
            .call(REQUEST_TIMEOUT, client.set_data(&root, &[], None))
            .await;
    }
    match touched {
        Ok(stat) => Ok(Some(
            std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(stat.mtime).unwrap_or(0)),
        )),
        // Another identity's tree: no clock to read without writing to it.
        Err(zk::Error::NoAuth) => Ok(None),
        Err(e) => Err(link.failed(&e)),
    }
}

/// Reads `name`'s line: its children, then every contender's and slot's data in one multi-read.
async fn view(link: &Link, client: &zk::Client, name: &LockName) -> Result<View, BackendError> {
    let dir = link.paths.dir(name);
    let children = match link.call(REQUEST_TIMEOUT, client.list_children(&dir)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => return Err(link.failed(&e)),
    };
    let line = Line::of(&children);
    let slot_nodes: Vec<(u32, &String)> = children
        .iter()
        .filter_map(|c| slot_of(c).map(|slot| (slot, c)))
        .collect();
    if line.contenders.is_empty() {
        return Ok(View {
            read: Vec::new(),
            slots: HashMap::new(),
        });
    }
    let mut reader = client.new_multi_reader();
    let paths = line
        .contenders
        .iter()
        .map(|c| &c.node)
        .chain(slot_nodes.iter().map(|(_, node)| *node));
    for node in paths {
        reader
            .add_get_data(&format!("{dir}/{node}"))
            .map_err(|e| link.failed(&e))?;
    }
    let results = link
        .call(REQUEST_TIMEOUT, reader.commit())
        .await
        .map_err(|e| link.failed(&e))?;
    let mut results = results.into_iter();
    let mut read = Vec::new();
    for contender in line.contenders {
        // A contender gone between the two reads has left the line.
        if let Some(MultiReadResult::Data { data, stat }) = results.next() {
            read.push(Read {
                record: Record::decode(&data),
                contender,
                stat,
            });
        }
    }
    let mut slots = HashMap::new();
    for (slot, _) in slot_nodes {
        if let Some(MultiReadResult::Data { data, .. }) = results.next() {
            slots.insert(String::from_utf8_lossy(&data).into_owned(), slot);
        }
    }
    Ok(View { read, slots })
}
