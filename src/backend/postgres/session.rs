//! [`Session`]: one open connection — its client, the statements prepared on it, the task that
//! drives its socket, and the [`Inbox`] where that task files the notifications the connection receives, by channel, for
//! whoever subscribed (a waiter's doorbell, a holder's revocation listener). A lockrun has one
//! connection at a time, so `LISTEN` happens on the same connection as everything else and the
//! inbox fans its notifications out. When the connection ends, the inbox closes: every subscriber
//! learns that its channel went deaf and subscribes again, on the next connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The payload `release --force` sends a holder.
const REVOKED: &str = "revoked";

/// An open connection.
pub struct Session {
    pub client: Client,
    pub inbox: Arc<Inbox>,
    /// Statements prepared on this connection, by their SQL.
    prepared: Mutex<HashMap<String, Statement>>,
    /// Held by the request in flight where a pooler may sit between lockrun and the server, so
    /// that requests on this connection never overlap there (see `Link::turn`).
    pub turn: tokio::sync::Mutex<()>,
    driver: AbortHandle,
}

impl Session {
    /// Connects with `config` (over TLS when `tls` is given).
    pub async fn connect(
        config: &Config,
        tls: Option<&MakeRustlsConnect>,
    ) -> Result<Self, tokio_postgres::Error> {
        let inbox = Arc::new(Inbox::default());
        let (client, driver) = match tls {
            None => {
                let (client, connection) = config.connect(NoTls).await?;
                (client, drive(connection, Arc::clone(&inbox)))
            }
            Some(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                (client, drive(connection, Arc::clone(&inbox)))
            }
        };
        Ok(Session {
            client,
            inbox,
            prepared: Mutex::new(HashMap::new()),
            turn: tokio::sync::Mutex::new(()),
            driver,
        })
    }

    /// Runs `sql` as a statement prepared once on this connection (only where nothing sits
    /// between lockrun and the server: a transaction pooler would hand the next request to
    /// another server connection, which never saw the statement).
    pub async fn query_prepared(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let known = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sql)
            .cloned();
        let statement = match known {
            Some(statement) => statement,
            None => {
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let statement = self.client.prepare_typed(sql, &types).await?;
                self.prepared
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
        self.client.query(&statement, &values).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A healthy connection ends by itself once its client is gone; a silent one would linger.
        self.driver.abort();
    }
}

/// What one channel has heard since it was first subscribed on this connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// Every notification.
    pub notices: u64,
    /// Those that announced a forced release.
    pub revocations: u64,
}

/// Notifications received on one connection, by channel.
#[derive(Debug)]
pub struct Inbox {
    /// `None` once the connection ended.
    channels: Mutex<Option<HashMap<String, watch::Sender<Heard>>>>,
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox {
            channels: Mutex::new(Some(HashMap::new())),
        }
    }
}

impl Inbox {
    /// A receiver for `channel`'s notifications from now on; `None` when the connection has
    /// already ended. The receiver's `changed()` fails once the connection ends.
    pub fn subscribe(&self, channel: &str) -> Option<watch::Receiver<Heard>> {
        let mut channels = self.lock();
        let channels = channels.as_mut()?;
        let sender = channels
            .entry(channel.to_owned())
            .or_insert_with(|| watch::channel(Heard::default()).0);
        Some(sender.subscribe())
    }

    /// Files one notification.
    fn deliver(&self, channel: &str, payload: &str) {
        if let Some(sender) = self.lock().as_ref().and_then(|c| c.get(channel)) {
            sender.send_modify(|heard| {
                heard.notices += 1;
                if payload == REVOKED {
                    heard.revocations += 1;
                }
            });
        }
    }

    /// The connection ended: every receiver is told.
    fn close(&self) {
        self.lock().take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<String, watch::Sender<Heard>>>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes the inbox when the driving task ends, however it ends (aborted included).
struct CloseOnDrop(Arc<Inbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Polls `connection` on a task of its own, filing notifications in `inbox`.
fn drive<S, T>(mut connection: Connection<S, T>, inbox: Arc<Inbox>) -> AbortHandle
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let closing = CloseOnDrop(inbox);
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    closing.0.deliver(n.channel(), n.payload());
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notifications_reach_their_channel_and_a_closed_inbox_tells_everyone() {
        let inbox = Inbox::default();
        let mut mine = inbox.subscribe("lockrun_a").unwrap();
        let mut other = inbox.subscribe("lockrun_b").unwrap();
        inbox.deliver("lockrun_a", "turn");
        inbox.deliver("lockrun_a", REVOKED);
        inbox.deliver("lockrun_nobody", "turn");
        mine.changed().await.unwrap();
        assert_eq!(
            *mine.borrow_and_update(),
            Heard {
                notices: 2,
                revocations: 1
            }
        );
        assert!(!other.has_changed().unwrap());
        inbox.close();
        assert!(mine.changed().await.is_err());
        assert!(other.changed().await.is_err());
        assert!(inbox.subscribe("lockrun_a").is_none());
    }
}
