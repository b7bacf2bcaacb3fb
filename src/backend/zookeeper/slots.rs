//! Semaphore slots (`--limit` above 1): a holder claims the first free `slot-K` znode among
//! `0..limit` with an ephemeral create holding its own znode's name, so the slot goes with its
//! session, and two holders can never claim the same one (the create fails for the second).
//! Since nobody holds more than one slot and at most `limit` contenders hold, a free slot exists
//! once a departed holder's slot is gone (the holder's release deletes both in one transaction).

use zookeeper_client::{self as zk, CreateMode};

use super::link::{Link, REQUEST_TIMEOUT};
use super::paths::slot_of;
use crate::backend::BackendError;
use crate::name::LockName;

/// How many times the slots are looked through when every slot seemed taken.
const TRIES: u32 = 5;

/// Claims a free slot of `name` for the contender whose znode is `own`; `children` are the name's
/// children as last read.
pub async fn claim(
    link: &Link,
    session: &zk::Client,
    name: &LockName,
    own: &str,
    children: &[String],
    limit: u32,
) -> Result<u32, BackendError> {
    let options = link.options(CreateMode::Ephemeral);
    let mut taken: Vec<u32> = children.iter().filter_map(|c| slot_of(c)).collect();
    for _ in 0..TRIES {
        let free: Vec<u32> = (0..limit).filter(|s| !taken.contains(s)).collect();
        for slot in free {
            let path = link.paths.slot(name, slot);
            let created = session.create(&path, own.as_bytes(), &options);
            match link.call(REQUEST_TIMEOUT, created).await {
                Ok(_) => return Ok(slot),
                Err(zk::Error::NodeExists) => {
                    // Ours, if a create whose answer was lost made it.
                    let data = link.call(REQUEST_TIMEOUT, session.get_data(&path)).await;
                    if data.is_ok_and(|(data, _)| data == own.as_bytes()) {
                        return Ok(slot);
                    }
                    taken.push(slot);
                }
                Err(e) => return Err(link.failed(&e)),
            }
        }
        // A holder that left may still have had its slot when the children were read.
        let dir = link.paths.dir(name);
        let children = link
            .call(REQUEST_TIMEOUT, session.list_children(&dir))
            .await
            .map_err(|e| link.failed(&e))?;
        taken = children.iter().filter_map(|c| slot_of(c)).collect();
    }
    Err(BackendError::Failed {
        endpoint: link.endpoints().to_owned(),
        reason: format!(
            "no free slot among {limit} for {name}: do all its users pass the same --limit?"
        ),
    })
}
