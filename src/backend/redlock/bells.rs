//! [`Bells`]: one pub/sub channel subscribed on every master at once (the Redis backend's
//! [`Subscription`] per master, each in a task of its own), ringing when any master publishes on
//! it. A waiter's doorbell (its wake-up channel) and a holder's revocation channel are such bells:
//! a release or a `release --force` publishes on every master, and the first to arrive rings.
//!
//! Opening returns once a quorum of masters confirmed the subscription (or could not); a slow
//! master joins when it does, a master that is down is left out until the bells are opened again.
//! A subscription that breaks makes the bells report broken, so that the caller opens them anew.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::masters::Masters;
use crate::backend::BackendError;
use crate::backend::redis::doorbell::Subscription;
use crate::backend::waiting::line::Doorbell;

enum Event {
    /// A master confirmed the subscription.
    Ready,
    /// A master could not subscribe.
    Failed(BackendError),
    /// A message came.
    Rung,
    /// A subscription broke.
    Broken,
}

/// A channel subscribed on every master.
pub struct Bells {
    events: mpsc::UnboundedReceiver<Event>,
    tasks: Vec<JoinHandle<()>>,
    /// A message that came while the bells were being opened.
    rung_early: bool,
}

impl Bells {
    /// Subscribes to `channel` on every master; fails when none could.
    pub async fn open(masters: &Masters, channel: &str) -> Result<Self, BackendError> {
        let (tx, events) = mpsc::unbounded_channel();
        let tasks = masters
            .links()
            .iter()
            .map(|link| {
                let (link, channel, tx) = (link.clone(), channel.to_owned(), tx.clone());
                tokio::spawn(async move {
                    let mut subscription = match Subscription::open(&link, &channel).await {
                        Ok(subscription) => subscription,
                        Err(e) => return drop(tx.send(Event::Failed(e))),
                    };
                    if tx.send(Event::Ready).is_err() {
                        return;
                    }
                    while subscription.rung().await {
                        if tx.send(Event::Rung).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(Event::Broken);
                })
            })
            .collect();
        let mut bells = Bells {
            events,
            tasks,
            rung_early: false,
        };
        let (mut ready, mut failures) = (0, Vec::new());
        while ready < masters.quorum() && ready + failures.len() < masters.len() {
            match bells.events.recv().await {
                Some(Event::Ready) => ready += 1,
                Some(Event::Failed(e)) => failures.push((failures.len(), e)),
                Some(Event::Rung) => bells.rung_early = true,
                Some(Event::Broken) | None => break,
            }
        }
        if ready == 0 {
            return Err(masters.no_quorum(failures));
        }
        for (_, e) in &failures {
            crate::debug!("cannot subscribe on a master ({e})");
        }
        Ok(bells)
    }
}

#[async_trait]
impl Doorbell for Bells {
    async fn rung(&mut self) -> bool {
        if std::mem::take(&mut self.rung_early) {
            return true;
        }
        loop {
            match self.events.recv().await {
                Some(Event::Rung) => return true,
                Some(Event::Ready | Event::Failed(_)) => {}
                Some(Event::Broken) | None => return false,
            }
        }
    }
}

impl Drop for Bells {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
