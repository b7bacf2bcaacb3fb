//! [`Notifications`]: a waiter's doorbell on PostgreSQL — `LISTEN` on the name's channel, on a
//! connection of its own whose notifications a small task keeps flowing. Releases and waiters
//! leaving the line `NOTIFY` there, with the lock name as the payload.

use async_trait::async_trait;

use super::connect::Listener;
use crate::backend::waiting::line::Doorbell;

/// Notifications for one name.
pub struct Notifications {
    pub name: String,
    pub listener: Listener,
}

#[async_trait]
impl Doorbell for Notifications {
    async fn rung(&mut self) -> bool {
        loop {
            match self.listener.notified().await {
                // Another name whose channel hashes alike.
                Some(payload) if payload != self.name => continue,
                Some(_) => {
                    self.listener.drain();
                    return true;
                }
                None => return false,
            }
        }
    }
}
