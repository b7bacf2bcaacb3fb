//! [`Subscription`]: a waiter's doorbell on Redis — a pub/sub subscription to the name's release
//! channel, on a connection of its own. Releases and waiters leaving the line publish there.

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::PubSub;

use super::connect::Link;
use crate::backend::BackendError;
use crate::backend::waiting::line::Doorbell;

/// A subscription to one channel.
pub struct Subscription {
    pubsub: PubSub,
}

impl Subscription {
    /// Subscribes to `channel`; returns once the server confirmed the subscription.
    pub async fn open(link: &Link, channel: &str) -> Result<Self, BackendError> {
        Ok(Subscription {
            pubsub: link.subscribe(channel).await?,
        })
    }
}

#[async_trait]
impl Doorbell for Subscription {
    async fn rung(&mut self) -> bool {
        self.pubsub.on_message().next().await.is_some()
    }
}
