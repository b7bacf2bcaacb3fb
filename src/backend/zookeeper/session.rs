//! The end of a session: closing it (ZooKeeper then deletes its znodes — the contender and its
//! slot — in one transaction and tells their watchers), and noticing that it ended.

use std::time::Duration;

use zookeeper_client as zk;

/// Closes `session` (every clone of it must be gone with it) and waits up to `limit` for the
/// ensemble to confirm; `false` when it did not in time (the session then expires by itself).
pub async fn close(session: zk::Client, limit: Duration) -> bool {
    let mut state = session.state_watcher();
    if state.state().is_terminated() {
        return true;
    }
    // Dropping the last client sends CloseSession; its answer ends the session's task.
    drop(session);
    let closed = async {
        loop {
            if state.changed().await.is_terminated() {
                return;
            }
        }
    };
    tokio::time::timeout(limit, closed).await.is_ok()
}

/// Resolves once `session` has ended for good (expired, closed, refused).
pub async fn ended(session: &zk::Client) {
    let mut state = session.state_watcher();
    loop {
        if state.state().is_terminated() {
            return;
        }
        state.changed().await;
    }
}
