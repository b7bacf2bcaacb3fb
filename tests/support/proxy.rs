//! A fault proxy between lockrun and a server (`127.0.0.1` only), built on std threads. Every fault
//! can be switched on and off while connections are open:
//!
//! - **delay** ([`Proxy::delay`], [`Proxy::set_delay`]), per direction: every chunk read is
//!   forwarded `D` after it was read. Order is kept: a chunk never overtakes an earlier one, so
//!   lowering the delay lets the queue drain in order. [`Proxy::wait_drained`] waits until every
//!   delayed chunk has gone out (even after the sender closed: a late request still arrives).
//! - **blackhole** ([`Proxy::blackhole`], [`Proxy::set_blackhole`]), per direction: the proxy
//!   stops reading, closes nothing and loses nothing, as a partition that drops packets would (TCP
//!   delivers what was sent if it heals). A connection accepted while the way to the server is
//!   blackholed never reaches the server: it stays open and silent, and what the client sends on
//!   it goes nowhere.
//! - **reset** ([`Proxy::reset`]): every open connection is closed with RST on both sides
//!   (`SO_LINGER` 0, then closed), and while it is on, every new connection is reset as soon as it
//!   is accepted.
//! - **lost reply** ([`Proxy::lose_reply_to`], [`Proxy::lose_next_reply`]): armed with a byte
//!   pattern, it waits for the first client→server chunk that contains it (on any connection,
//!   matched across chunk boundaries), forwards that request as usual, and from then on swallows
//!   everything the server sends on *that* connection; the client→server direction keeps flowing.
//!   TCP never loses bytes in the middle of a live stream, so a lost reply is, in reality, a
//!   connection that dies after delivering the request: the server applied it, the client hears
//!   nothing and must give up on the connection by its own deadline. This works the same for RESP,
//!   the PostgreSQL protocol and HTTP/2 (for gRPC the whole connection goes deaf, which is what a
//!   lost ack looks like to a client); any later request on the same connection is applied and
//!   unanswered too. The trigger fires once; other connections are untouched.
//!   [`Proxy::observe`] is the same matcher without the fault: it tells when a request passed.
//! - **held request** ([`Proxy::hold_request`]): the first client→server chunk that contains a
//!   pattern is split where the pattern starts; what comes before goes on at once, the rest (and
//!   everything after it on that connection) `D` later: one request that reaches the server late,
//!   such as a release that lands after its lease expired, or a request that must be applied after
//!   the ones sent just before it.
//! - **answered request** ([`Proxy::answer_instead`]): the next requests that contain a pattern
//!   never reach the server; the proxy answers each itself with given bytes (an HTTP error such
//!   as DynamoDB's `ThrottlingException`) and closes that connection, as a server that refuses
//!   the request and hangs up would. Each armed answer serves one request.
//!
//! [`Proxy::heal`] switches every fault off (deaf connections stay deaf: their clients drop them).
//!
//! The proxy also tells what went through it: how many connections it accepted
//! ([`Proxy::accepted`]), and [`Proxy::confirmed`], the moment it read the latest request that a
//! reply then followed on the same connection. A client's lease is confirmed by a request it sent
//! no later than that moment, so tests bound a holder's stop point from there: it is the last
//! confirmed renewal as the server side saw it, whatever the protocol.
//! Threads stop, and connections close, when the proxy is dropped.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(20);
/// How much of a direction's past bytes is kept to match a pattern split across chunks.
const TAIL: usize = 1024;

/// One direction of a proxied connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Requests: client to server.
    ToServer,
    /// Replies: server to client.
    ToClient,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }
    }
}

/// A running proxy to `127.0.0.1:upstream` (or to several servers, one port each, that every
/// fault hits at once: [`Proxy::start_each`]).
pub struct Proxy {
    ports: Vec<u16>,
    shared: Arc<Shared>,
}

/// A one-shot matcher armed on the proxy: when (if ever) a matching request went through.
#[derive(Clone)]
pub struct Trigger {
    fired: Arc<Fired>,
}

struct Fired {
    at: Mutex<Option<Instant>>,
    changed: Condvar,
}

struct Rule {
    pattern: Vec<u8>,
    /// Swallow the server's replies on the matching connection from then on.
    deafen: bool,
    /// Hold the matching request (from where the pattern starts) back this long.
    hold: Duration,
    /// Answer the matching request with these bytes instead of forwarding it.
    reply: Option<Vec<u8>>,
    fired: Arc<Fired>,
}

