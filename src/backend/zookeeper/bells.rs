//! What wakes a waiter: an exists watch on each znode that blocks it (ZooKeeper tells the watching
//! session once that znode changes or goes), and, for a `--supersede` waiter, a data watch on the
//! name's supersede record. Each watch is one request and one event, only for this waiter: a
//! release rings the bells of the waiters it may let in, and no others.

use tokio::task::JoinSet;
use zookeeper_client::{self as zk, WatchedEvent};

use super::link::{Link, REQUEST_TIMEOUT};
use super::paths::Contender;
use super::supersede::{self, Watched};
use crate::backend::HolderInfo;

/// What setting the watches found.
pub enum Rung {
    /// The watches are set; the set completes a task when one of them fires.
    Set(JoinSet<WatchedEvent>),
    /// A blocker was gone already (between the read of the line and its watch): look again.
    LookAgain,
    /// A newer `--supersede` waiter is recorded.
    Superseded(HolderInfo),
}

/// Watches `blockers` (children of `dir`), and the supersede record at `supersede.0` for a
/// waiter whose token is `supersede.1`.
pub async fn ring(
    link: &Link,
    session: &zk::Client,
    dir: &str,
    blockers: &[Contender],
    supersede: Option<(String, i64)>,
) -> Result<Rung, zk::Error> {
    let mut bells = JoinSet::new();
    for blocker in blockers {
        let path = format!("{dir}/{}", blocker.node);
        let watched = session.check_and_watch_stat(&path);
        match link.call(REQUEST_TIMEOUT, watched).await? {
            (Some(_), watcher) => {
                bells.spawn(watcher.changed());
            }
            (None, _) => return Ok(Rung::LookAgain),
        }
    }
    if let Some((path, own)) = supersede {
        match supersede::watch(link, session, &path, own).await? {
            Watched::Newer(newer) => return Ok(Rung::Superseded(newer)),
            Watched::Watching(watcher) => {
                bells.spawn(watcher.changed());
            }
            Watched::Nothing => {}
        }
    }
    Ok(Rung::Set(bells))
}
