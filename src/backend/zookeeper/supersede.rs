//! `--supersede` on ZooKeeper: each name's newest `--supersede` waiter is recorded in one
//! persistent znode (`/lockrun/<name>/supersede`: its token and record). A `--supersede` waiter
//! that joins writes itself there, unless a newer one already has (a conditional write, retried on
//! a race); every older `--supersede` waiter keeps a data watch on that znode, so it is woken by
//! the write at once, reads that it was superseded (and by whom), and gives up. The holder is never
//! touched: only waiters watch.

use zookeeper_client::{self as zk, CreateMode, OneshotWatcher};

use super::link::{Link, REQUEST_TIMEOUT};
use super::paths::SUPERSEDE;
use super::record::{Newest, Stored};
use crate::backend::{BackendError, HolderInfo};
use crate::name::LockName;

/// How many races with other writers a publication may lose before giving up.
const TRIES: u32 = 10;

/// Records `newest` as NAME's newest `--supersede` waiter, unless a newer one is recorded.
pub async fn publish(
    link: &Link,
    session: &zk::Client,
    name: &LockName,
    newest: &Newest,
) -> Result<(), BackendError> {
    let path = link.paths.child(name, SUPERSEDE);
    let data = newest.encode();
    let options = link.options(CreateMode::Persistent);
    for _ in 0..TRIES {
        let written = match link.call(REQUEST_TIMEOUT, session.get_data(&path)).await {
            Ok((stored, stat)) => {
                if Newest::decode(&stored).is_some_and(|n| n.token >= newest.token) {
                    return Ok(());
                }
                link.call(
                    REQUEST_TIMEOUT,
                    session.set_data(&path, &data, Some(stat.version)),
                )
                .await
                .map(drop)
            }
            Err(zk::Error::NoNode) => link
                .call(REQUEST_TIMEOUT, session.create(&path, &data, &options))
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => return Ok(()),
            // Another waiter wrote first: look again.
            Err(zk::Error::BadVersion | zk::Error::NodeExists) => {}
            Err(e) => return Err(link.failed(&e)),
        }
    }
    Err(BackendError::Failed {
        endpoint: link.endpoints().to_owned(),
        reason: "too many --supersede waiters joined at once".into(),
    })
}

/// What a waiter found when it set its watch on the record.
pub enum Watched {
    /// A newer `--supersede` waiter is recorded.
    Newer(HolderInfo),
    /// Nothing newer; woken when the record changes.
    Watching(OneshotWatcher),
    /// No record at all.
    Nothing,
}

/// Reads the record at `path` and watches it, for a waiter whose token is `own`.
pub async fn watch(
    link: &Link,
    session: &zk::Client,
    path: &str,
    own: i64,
) -> Result<Watched, zk::Error> {
    match link
        .call(REQUEST_TIMEOUT, session.get_and_watch_data(path))
        .await
    {
        Ok((data, _, watcher)) => Ok(match newer_than(&data, own) {
            Some(newer) => Watched::Newer(newer),
            None => Watched::Watching(watcher),
        }),
        Err(zk::Error::NoNode) => Ok(Watched::Nothing),
        Err(e) => Err(e),
    }
}

/// The newer `--supersede` waiter recorded at `path`, if any, for a waiter whose token is `own`.
pub async fn newer(
    link: &Link,
    session: &zk::Client,
    path: &str,
    own: i64,
) -> Result<Option<HolderInfo>, zk::Error> {
    match link.call(REQUEST_TIMEOUT, session.get_data(path)).await {
        Ok((data, _)) => Ok(newer_than(&data, own)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

fn newer_than(data: &[u8], own: i64) -> Option<HolderInfo> {
    Newest::decode(data)
        .filter(|n| n.token > own)
        .map(|n| n.holder)
}