/// What the armed rules say about one request chunk.
#[derive(Default)]
struct Verdict {
    /// Where to split the chunk, and how long to hold its second part.
    hold: Option<(usize, Duration)>,
    /// The proxy's own answer, instead of the server's.
    reply: Option<Vec<u8>>,
}

/// What the proxy's threads share with the test.
struct Shared {
    stop: AtomicBool,
    reset: AtomicBool,
    blackhole: [AtomicBool; 2],
    /// Per direction, in microseconds.
    delay_us: [AtomicU64; 2],
    rules: Mutex<Vec<Rule>>,
    connections: Mutex<Vec<Weak<Connection>>>,
    /// Chunks read but not yet forwarded or swallowed.
    queued: AtomicUsize,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// When the latest request that a reply then followed was read.
    confirmed: Mutex<Option<Instant>>,
}

/// One proxied connection; its sockets close (with RST after a reset) when both pumps let go.
struct Connection {
    client: TcpStream,
    /// `None` for a connection that never reached the server (accepted during a blackhole).
    server: Option<TcpStream>,
    /// The server's replies are swallowed (a lost reply).
    deaf: AtomicBool,
    /// Reset: the pumps stop at once.
    dead: AtomicBool,
    /// When the latest request on this connection was read from the client.
    last_request: Mutex<Option<Instant>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`, with no fault on.
    pub fn start(upstream: u16) -> Self {
        Self::start_each(&[upstream])
    }

    /// One free loopback port per server in `upstreams`, each forwarding to its server, in that
    /// order; every fault and every observation covers them all (several servers of one backend
    /// behind one network).
    pub fn start_each(upstreams: &[u16]) -> Self {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            reset: AtomicBool::new(false),
            blackhole: [AtomicBool::new(false), AtomicBool::new(false)],
            delay_us: [AtomicU64::new(0), AtomicU64::new(0)],
            rules: Mutex::new(Vec::new()),
            connections: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            confirmed: Mutex::new(None),
        });
        let ports = upstreams
            .iter()
            .map(|&upstream| {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
                listener
                    .set_nonblocking(true)
                    .expect("nonblocking listener");
                let port = listener.local_addr().expect("proxy address").port();
                let accepting = Arc::clone(&shared);
                thread::spawn(move || accept_loop(listener, upstream, accepting));
                port
            })
            .collect();
        Proxy { ports, shared }
    }

    /// A proxy to `127.0.0.1:upstream`, and the backend URL that `url_on` makes for its port.
    pub fn in_front_of(upstream: u16, url_on: impl FnOnce(u16) -> String) -> (Self, String) {
        let proxy = Proxy::start(upstream);
        let url = url_on(proxy.port());
        (proxy, url)
    }

    /// The (first) port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.ports[0]
    }

    /// Every port the proxy listens on, one per server, in the order they were given.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Stops forwarding in both directions, without closing anything.
    pub fn blackhole(&self) {
        self.set_blackhole(Direction::ToServer, true);
        self.set_blackhole(Direction::ToClient, true);
    }

    /// Stops (or resumes) forwarding in one direction; nothing is closed or lost.
    pub fn set_blackhole(&self, direction: Direction, on: bool) {
        self.shared.blackhole[direction.index()].store(on, Ordering::SeqCst);
    }

    /// Adds `delay` to every chunk, in both directions.
    pub fn delay(&self, delay: Duration) {
        self.set_delay(Direction::ToServer, delay);
        self.set_delay(Direction::ToClient, delay);
    }

    /// Adds `delay` to every chunk read from now on in `direction`.
    pub fn set_delay(&self, direction: Direction, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us[direction.index()].store(us, Ordering::SeqCst);
    }

    /// Resets every open connection (RST both ways), and every new one until [`Proxy::heal`].
    pub fn reset(&self) {
        self.shared.reset.store(true, Ordering::SeqCst);
        for connection in self.shared.live() {
            connection.abort();
        }
    }

    /// Lets the first request that contains `pattern` through and swallows every reply on its
    /// connection from then on (see the module's documentation).
    pub fn lose_reply_to(&self, pattern: &[u8]) -> Trigger {
        self.arm(pattern, true, Duration::ZERO)
    }

    /// Fires when the first request that contains `pattern` goes through; changes nothing.
    pub fn observe(&self, pattern: &[u8]) -> Trigger {
        self.arm(pattern, false, Duration::ZERO)
    }

    /// Delivers the first request that contains `pattern` `hold` late, from where the pattern
    /// starts (see the module's documentation); fires when the request is read.
    pub fn hold_request(&self, pattern: &[u8], hold: Duration) -> Trigger {
        self.arm(pattern, false, hold)
    }

    /// Answers each of the next `times` requests that contain `pattern` with `reply` (never
    /// forwarding it) and closes its connection; fires when the last of them was answered.
    pub fn answer_instead(&self, pattern: &[u8], reply: &[u8], times: usize) -> Trigger {
        let mut last = None;
        for _ in 0..times {
            last = Some(self.arm_rule(pattern, false, Duration::ZERO, Some(reply.to_vec())));
        }
        last.expect("at least one answer")
    }

    fn arm(&self, pattern: &[u8], deafen: bool, hold: Duration) -> Trigger {
        self.arm_rule(pattern, deafen, hold, None)
    }

    fn arm_rule(
        &self,
        pattern: &[u8],
        deafen: bool,
        hold: Duration,
        reply: Option<Vec<u8>>,
    ) -> Trigger {
        let fired = Arc::new(Fired {
            at: Mutex::new(None),
            changed: Condvar::new(),
        });
        lock(&self.shared.rules).push(Rule {
            pattern: pattern.to_vec(),
            deafen,
            hold,
            reply,
            fired: Arc::clone(&fired),
        });
        Trigger { fired }
    }

    /// Switches every fault off: no delay, no blackhole, no reset, no armed trigger.
    pub fn heal(&self) {
        for direction in [Direction::ToServer, Direction::ToClient] {
            self.set_blackhole(direction, false);
            self.set_delay(direction, Duration::ZERO);
        }
        self.shared.reset.store(false, Ordering::SeqCst);
        lock(&self.shared.rules).clear();
    }

    /// How many connections are open through the proxy.
    pub fn connections(&self) -> usize {
        self.shared.live().len()
    }

    /// How many connections the proxy has accepted since it started.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// When the proxy read the latest request that a reply then followed on its connection (see
    /// the module's documentation); `None` if no reply ever went through.
    pub fn confirmed(&self) -> Option<Instant> {
        *lock(&self.shared.confirmed)
    }

    /// Waits up to `timeout` for a reply to a request read after `after`; returns when that
    /// request was read.
    pub fn wait_confirmed_after(&self, after: Instant, timeout: Duration) -> Option<Instant> {
        let start = Instant::now();
        loop {
            match self.confirmed() {
                Some(at) if at > after => return Some(at),
                _ if start.elapsed() > timeout => return None,
                _ => thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    /// Waits until no delayed chunk is left to forward; false if `timeout` passed first.
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        while self.shared.queued.load(Ordering::SeqCst) > 0 {
            if start.elapsed() > timeout {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

impl Trigger {
    /// When the matching request went through (read from the client), if it has.
    pub fn fired(&self) -> Option<Instant> {
        *lock(&self.fired.at)
    }

    /// Waits up to `timeout` for the matching request.
    pub fn wait(&self, timeout: Duration) -> Option<Instant> {
        let guard = lock(&self.fired.at);
        let (guard, _) = self
            .fired
            .changed
            .wait_timeout_while(guard, timeout, |at| at.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }
}

impl Shared {
    fn live(&self) -> Vec<Arc<Connection>> {
        let mut connections = lock(&self.connections);
        connections.retain(|c| c.strong_count() > 0);
        connections.iter().filter_map(Weak::upgrade).collect()
    }

    fn delay(&self, direction: Direction) -> Duration {
        Duration::from_micros(self.delay_us[direction.index()].load(Ordering::SeqCst))
    }

    fn halted(&self, connection: &Connection) -> bool {
        self.stop.load(Ordering::SeqCst) || connection.dead.load(Ordering::SeqCst)
    }

    /// Fires the armed rules that `chunk` (after `tail`, the bytes before it) matches; a match
    /// must end inside `chunk`, so an old request never fires a rule armed after it passed.
    /// Returns where to split the chunk and how long to hold its second part, if a rule says so,
    /// and the proxy's own answer, if one is armed (one such rule fires per request).
    fn inspect(&self, connection: &Connection, tail: &[u8], chunk: &[u8]) -> Verdict {
        let mut rules = lock(&self.rules);
        if rules.is_empty() {
            return Verdict::default();
        }
        let mut window = tail.to_vec();
        window.extend_from_slice(chunk);
        let mut held: Option<(usize, Duration)> = None;
        let mut reply: Option<Vec<u8>> = None;
        rules.retain(|rule| {
            if rule.reply.is_some() && reply.is_some() {
                return true;
            }
            let from = tail
                .len()
                .saturating_sub(rule.pattern.len().saturating_sub(1));
            let start = match rule.pattern.is_empty() {
                true => Some(tail.len()),
                false => window[from..]
                    .windows(rule.pattern.len())
                    .position(|w| w == rule.pattern.as_slice())
                    .map(|at| from + at),
            };
            let Some(start) = start else {
                return true;
            };
            if rule.deafen {
                connection.deaf.store(true, Ordering::SeqCst);
            }
            if let Some(answer) = &rule.reply {
                reply = Some(answer.clone());
            }
            if !rule.hold.is_zero() {
                let at = start.saturating_sub(tail.len());
                held = Some(held.map_or((at, rule.hold), |(a, h)| (a.min(at), h.max(rule.hold))));
            }
            *lock(&rule.fired.at) = Some(Instant::now());
            rule.fired.changed.notify_all();
            false
        });
        Verdict { hold: held, reply }
    }
}

impl Connection {
    /// Closes both sides with RST: linger 0 now, the close when the pumps let go (within `POLL`).
    fn abort(&self) {
        abort_on_close(&self.client);
        if let Some(server) = &self.server {
            abort_on_close(server);
        }
        self.dead.store(true, Ordering::SeqCst);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes the socket's close send RST instead of FIN (`SO_LINGER` on, 0 seconds).
fn abort_on_close(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the descriptor is an open socket owned by `stream`, and the option value is a
    // `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn accept_loop(listener: TcpListener, upstream: u16, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                thread::sleep(POLL);
                continue;
            }
        };
        let _ = client.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        if shared.reset.load(Ordering::SeqCst) {
            abort_on_close(&client);
            continue;
        }
        let server = if shared.blackhole[Direction::ToServer.index()].load(Ordering::SeqCst) {
            None
        } else {
            match TcpStream::connect(("127.0.0.1", upstream)) {
                Ok(server) => Some(server),
                Err(_) => {
                    // The server refused: so does the proxy.
                    abort_on_close(&client);
                    continue;
                }
            }
        };
        if let Some(server) = &server {
            let _ = server.set_nodelay(true);
        }
        let connection = Arc::new(Connection {
            client,
            server,
            deaf: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            last_request: Mutex::new(None),
        });
        lock(&shared.connections).push(Arc::downgrade(&connection));
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        if connection.server.is_none() {
            let (connection, shared) = (Arc::clone(&connection), Arc::clone(&shared));
            thread::spawn(move || hold_silent(&connection, &shared));
            continue;
        }
        for direction in [Direction::ToServer, Direction::ToClient] {
            let (connection, shared) = (Arc::clone(&connection), Arc::clone(&shared));
            thread::spawn(move || pump(&connection, direction, &shared));
        }
    }
}

