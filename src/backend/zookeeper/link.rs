//! [`Link`]: sessions with the ensemble, a deadline on every request, the ACLs of what lockrun
//! creates, and the tree it creates them in.
//!
//! A session is the lease: each run opens its own, asking for its TTL as the session timeout, and
//! never replaces it while it holds (a session that expired is a lost lease; a new session would be
//! a new contender). The client library fails over between the members on its own, keeping the
//! session, at once when a member closes the connection (it died), and after a silence otherwise
//! (see [`silence`]: a member's share of the connect time with several, half the session timeout
//! with one): a brief silence is ridden through, and a member that stays silent is left — too
//! late for the lease only when the silence outlasts the time to the stop point (the supervisor
//! then stops the command early).
//! `status`, `list` and `release --force` use the run's session when there is one, else one of
//! their own, closed when they are done.
//!
//! With `USER:PASS`, every node lockrun creates gets an ACL that gives that identity every right
//! and everyone else reading (the nodes above `lockrun`, creating too, so that other identities can
//! keep trees of their own beside it). ZooKeeper checks a delete against the *parent's* ACL: since
//! the name's node carries the same ACL as its contenders, only that identity can remove a holder.
//!
//! Messages name the endpoints as `host:port` and never carry the password.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use zookeeper_client::{self as zk, Acl, Acls, AuthId, CreateMode, Permission};

use super::paths::Paths;
use super::session::close;
use super::settings::Settings;
use crate::backend::answer::{self, NoAnswer};
use crate::backend::{BackendError, Settings as _};
use crate::messages::{duration, fragment};
use crate::name::LockName;

/// Longest wait for an answer to a request that is not a renewal.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for a session to be established.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The shortest silence after which the client gives up on a member. A sub-second TTL would
/// otherwise have a connection given up after a quarter of a second of a loaded machine, although
/// the ensemble grants at least two ticks (a second with a 500 ms tick); the client lowers it to
/// two fifths of the granted session timeout when this is too long for it.
const MIN_SILENCE: Duration = Duration::from_millis(500);
/// How long a look at whether a member refuses connections may take.
const REFUSAL_LOOK: Duration = Duration::from_millis(200);
/// Pause between two tries to open a session.
const RECONNECT: Duration = Duration::from_millis(100);
/// How long an inspection waits for its own session to be closed.
const CLOSE_WAIT: Duration = Duration::from_millis(500);
/// The session timeout `status`, `list` and `release --force` ask for.
const INSPECT_SESSION: Duration = Duration::from_secs(10);

/// The ensemble, and the session that inspections share.
pub struct Link {
    /// `host:port,host:port`, as the client takes it and as messages show it.
    endpoints: String,
    digest: Option<String>,
    secrets: Vec<String>,
    pub paths: Paths,
    /// The ACL of the lock tree, and of the nodes above it.
    owned: Vec<Acl>,
    above: Vec<Acl>,
    /// The session `status` and friends use: the run's own while it has one.
    shared: Mutex<Option<zk::Client>>,
    /// How many members the URL names.
    members: usize,
}

impl Link {
    pub fn new(settings: &Settings) -> Self {
        let (owned, above) = match settings.digest() {
            Some(_) => (
                vec![
                    Acl::new(Permission::ALL, AuthId::authed()),
                    Acl::new(Permission::READ, AuthId::anyone()),
                ],
                vec![
                    Acl::new(Permission::ALL, AuthId::authed()),
                    Acl::new(Permission::READ | Permission::CREATE, AuthId::anyone()),
                ],
            ),
            None => {
                let open = vec![Acl::new(Permission::ALL, AuthId::anyone())];
                (open.clone(), open)
            }
        };
        Link {
            endpoints: settings.endpoints.join(","),
            digest: settings.digest(),
            secrets: settings.secrets().to_vec(),
            paths: Paths::new(&settings.chroot),
            owned,
            above,
            shared: Mutex::new(None),
            members: settings.endpoints.len(),
        }
    }

