//! [`Watcher`]: one waiter's watch stream, on which it watches exactly the keys that can make it
//! a holder (for their deletion, with the deleted value), its own key (a deletion means its lease
//! is gone), and with `--supersede` the marker (for a newer waiter's put).
//!
//! Every watch starts at the current revision — etcd serves a watch that starts at a past
//! revision from a loop that runs every 100 ms, a delay every handoff would pay — and is known to
//! be in place only once etcd has answered that it created it; only then does the waiter read
//! what it watches, so no deletion can fall between the read and the watch. Creations are sent
//! together and confirmed in order (etcd answers a stream's requests in the order they came);
//! events that arrive meanwhile are kept for later.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};

use super::link::{Link, REQUEST_TIMEOUT};
use crate::backend::{BackendError, HolderInfo, answer};

/// What the watch stream reported.
#[derive(Debug)]
pub enum Event {
    /// A watched key was deleted; its last value, when etcd still had it.
    Deleted { key: Vec<u8>, last: Option<Vec<u8>> },
    /// A newer `--supersede` waiter joined: who it is.
    Superseded(HolderInfo),
    /// The stream ended or etcd cancelled a watch: watch and read again.
    Broken,
}

/// One waiter's watches.
pub struct Watcher {
    stream: WatchStream,
    link: Arc<Link>,
    /// The keys watched for deletion, and their watch ids.
    deletions: HashMap<Vec<u8>, i64>,
    /// Watches this side cancelled: etcd's answers about them are expected.
    cancelled: HashSet<i64>,
    /// The `--supersede` marker and the revision above which a put of it supersedes this waiter.
    marker: Option<(Vec<u8>, i64)>,
    pending: VecDeque<Event>,
}

/// What a failure to watch is described as.
const WHAT: &str = "watch the line";

fn deletions() -> WatchOptions {
    WatchOptions::new()
        .with_filters([WatchFilterType::NoPut])
        .with_prev_key()
}

impl Watcher {
    /// Opens a stream watching `key` for its deletion; returns once etcd created the watch.
    pub async fn open(link: &Arc<Link>, key: &[u8]) -> Result<Self, BackendError> {
        let key = key.to_vec();
        let (stream, id) = link
            .call(REQUEST_TIMEOUT, |mut client| {
                let key = key.clone();
                async move {
                    let mut stream = client.watch(key, Some(deletions())).await?;
                    match stream.message().await? {
                        Some(created) if created.created() && !created.canceled() => {
                            Ok((stream, created.watch_id()))
                        }
                        _ => Err(etcd_client::Error::WatchError("watch not created".into())),
                    }
                }
            })
            .await?;
        Ok(Watcher {
            stream,
            link: Arc::clone(link),
            deletions: HashMap::from([(key, id)]),
            cancelled: HashSet::new(),
            marker: None,
            pending: VecDeque::new(),
        })
    }

    /// Whether `key` is watched for its deletion.
    pub fn watches(&self, key: &[u8]) -> bool {
        self.deletions.contains_key(key)
    }

    /// The keys watched for their deletion.
    pub fn watched(&self) -> impl Iterator<Item = &[u8]> {
        self.deletions.keys().map(Vec::as_slice)
    }

    /// Watches each of `keys` for its deletion (those not watched yet); returns once etcd created
    /// every watch.
    pub async fn watch(&mut self, keys: &[Vec<u8>]) -> Result<(), BackendError> {
        let new: Vec<Vec<u8>> = keys
            .iter()
            .filter(|key| !self.deletions.contains_key(*key))
            .cloned()
            .collect();
        let ids = self
            .create(new.iter().map(|key| (key.clone(), deletions())).collect())
            .await?;
        self.deletions.extend(new.into_iter().zip(ids));
        Ok(())
    }

    /// Watches the `--supersede` marker `key` for puts above `revision`; returns once etcd
    /// created the watch.
    pub async fn watch_marker(&mut self, key: &[u8], revision: i64) -> Result<(), BackendError> {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoDelete]);
        self.create(vec![(key.to_vec(), options)]).await?;
        self.marker = Some((key.to_vec(), revision));
        Ok(())
    }

    /// Stops watching `key` (no answer awaited).
    pub async fn unwatch(&mut self, key: &[u8]) {
        if let Some(id) = self.deletions.remove(key) {
            self.cancelled.insert(id);
            if self.stream.cancel(id).await.is_err() {
                self.pending.push_back(Event::Broken);
            }
        }
    }

    /// The next event.
    pub async fn next(&mut self) -> Event {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return event;
            }
            match self.stream.message().await {
                Ok(Some(response)) => self.absorb(&response),
                Ok(None) | Err(_) => return Event::Broken,
            }
        }
    }

    /// Sends a creation for each of `watches` and waits until etcd confirmed them all; returns
    /// their ids, in order.
    async fn create(
        &mut self,
        watches: Vec<(Vec<u8>, WatchOptions)>,
    ) -> Result<Vec<i64>, BackendError> {
        let wanted = watches.len();
        for (key, options) in watches {
            self.stream
                .watch(key, Some(options))
                .await
                .map_err(|e| self.link.failed_with(WHAT, &e))?;
        }
        let mut ids = Vec::with_capacity(wanted);
        let confirmed = answer::within(REQUEST_TIMEOUT, async {
            while ids.len() < wanted {
                match self.stream.message().await {
                    Ok(Some(response)) if response.created() => {
                        if response.canceled() {
                            return Err(self.link.failed(WHAT, response.cancel_reason()));
                        }
                        ids.push(response.watch_id());
                    }
                    Ok(Some(response)) => self.absorb(&response),
                    Ok(None) => return Err(self.link.failed(WHAT, "the watch stream ended")),
                    Err(e) => return Err(self.link.failed_with(WHAT, &e)),
                }
            }
            Ok(())
        })
        .await;
        match confirmed {
            Ok(Ok(())) => Ok(ids),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.link.failed(WHAT, "no answer in time")),
        }
    }

    /// Turns a response into events.
    fn absorb(&mut self, response: &WatchResponse) {
        if response.canceled() {
            if !self.cancelled.remove(&response.watch_id()) {
                self.pending.push_back(Event::Broken);
            }
            return;
        }
        if response.compact_revision() != 0 {
            self.pending.push_back(Event::Broken);
            return;
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                // A deleted key never comes back (its name is its lease's id): its watch stays
                // idle until the stream closes.
                EventType::Delete if self.deletions.remove(kv.key()).is_some() => {
                    self.pending.push_back(Event::Deleted {
                        key: kv.key().to_vec(),
                        last: event.prev_kv().map(|prev| prev.value().to_vec()),
                    });
                }
                EventType::Put => {
                    if let Some((marker, revision)) = &self.marker
                        && kv.key() == marker.as_slice()
                        && kv.mod_revision() > *revision
                    {
                        let newer = HolderInfo::decode(kv.value());
                        self.pending.push_back(Event::Superseded(newer));
                    }
                }
                EventType::Delete => {}
            }
        }
    }
}