/// A connection that never reached the server: reads and drops what the client sends, answers
/// nothing, until the client closes or the proxy stops.
fn hold_silent(connection: &Connection, shared: &Shared) {
    let _ = connection.client.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 4096];
    while !shared.halted(connection) {
        match (&connection.client).read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
}

/// Forwards one direction of `connection` until its sender closes (then passes the close on, once
/// every delayed chunk went out), the connection is reset, or the proxy stops.
fn pump(connection: &Connection, direction: Direction, shared: &Shared) {
    let Some(server) = connection.server.as_ref() else {
        return;
    };
    let (mut from, to) = match direction {
        Direction::ToServer => (&connection.client, server),
        Direction::ToClient => (server, &connection.client),
    };
    let _ = to.set_write_timeout(Some(POLL));
    // Each chunk with when it is due and, for a reply, the latest request read before it.
    let mut queue: VecDeque<(Instant, Vec<u8>, Option<Instant>)> = VecDeque::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut closed = false;
    let mut buf = vec![0u8; 64 * 1024];
    let swallowed = || direction == Direction::ToClient && connection.deaf.load(Ordering::SeqCst);
    let blackholed = || shared.blackhole[direction.index()].load(Ordering::SeqCst);
    'forwarding: loop {
        if shared.halted(connection) {
            break;
        }
        if blackholed() {
            thread::sleep(POLL);
            continue;
        }
        let now = Instant::now();
        while queue.front().is_some_and(|(due, _, _)| *due <= now) {
            let (_, chunk, answers) = queue.pop_front().expect("a chunk is due");
            let sent = swallowed() || forward(to, &chunk, answers, connection, shared);
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            if !sent {
                break 'forwarding;
            }
        }
        let next_due = queue
            .front()
            .map(|(due, _, _)| due.saturating_duration_since(now));
        let wait = next_due
            .unwrap_or(POLL)
            .clamp(Duration::from_millis(1), POLL);
        if closed {
            if queue.is_empty() {
                // Pass the close on, unless the client must hear nothing more.
                if !swallowed() {
                    let _ = to.shutdown(Shutdown::Write);
                }
                break;
            }
            thread::sleep(wait);
            continue;
        }
        let _ = from.set_read_timeout(Some(wait));
        match from.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => {
                let chunk = &buf[..n];
                // For a request: when it was read; for a reply: the request it may answer.
                let answers = match direction {
                    Direction::ToServer => {
                        *lock(&connection.last_request) = Some(Instant::now());
                        None
                    }
                    Direction::ToClient => *lock(&connection.last_request),
                };
                let mut parts = [(chunk, Duration::ZERO), (&chunk[n..], Duration::ZERO)];
                if direction == Direction::ToServer {
                    let verdict = shared.inspect(connection, &tail, chunk);
                    if let Some(reply) = verdict.reply {
                        // The server never sees this request, nor anything after it here.
                        connection.deaf.store(true, Ordering::SeqCst);
                        let _ = write_all(&connection.client, &reply, connection, shared);
                        let _ = connection.client.shutdown(Shutdown::Write);
                        let _ = server.shutdown(Shutdown::Both);
                        break 'forwarding;
                    }
                    if let Some((at, hold)) = verdict.hold {
                        let (before, after) = chunk.split_at(at);
                        parts = [(before, Duration::ZERO), (after, hold)];
                    }
                    tail.extend_from_slice(chunk);
                    let excess = tail.len().saturating_sub(TAIL);
                    tail.drain(..excess);
                }
                let delay = shared.delay(direction);
                for (part, hold) in parts {
                    if part.is_empty() {
                        continue;
                    }
                    // A chunk read as the blackhole began waits in the queue until it ends.
                    if (delay + hold).is_zero() && queue.is_empty() && !blackholed() {
                        if !swallowed() && !forward(to, part, answers, connection, shared) {
                            break 'forwarding;
                        }
                    } else {
                        shared.queued.fetch_add(1, Ordering::SeqCst);
                        queue.push_back((Instant::now() + delay + hold, part.to_vec(), answers));
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                // The sender reset the connection: so does the proxy, on the other side.
                abort_on_close(to);
                connection.dead.store(true, Ordering::SeqCst);
                break;
            }
        }
    }
    shared.queued.fetch_sub(queue.len(), Ordering::SeqCst);
}

/// Forwards a chunk; once a reply (one that follows request `answers`) is delivered, that request
/// counts as confirmed.
fn forward(
    to: &TcpStream,
    bytes: &[u8],
    answers: Option<Instant>,
    connection: &Connection,
    shared: &Shared,
) -> bool {
    let sent = write_all(to, bytes, connection, shared);
    if sent && let Some(request) = answers {
        let mut confirmed = lock(&shared.confirmed);
        *confirmed = (*confirmed).max(Some(request));
    }
    sent
}

/// Writes all of `bytes`, giving up if the connection is reset or the proxy stops.
fn write_all(
    mut to: &TcpStream,
    mut bytes: &[u8],
    connection: &Connection,
    shared: &Shared,
) -> bool {
    while !bytes.is_empty() {
        if shared.halted(connection) {
            return false;
        }
        match to.write(bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}