    /// The members, for messages.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// Opens a new session asking for `timeout` (the ensemble clamps it to 2–20 ticks). The
    /// client gives each handshake a fraction of the session timeout, which a loaded server can
    /// miss for a short lease, so tries are repeated until [`CONNECT_TIMEOUT`] has passed.
    pub async fn session(&self, timeout: Duration) -> Result<zk::Client, BackendError> {
        let unreachable = |reason: String| BackendError::Unreachable {
            endpoint: self.endpoints.clone(),
            reason,
        };
        let mut failure = None;
        let tries = async {
            loop {
                let mut connector = zk::Client::connector()
                    .with_session_timeout(timeout)
                    .with_connection_timeout(silence(timeout, self.members))
                    .with_fail_eagerly();
                if let Some(digest) = &self.digest {
                    connector = connector.with_auth("digest", digest.as_bytes());
                }
                failure = Some(match connector.connect(&self.endpoints).await {
                    Ok(client) => return Ok(client),
                    Err(zk::Error::NoHosts) => {
                        // Tries are repeated for a loaded member that missed a handshake; one
                        // that refuses connections is down, and that is known at once.
                        if let Some(refused) = self.all_refuse().await {
                            return Err(unreachable(refused));
                        }
                        "no member answered".to_owned()
                    }
                    Err(e) if session_gone(&e) => return Err(unreachable(self.reason(&e))),
                    Err(e) => self.reason(&e),
                });
                tokio::time::sleep(RECONNECT).await;
            }
        };
        // On lockrun's running time: a stop during a handshake is not a silent ensemble.
        match answer::within(CONNECT_TIMEOUT, tries).await {
            Ok(opened) => opened,
            Err(NoAnswer) => Err(unreachable(failure.unwrap_or_else(|| {
                format!("no session within {}", duration(CONNECT_TIMEOUT))
            }))),
        }
    }

    /// `Some(reason)` when every member refuses a TCP connection (nothing listens on its port).
    async fn all_refuse(&self) -> Option<String> {
        let mut reason = None;
        for member in self.endpoints.split(',') {
            match tokio::time::timeout(REFUSAL_LOOK, tokio::net::TcpStream::connect(member)).await {
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    reason = Some(crate::messages::io(&e));
                }
                _ => return None,
            }
        }
        reason
    }

    /// The session to read and break locks with: the run's own when it has one, else one opened
    /// for this inspection alone (and closed by [`Lent::done`]).
    pub async fn inspector(&self) -> Result<Lent, BackendError> {
        if let Some(client) = self.lock().as_ref()
            && !client.state().is_terminated()
        {
            return Ok(Lent {
                client: client.clone(),
                owned: false,
            });
        }
        Ok(Lent {
            client: self.session(INSPECT_SESSION).await?,
            owned: true,
        })
    }

    /// Lets inspections use `client` (the run's session).
    pub fn share(&self, client: &zk::Client) {
        *self.lock() = Some(client.clone());
    }

    /// Stops sharing `client`, so that dropping it closes the session.
    pub fn unshare(&self, client: &zk::Client) {
        let mut shared = self.lock();
        if shared
            .as_ref()
            .is_some_and(|s| s.session_id() == client.session_id())
        {
            *shared = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<zk::Client>> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `request`, given up after `limit` (as [`zk::Error::Timeout`]).
    pub async fn call<T>(
        &self,
        limit: Duration,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        answer::within(limit, request)
            .await
            .unwrap_or(Err(zk::Error::Timeout))
    }

    /// A failed request as a backend error naming the ensemble.
    pub fn failed(&self, e: &zk::Error) -> BackendError {
        BackendError::Failed {
            endpoint: self.endpoints.clone(),
            reason: self.reason(e),
        }
    }

    /// The error as a fragment, without the password, with a hint where one helps.
    pub fn reason(&self, e: &zk::Error) -> String {
        let text = match e {
            zk::Error::NoAuth => {
                "not allowed (the lock tree belongs to another ZooKeeper identity: check the user \
                 and password, or use a chroot of your own)"
                    .to_owned()
            }
            zk::Error::Timeout => "no answer in time".to_owned(),
            zk::Error::SessionExpired => "the session expired".to_owned(),
            other => other.to_string(),
        };
        fragment(&text, &self.secrets)
    }

    /// Options for a node of the lock tree.
    pub fn options(&self, mode: CreateMode) -> zk::CreateOptions<'_> {
        mode.with_acls(Acls::new(&self.owned))
    }

    /// Creates `name`'s node (a container) and whatever is missing above it.
    pub async fn make_dir(&self, client: &zk::Client, name: &LockName) -> Result<(), zk::Error> {
        let dir = self.paths.dir(name);
        let container = self.options(CreateMode::Container);
        match self.create(client, &dir, &container).await {
            Err(zk::Error::NoNode) => {}
            other => return other,
        }
        self.make_root(client).await?;
        self.create(client, &dir, &container).await
    }

    /// Creates the root of the lock tree, and the chroot above it, where missing.
    pub async fn make_root(&self, client: &zk::Client) -> Result<(), zk::Error> {
        let root = self.paths.root();
        for path in self.paths.ancestors() {
            let acls = if path == root {
                &self.owned
            } else {
                &self.above
            };
            let options = CreateMode::Persistent.with_acls(Acls::new(acls));
            match self.create(client, &path, &options).await {
                // Not allowed to create it, but someone has: go on.
                Err(zk::Error::NoAuth)
                    if self
                        .call(REQUEST_TIMEOUT, client.check_stat(&path))
                        .await?
                        .is_some() => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Creates a node, content when it already exists.
    async fn create(
        &self,
        client: &zk::Client,
        path: &str,
        options: &zk::CreateOptions<'_>,
    ) -> Result<(), zk::Error> {
        match self
            .call(REQUEST_TIMEOUT, client.create(path, &[], options))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A session lent to one inspection.
pub struct Lent {
    pub client: zk::Client,
    /// Opened for this inspection alone.
    owned: bool,
}

impl Lent {
    /// Ends the inspection: a session opened for it is closed, so that it does not linger on the
    /// ensemble until its timeout.
    pub async fn done(self) {
        if self.owned {
            close(self.client, CLOSE_WAIT).await;
        }
    }
}

/// The silence after which the client leaves a member for another, which is also how long it
/// gives a member to answer a new session: half the session timeout (at least [`MIN_SILENCE`]),
/// and, with several members, no more than their share of [`CONNECT_TIMEOUT`]. The client tries
/// the members in a random order, so a member that accepts connections but never answers (frozen,
/// or cut off behind a proxy) would otherwise use up the whole connect time when it came first,
/// and the run would fail although another member was up.
fn silence(session_timeout: Duration, members: usize) -> Duration {
    let half = (session_timeout / 2).max(MIN_SILENCE);
    match u32::try_from(members) {
        Ok(members) if members > 1 => half.min((CONNECT_TIMEOUT / members).max(MIN_SILENCE)),
        _ => half,
    }
}

/// Whether `e` means the session is gone for good (expired, closed, refused).
pub fn session_gone(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::AuthFailed
            | zk::Error::SessionMoved
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_members_share_the_connect_time_and_one_keeps_half_the_session() {
        let ten = Duration::from_secs(10);
        assert_eq!(silence(ten, 1), Duration::from_secs(5));
        assert_eq!(silence(ten, 2), Duration::from_millis(1500));
        assert_eq!(silence(ten, 3), Duration::from_secs(1));
        assert_eq!(silence(Duration::from_secs(1), 3), MIN_SILENCE);
        assert_eq!(silence(ten, 9), MIN_SILENCE);
    }
}
