//! Fault drills for the networked backends (Redis, etcd, PostgreSQL, MySQL, ZooKeeper, DynamoDB),
//! through the fault proxy of
//! `support::proxy`, against real servers started per test, driving the real `lockrun` binary.
//!
//! One test per backend and drill:
//! - a lost ack of the acquisition: never two holders, and no ghost holder beyond one TTL;
//! - a lost ack of a renewal: the command is stopped before the last *confirmed* lease could
//!   expire (exit 76), or the renewal is retried and confirmed and the run completes;
//! - a lost ack of the release: the lock frees by the TTL at the latest, and the next holder keeps
//!   its lease;
//! - a release that reaches the server only after the lease expired and another run took the
//!   lock: it must not remove that holder;
//! - a link delayed by half the TTL: the command is stopped early, never late;
//! - every connection reset (RST) under a holder: ridden through, or stopped early.
//! - a first try answered while its lockrun is stopped (SIGSTOP) past the try's deadline: the
//!   answer is read once it is continued, never taken for a silent server (exit 69); the same for
//!   the first connection, its login (a server with a password) and its TLS handshake; a server
//!   that stays silent after the continue gets one more deadline, then lockrun exits 69.
//!
//! Every command run here is the same critical section: when it starts it records its token, its
//! granted TTL and its pid, and checks that no other drill command is still alive (a violation is
//! written to `overlaps`, which must stay empty). The lockruns under test go through the proxy;
//! the witnesses (a second holder, `status`) talk to the server directly. Time bounds are safety
//! bounds only ("dead before the lease could have expired"), plus generous liveness bounds.
//!
//! The proxy's own faults are checked too, against a local echo server, so that no drill passes
//! because a fault silently did nothing.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::dynalite_server::Dynalite;
use crate::support::etcd_cluster::{Etcd, lease_message};
use crate::support::fixture::Fixture;
use crate::support::holder::Holder;
use crate::support::lockrun::Proc;
use crate::support::mysql_server::MySqlServer;
use crate::support::postgres_server::PgServer;
use crate::support::proxy::{Direction, Proxy};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
use crate::support::timing::LeaseTiming;
use crate::support::wait::{SOON, alive, code, text, wait_before, wait_until};
use crate::support::zk_ensemble::ZooKeeper;

/// The lease every drill asks for (etcd's minimum with its default timing).
const TTL: &str = "2s";
/// Liveness slack: a waiter's re-check, process start-up, a loaded machine.
const SLACK: Duration = Duration::from_secs(3);

/// What a drill must recognise on one backend's wire, beyond its fixture.
trait Wire: Fixture {
    /// Readies the server so that each request a drill targets is sent as itself (scripts cached,
    /// schema created), through the direct URL.
    fn warm_up(&self, _s: &Scene) {}
    /// Bytes that appear in the request that takes the lock, and in no request before it.
    fn acquire_request(&self, name: &str) -> Vec<u8>;
    /// Bytes that appear in `holder`'s renewals and in nothing else it sends while it holds.
    fn renew_request(&self, name: &str, holder: &Holder) -> Vec<u8>;
    /// Bytes that appear in `holder`'s release (and, where `RELEASE_IS_RENEWAL`, its renewals).
    fn release_request(&self, name: &str, holder: &Holder) -> Vec<u8>;
    /// The release cannot be told from a renewal on the wire: arm right after a renewal.
    const RELEASE_IS_RENEWAL: bool = false;
    /// How long to hold the acquiring request back, so that what was sent just before it (etcd's
    /// lease grant) is applied first.
    const ACQUIRE_HOLD: Duration = Duration::ZERO;
    /// How a grant slower than its lease ends, exit status and what stderr says: given back and
    /// asked again until the wait runs out. Where the lease is the session (ZooKeeper), replies
    /// that slow expire the session itself, and no grant is ever taken.
    const LATE_GRANT_ENDS: (i32, &'static str) = (76, "too late");
}

impl Wire for RedisServer {
    fn warm_up(&self, _s: &Scene) {
        for script in [ACQUIRE_LUA, RENEW_LUA, RELEASE_LUA] {
            redis_script(self, script);
        }
    }

    fn acquire_request(&self, _name: &str) -> Vec<u8> {
        redis_script(self, ACQUIRE_LUA)
    }

    fn renew_request(&self, _name: &str, _holder: &Holder) -> Vec<u8> {
        redis_script(self, RENEW_LUA)
    }

    fn release_request(&self, _name: &str, _holder: &Holder) -> Vec<u8> {
        redis_script(self, RELEASE_LUA)
    }
}

/// The acquire script as sent: the publish check and the opening that every try shares, then the
/// acquire itself.
const ACQUIRE_LUA: &str = concat!(
    include_str!("../src/backend/redis/lua/may_publish.lua"),
    include_str!("../src/backend/redis/lua/acquire_opening.lua"),
    include_str!("../src/backend/redis/lua/acquire.lua")
);
const RENEW_LUA: &str = include_str!("../src/backend/redis/lua/renew.lua");
/// The release script as sent: the shared publish check and waking helper, then the release
/// itself.
const RELEASE_LUA: &str = concat!(
    include_str!("../src/backend/redis/lua/may_publish.lua"),
    include_str!("../src/backend/redis/lua/wake.lua"),
    include_str!("../src/backend/redis/lua/release.lua")
);

/// Loads `script` into the server's cache (so lockrun's `EVALSHA` is answered, not refused with
/// `NOSCRIPT`) and returns its SHA-1, which every invocation carries.
fn redis_script(server: &RedisServer, script: &str) -> Vec<u8> {
    let sha = server.ask(&["SCRIPT", "LOAD", script]);
    assert_eq!(sha.len(), 40, "SCRIPT LOAD answered {sha:?}");
    sha.into_bytes()
}

/// A backend whose requests a drill knows by fixed text, and whose storage (PostgreSQL's schema,
/// MySQL's tables and procedures, DynamoDB's table) the first run creates: the first request on a
/// fresh server finds none, so a warm-up run creates it.
trait FixedWire: Fixture {
    /// Bytes of the request that takes the lock.
    const ACQUIRE: &'static [u8];
    /// Bytes of a renewal.
    const RENEW: &'static [u8];
    /// Bytes of the release.
    const RELEASE: &'static [u8];
}

impl<T: FixedWire> Wire for T {
    fn warm_up(&self, s: &Scene) {
        let out = s.run(["--name", "warm-up", "--", "true"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }

    fn acquire_request(&self, _name: &str) -> Vec<u8> {
        T::ACQUIRE.to_vec()
    }

    fn renew_request(&self, _name: &str, _holder: &Holder) -> Vec<u8> {
        T::RENEW.to_vec()
    }

    fn release_request(&self, _name: &str, _holder: &Holder) -> Vec<u8> {
        T::RELEASE.to_vec()
    }
}

/// Statements travel with their text (one round trip); only a waiter's repeated tries and looks
/// are prepared, once an answer showed the connection reaches the server directly — after the
/// first try, which is the one the drills lose.
impl FixedWire for PgServer {
    const ACQUIRE: &'static [u8] = b"\"lockrun\".acquire_v2($1";
    const RENEW: &'static [u8] = b"UPDATE \"lockrun\".leases SET expires_at";
    const RELEASE: &'static [u8] = b"\"lockrun\".release_v2($1";
}

/// Every statement travels as text (one round trip, no prepared statements). A run's first try on
/// a free name is the fast path, a transaction of plain statements.
impl FixedWire for MySqlServer {
    const ACQUIRE: &'static [u8] = b"SET @lockrun_free = NOT EXISTS";
    const RENEW: &'static [u8] = b"UPDATE `lockrun_leases` SET expires_at";
    const RELEASE: &'static [u8] = b"CALL `lockrun_release_v1`(";
}

/// Every request is one UpdateItem whose expression says what it is (`src/backend/dynamodb`); the
/// claim of slot 0 names its token attribute, and nothing is sent before it.
impl FixedWire for Dynalite {
    const ACQUIRE: &'static [u8] = b"\"t_x0\"";
    const RENEW: &'static [u8] = b"SET #a0.#a1 = :v0, #a0.#a2 = :v1";
    const RELEASE: &'static [u8] = b"SET #a2 = #a2 - :v1 REMOVE #a0, #a1";
}

impl Wire for Etcd<1> {
    /// The join transaction carries the holder key in clear.
    fn acquire_request(&self, name: &str) -> Vec<u8> {
        format!("lockrun/{name}/#holders/").into_bytes()
    }

    fn renew_request(&self, name: &str, holder: &Holder) -> Vec<u8> {
        lease_message(self.holder_lease(name, holder.token()))
    }

    fn release_request(&self, name: &str, holder: &Holder) -> Vec<u8> {
        lease_message(self.holder_lease(name, holder.token()))
    }

    const RELEASE_IS_RENEWAL: bool = true;
    /// The grant and the join are sent together; a join that the server sees first fails.
    const ACQUIRE_HOLD: Duration = Duration::from_millis(500);
}

impl Wire for ZooKeeper<1> {
    const LATE_GRANT_ENDS: (i32, &'static str) = (69, "session expired");

    /// Makes each drill name's node, so that the acquiring create is applied at once rather than
    /// refused for want of its parent (a container node, which the server removes only at its
    /// next sweep, a minute after it starts).
    fn warm_up(&self, s: &Scene) {
        for name in (1..=10).map(|i| format!("acquire-{i}")) {
            let out = s.run(["--name", &name, "--", "true"]);
            assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        }
    }

    /// The create of the contender's znode carries its path in clear, and nothing before it does
    /// (the name's node has no `/x-`).
    fn acquire_request(&self, name: &str) -> Vec<u8> {
        format!("/lockrun/{name}/x-").into_bytes()
    }

    /// `exists` (opcode 3) on the holder's own znode, without a watch (its revocation watch sets
    /// one).
    fn renew_request(&self, name: &str, _holder: &Holder) -> Vec<u8> {
        let mut request = zk_request(3, &zk_holder_znode(self, name));
        request.push(0);
        request
    }

    /// The release deletes the holder's znode first: `delete` (opcode 2) on its path.
    fn release_request(&self, name: &str, _holder: &Holder) -> Vec<u8> {
        zk_request(2, &zk_holder_znode(self, name))
    }
}

/// The start of a ZooKeeper request with `opcode` on `path`: the opcode ends the header, the
/// path (length, bytes) opens the body.
fn zk_request(opcode: i32, path: &str) -> Vec<u8> {
    let mut request = opcode.to_be_bytes().to_vec();
    request.extend_from_slice(&(path.len() as u32).to_be_bytes());
    request.extend_from_slice(path.as_bytes());
    request
}

/// The znode of `name`'s holder, the first in line among the ephemerals `dump` lists (in the
/// drills, A holds and B waits behind it).
fn zk_holder_znode(zk: &ZooKeeper<1>, name: &str) -> String {
    let dump = zk.four_letters(0, "dump").expect("dump answered");
    let prefix = format!("/lockrun/{name}/x-");
    dump.lines()
        .map(str::trim)
        .filter(|line| line.starts_with(&prefix))
        .min_by_key(|path| path.rsplit('-').next().map(str::to_owned))
        .unwrap_or_else(|| panic!("no znode of {name} in: {dump}"))
        .to_owned()
}

/// Starts a holder of `name` through `url` (the proxy), and waits until its command runs.
fn hold_via(w: &Scene, url: &str, name: &str, tag: &str, extra: &[&str]) -> Holder {
    w.hold_via(url, name, tag, &[&["--ttl", TTL], extra].concat())
}

/// Starts a lockrun through `url` whose command, the critical section, may or may not get to run.
fn start(w: &Scene, url: &str, name: &str, tag: &str, args: &[&str]) -> Holder {
    let cmd = w.holder_cmd(url, name, &[&["--ttl", TTL], args].concat());
    Holder::spawn(cmd, w.dir(), tag)
}

/// A fresh server with the proxy in front of it; the scene's own URL stays the direct one.
fn rig<S: Wire>() -> (S, Scene, Proxy, String) {
    rig_around(S::start())
}

/// [`rig`] around a server already started (one that wants a password, say).
fn rig_around<S: Wire>(fx: S) -> (S, Scene, Proxy, String) {
    let w = Scene::new(fx.url());
    fx.warm_up(&w);
    let (proxy, via) = fx.proxied().expect("a networked backend");
    (fx, w, proxy, via)
}

/// Watches `holder`'s command whose lease was last confirmed by a request sent before
/// `confirmed_before` (so the lease is proven until `confirmed_before + ttl` at most): if it dies,
/// it must be dead by that lease's stop point and lockrun must exit 76 — or, if it still runs a
/// little after the lease's end, its lease was confirmed again, it is still the holder, and it
/// completes normally. Returns which.
fn stopped_early_or_confirmed(
    w: &Scene,
    name: &str,
    holder: &mut Holder,
    confirmed_before: Instant,
    ttl: Duration,
) -> &'static str {
    let timing = LeaseTiming::defaults(ttl);
    let pid = holder.child_pid();
    let dead = wait_before(confirmed_before + ttl + Duration::from_millis(500), || {
        !alive(pid)
    });
    if dead {
        let seen_dead = Instant::now();
        let bound = timing.seen_dead_by(confirmed_before);
        assert!(
            seen_dead <= bound,
            "the command ran {:?} past the stop point of the lease it could not confirm",
            seen_dead - bound
        );
        let out = holder.exit();
        assert_eq!(code(&out), 76, "{}", text(&out.stderr));
        return "stopped early, exit 76";
    }
    // Still running past every unconfirmed expiry: a renewal must have been confirmed since.
    let status = w.status(name);
    assert_eq!(
        status["holders"][0]["token"],
        holder.token(),
        "the command runs, but the backend shows another holder: {status}"
    );
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    "renewal retried and confirmed, exit 0"
}

/// Lost ack of the acquisition: the request that takes the lock is applied, its answer never
/// comes. Meanwhile a second run waits for the lock. Nobody may run alongside a holder, and the
/// ghost holder the lost answer left behind must be gone within one TTL.
fn lost_ack_of_acquire<S: Wire>() {
    let (fx, w, proxy, via) = rig::<S>();
    // The drill counts only when the lost request was applied: the backend then shows A's lockrun
    // as the holder although A never heard so (a ghost). etcd sends the lease grant and the join
    // together, and a join that reaches the server first fails for want of the lease: the join is
    // held back a little, and should a try still apply nothing, it is made again on a fresh name.
    let mut tries = 0;
    let (name, mut a, lost_at) = loop {
        tries += 1;
        let name = format!("acquire-{tries}");
        let pattern = fx.acquire_request(&name);
        if !S::ACQUIRE_HOLD.is_zero() {
            proxy.hold_request(&pattern, S::ACQUIRE_HOLD);
        }
        let lost = proxy.lose_reply_to(&pattern);
        let a = start(&w, &via, &name, &format!("a{tries}"), &["--wait", "20s"]);
        let lost_at = lost
            .wait(SOON)
            .expect("the acquire request never went through");
        let pid = a.process.pid();
        let ghost = wait_until(S::ACQUIRE_HOLD + Duration::from_secs(1), || {
            w.status(&name)["holders"][0]["pid"] == pid
        });
        if ghost {
            break (name, a, lost_at);
        }
        assert!(tries < 10, "no lost acquire was applied in {tries} tries");
    };
    let name = name.as_str();
    let mut b = start(&w, w.url(), name, "b", &["--wait", "30s"]);
    let ttl = Duration::from_secs(2);
    let someone = wait_before(lost_at + ttl + SLACK, || a.running() || b.running());
    assert!(
        someone,
        "nobody held the lock within one TTL of the lost ack: a ghost holder stayed; {}",
        w.status(name)
    );
    let mut outcome = format!("ghost on try {tries}; ");
    if a.running() {
        // A confirmed its acquisition after all: it is the one holder.
        let out = a.finish();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        outcome.push_str("A retried and held (exit 0); ");
    }
    assert!(
        wait_until(SOON, || b.running()),
        "the waiter never got the lock"
    );
    outcome.push_str(&format!(
        "B held {:?} after the lost ack",
        lost_at.elapsed()
    ));
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    if !a.running() {
        let out = a.finish();
        assert!(
            a.running() && code(&out) == 0 || code(&out) == 69,
            "A: exit {}: {}",
            code(&out),
            text(&out.stderr)
        );
        outcome = format!("A exit {}; {outcome}", code(&out));
    }
    assert_eq!(w.overlaps(), "", "two holders ran at once");
    eprintln!("drill outcome: {outcome}");
}

/// A drill under way: a fresh server behind the proxy, holder A (tagged `a`) through the proxy,
/// and B (tagged `b`) in line for the same name, talking to the server directly.
struct Drill<S> {
    fx: S,
    w: Scene,
    proxy: Proxy,
    name: &'static str,
    a: Holder,
    b: Holder,
    /// The lease the backend granted A.
    ttl: Duration,
}

impl<S: Wire> Drill<S> {
    fn start(name: &'static str) -> Self {
        let (fx, w, proxy, via) = rig::<S>();
        let a = hold_via(&w, &via, name, "a", &[]);
        let ttl = a.ttl();
        let b = start(&w, w.url(), name, "b", &["--wait", "30s"]);
        w.wait_waiters(name, 1);
        Drill {
            fx,
            w,
            proxy,
            name,
            a,
            b,
            ttl,
        }
    }

    /// A's command ends; its lockrun must exit 0 (a failed release is only worth a warning).
    fn a_finishes(&mut self) {
        let out = self.a.finish();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }

    /// B gets the lock within `within` with a higher token and keeps it while anything A sent
    /// may still land; its run ends normally, and no two commands ever ran at once.
    fn b_takes_over(mut self, within: Duration, outcome: &str) {
        assert!(
            wait_until(within, || self.b.running()),
            "the waiter never got the lock"
        );
        assert!(self.b.token() > self.a.token());
        keeps_holding(&self.w, self.name, self.b.token());
        let out = self.b.finish();
        assert_eq!(
            code(&out),
            0,
            "the new holder lost its lease: {}",
            text(&out.stderr)
        );
        assert_eq!(self.w.overlaps(), "", "two holders ran at once");
        eprintln!("drill outcome: {outcome}");
    }
}

/// Lost ack of a renewal: the deadline must not move on the strength of an unconfirmed renewal.
fn lost_ack_of_renewal<S: Wire>() {
    // Default timings: a renewal whose answer is lost uses up its timeout and is retried at once,
    // which still fits before the stop point; stopping early instead would also be correct.
    let mut d = Drill::<S>::start("renew");
    let lost = d.proxy.lose_reply_to(&d.fx.renew_request(d.name, &d.a));
    // Every renewal confirmed so far was sent before this one.
    let lost_at = lost.wait(d.ttl).expect("no renewal within a TTL");
    let outcome = stopped_early_or_confirmed(&d.w, d.name, &mut d.a, lost_at, d.ttl);
    d.b_takes_over(SOON, outcome);
}

/// Lost ack of the release: the release is applied but unanswered. The lock frees by the TTL at
/// the latest, and the next holder keeps its lease until it ends.
fn lost_ack_of_release<S: Wire>() {
    let mut d = Drill::<S>::start("release");
    let pattern = d.fx.release_request(d.name, &d.a);
    if S::RELEASE_IS_RENEWAL {
        // A renewal just went by; the next is a renewal interval away, the release is at once.
        let renewed = d.proxy.observe(&pattern);
        assert!(renewed.wait(d.ttl).is_some(), "no renewal within a TTL");
    }
    let lost = d.proxy.lose_reply_to(&pattern);
    std::fs::write(d.a.file("release"), "").expect("write release file");
    let lost_at = lost.wait(SOON).expect("the release never went through");
    let freed = wait_before(lost_at + d.ttl + SLACK, || d.b.running());
    assert!(freed, "the lock was not free one TTL after the release");
    let held_after = lost_at.elapsed();
    d.a_finishes();
    d.b_takes_over(
        SOON,
        &format!("B held {held_after:?} after the unanswered release, kept it"),
    );
}

/// A stale release: the holder's release reaches the server only after its lease expired and
/// another run took the lock. It must not remove the new holder.
fn late_release<S: Wire>() {
    let mut d = Drill::<S>::start("late");
    if S::RELEASE_IS_RENEWAL {
        // Right after a renewal, so that the release is the next such request A sends.
        let renewed = d.proxy.observe(&d.fx.renew_request(d.name, &d.a));
        assert!(renewed.wait(d.ttl).is_some(), "no renewal within a TTL");
    }
    // The release reaches the server a second after A's lease could have expired.
    let pattern = d.fx.release_request(d.name, &d.a);
    let released = d
        .proxy
        .hold_request(&pattern, d.ttl + Duration::from_secs(1));
    let delayed_at = Instant::now();
    std::fs::write(d.a.file("release"), "").expect("write release file");
    // A's lease was last confirmed before this point: it frees by the TTL at the latest.
    let freed = wait_before(delayed_at + d.ttl + SLACK, || d.b.running());
    assert!(
        freed,
        "the lock was not free one TTL after the last renewal"
    );
    let held_after = delayed_at.elapsed();
    d.a_finishes();
    assert!(
        released.fired().is_some(),
        "A sent no release through the proxy"
    );
    assert!(
        d.proxy.wait_drained(SOON),
        "the late release was never delivered"
    );
    d.b_takes_over(
        SOON,
        &format!(
            "B held {held_after:?} after the release was sent; \
             the release arrived late and B kept the lock"
        ),
    );
}

/// A link delayed by half the TTL each way: renewals cannot be confirmed in time, so the command
/// must be stopped before its last confirmed lease could expire (or, should a renewal be
/// confirmed, run on as the holder).
fn half_ttl_delay<S: Wire>() {
    let mut d = Drill::<S>::start("delay");
    d.proxy.delay(d.ttl / 2);
    // Nothing sent from here on can be confirmed sooner than a TTL after it was sent.
    let delayed_at = Instant::now();
    let outcome = stopped_early_or_confirmed(&d.w, d.name, &mut d.a, delayed_at, d.ttl);
    let within = SOON + d.ttl;
    d.b_takes_over(within, outcome);
}

/// Every connection reset (RST) under a holder, and new ones refused for a moment: the holder
/// reconnects and rides through, or is stopped before its last confirmed lease could expire.
fn reset_under_a_holder<S: Wire>() {
    let mut d = Drill::<S>::start("reset");
    let open = d.proxy.connections();
    d.proxy.reset();
    let reset_at = Instant::now();
    assert!(
        wait_until(SOON, || d.proxy.connections() == 0),
        "{open} connection(s) survived the reset"
    );
    std::thread::sleep(d.ttl / 8);
    d.proxy.heal();
    let outcome = stopped_early_or_confirmed(&d.w, d.name, &mut d.a, reset_at, d.ttl);
    let within = SOON + d.ttl;
    d.b_takes_over(within, outcome);
}

/// `token` stays the one holder of `name` for a while (a few renewals of the new holder and time
/// for anything still in flight to land), as the backend itself says.
fn keeps_holding(w: &Scene, name: &str, token: u64) {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let status = w.status(name);
        let holders = status["holders"].as_array().cloned().unwrap_or_default();
        assert!(
            holders.len() == 1 && holders[0]["token"] == token,
            "the new holder {token} was removed: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After a grant that came too late (the backend answers, slowly), the backend going silent is
/// an outage to ride out within `--wait`, like any waiter's: lockrun must not take the first
/// unanswered try for a backend unreachable from the start (exit 69).
fn silence_after_a_late_grant<S: Wire>() {
    let (_fx, w, proxy, mut run) = run_with_late_grants::<S>("quiet", "40s");
    let said = |run: &Proc, what: &str| run.stderr_so_far().contains(what);
    assert!(
        wait_until(Duration::from_secs(20), || said(&run, "asking again")),
        "no grant came too late: {}",
        run.stderr_so_far()
    );
    proxy.blackhole();
    let ridden = wait_until(Duration::from_secs(20), || {
        said(&run, "retrying") || run.exited()
    });
    proxy.heal();
    let out = run.wait(Duration::from_secs(60));
    assert!(ridden, "no try went unanswered: {}", text(&out.stderr));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran").exists());
}

/// A run of `touch ran` on `name`, waiting up to `wait`, through a proxy whose replies turn
/// slower than the lease from its first acquire on — not before: a connection handshake of
/// several replies would otherwise time out before any grant could be late.
fn run_with_late_grants<S: Wire>(name: &str, wait: &str) -> (S, Scene, Proxy, Proc) {
    let (fx, w, proxy, via) = rig::<S>();
    let ttl: Duration = humantime::parse_duration(TTL).unwrap();
    let acquiring = proxy.hold_request(&fx.acquire_request(name), Duration::from_millis(200));
    let run = Proc::spawn(&mut w.cmd_via(
        &via,
        [
            "--name", name, "--ttl", TTL, "--wait", wait, "--", "touch", "ran",
        ],
    ));
    acquiring
        .wait(SOON)
        .expect("the acquire request never went through");
    proxy.set_delay(Direction::ToClient, ttl + ttl / 5);
    (fx, w, proxy, run)
}

/// A reply path slower than the lease (issue 10 item 3): every grant reaches lockrun after the
/// lease it grants could already have expired on the server. lockrun must never start the command
/// on such a lease: it gives it back and asks again while `--wait` allows, then exits 76.
fn late_grant<S: Wire>() {
    let (_fx, w, proxy, mut run) = run_with_late_grants::<S>("late", "4s");
    let out = run.wait(Duration::from_secs(30));
    assert!(!w.path("ran").exists(), "a lease granted too late was used");
    let (status, said) = S::LATE_GRANT_ENDS;
    assert_eq!(code(&out), status, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(said) && !text(&out.stderr).contains("paused"),
        "{}",
        text(&out.stderr)
    );
    proxy.heal();
    // Nothing of it is left holding: a direct run gets the name within a lease.
    let next = w.hold("late", "n", &["--ttl", TTL, "--wait", "10s"]);
    assert!(next.running());
}

/// How long a drill keeps a lockrun stopped: past every request's deadline (3 s on every backend).
const STOPPED_PAST_A_REQUEST: Duration = Duration::from_secs(4);

/// A lockrun stopped (SIGSTOP) while its first try is on the wire, and continued only after that
/// try's deadline: the answer came meanwhile and waits unread in its socket. That answer must be
/// read — the server did answer — not taken for a server silent from the start (exit 69). A
/// stopped process also wakes from its wait for events with nothing read (EINTR), so the
/// expired timer is the first thing it sees.
fn stopped_while_its_try_is_answered<S: Wire>() {
    let (fx, w, proxy, via) = rig::<S>();
    let mut holder = w.hold("stopped", "h", &["--ttl", TTL]);
    // Held back a little, so that the stop lands before the answer does.
    let trying = proxy.hold_request(&fx.acquire_request("stopped"), Duration::from_millis(300));
    let mut run = Proc::spawn(&mut w.cmd_via(
        &via,
        [
            "--name", "stopped", "--ttl", TTL, "--wait", "30s", "--", "touch", "ran",
        ],
    ));
    trying.wait(SOON).expect("the first try never went through");
    run.signal(Signal::SIGSTOP);
    assert!(proxy.wait_drained(SOON), "the try never reached the server");
    std::thread::sleep(STOPPED_PAST_A_REQUEST);
    run.signal(Signal::SIGCONT);
    assert_eq!(code(&holder.finish()), 0);
    let out = run.wait(Duration::from_secs(30));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran").exists());
}

/// A lockrun stopped while the server's first answer on its first connection is on its way, and
/// continued only after the connection's deadline: that answer waits unread, and the connection
/// must still be made — the server is there — not reported unreachable (exit 69).
fn stopped_while_connecting<S: Wire>() {
    let (_fx, w, proxy, via) = rig::<S>();
    connected_though_stopped(&w, &proxy, &mut w.cmd_via(&via, CONNECTING));
}

/// The same, on a server that wants a password: the stop lands in the login's exchange (Redis's
/// AUTH, PostgreSQL's SCRAM, etcd's token, MySQL's handshake, ZooKeeper's digest), which some
/// clients time themselves.
fn stopped_while_logging_in<S: Wire>() {
    let fx = S::with_password("pw").expect("the backend has passwords");
    let (_fx, w, proxy, via) = rig_around(fx);
    connected_though_stopped(&w, &proxy, &mut w.cmd_via(&via, CONNECTING));
}

/// What the connection drills run.
const CONNECTING: [&str; 7] = ["--name", "connecting", "--ttl", TTL, "--", "touch", "ran"];

/// Runs `lockrun` (through `proxy`), stops it while the server's first answer waits in the
/// proxy, lets the answer go, and continues it past the connection's deadline: it must run.
fn connected_though_stopped(w: &Scene, proxy: &Proxy, lockrun: &mut std::process::Command) {
    let mut run = stopped_awaiting_the_server(proxy, lockrun);
    proxy.set_blackhole(Direction::ToClient, false);
    std::thread::sleep(STOPPED_PAST_A_REQUEST);
    run.signal(Signal::SIGCONT);
    let out = run.wait(Duration::from_secs(30));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran").exists());
}

/// Starts `lockrun` through `proxy` with the server's answers held back in the proxy, and stops
/// it once what it sends first is on its way: it waits for an answer it cannot see yet.
fn stopped_awaiting_the_server(proxy: &Proxy, lockrun: &mut std::process::Command) -> Proc {
    proxy.set_blackhole(Direction::ToClient, true);
    let run = Proc::spawn(lockrun);
    assert!(
        wait_until(SOON, || proxy.accepted() > 0),
        "lockrun never connected"
    );
    std::thread::sleep(Duration::from_millis(200));
    run.signal(Signal::SIGSTOP);
    run
}

/// A lockrun stopped while its first connection waits for the server, which stays silent after
/// the continue: the server gets one more deadline, counted from then, and lockrun then gives up
/// as on any silent server (exit 69), without running anything.
fn stopped_while_the_server_stays_silent<S: Wire>() {
    let (_fx, w, proxy, via) = rig::<S>();
    let mut run = stopped_awaiting_the_server(&proxy, &mut w.cmd_via(&via, CONNECTING));
    std::thread::sleep(STOPPED_PAST_A_REQUEST);
    let continued = Instant::now();
    run.signal(Signal::SIGCONT);
    let out = run.wait(Duration::from_secs(30));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(!w.path("ran").exists());
    // Every deadline is 3 s: one given again, not one found spent.
    assert!(
        continued.elapsed() >= Duration::from_secs(2),
        "gave up {:?} after the continue: {}",
        continued.elapsed(),
        text(&out.stderr)
    );
}

/// The connection drill over TLS: the stop lands in the handshake, which some clients time
/// themselves.
mod a_tls_handshake_answered_while_lockrun_is_stopped_is_made {
    use super::*;
    use std::path::Path;

    use crate::support::certs::Certificates;
    use crate::support::cluster::Members;
    use crate::support::etcd_cluster::EtcdCluster;
    use crate::support::single_server::SingleServer;

    #[test]
    fn on_redis() {
        let Some(certs) = Certificates::if_openssl() else {
            return;
        };
        let server = RedisServer::with_tls(certs.dir());
        let ca = certs.file("ca.crt");
        drill(
            server.port(),
            |port| format!("rediss://localhost:{port}"),
            Some(&ca),
        );
    }

    #[test]
    fn on_postgres() {
        if !crate::support::tools::openssl() {
            return;
        }
        let server = PgServer::with_tls();
        let ca = server.ca_file();
        let url = |port| {
            let server = server.url_on(port);
            format!("{server}?sslmode=verify-full&sslrootcert={}", ca.display())
        };
        drill(server.port(), url, None);
    }

    #[test]
    fn on_etcd() {
        let Some(certs) = Certificates::if_openssl() else {
            return;
        };
        let cluster = EtcdCluster::single_tls(certs.dir(), false);
        let ca = certs.file("ca.crt");
        let url = |port| format!("etcd://127.0.0.1:{port}?cacert={}", ca.display());
        drill(cluster.client_port(0), url, None);
    }

    #[test]
    fn on_mysql() {
        let Some(certs) = Certificates::if_openssl() else {
            return;
        };
        let server = MySqlServer::with_tls(certs.dir());
        let ca = certs.file("ca.crt");
        let url = |port| {
            let server = server.url_on(port);
            format!("{server}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display())
        };
        drill(server.port(), url, None);
    }

    /// The drill through a proxy in front of `port`, with the URL `url` makes for the proxy's
    /// port; `trusted` is the authority lockrun trusts where the URL cannot name it.
    fn drill(port: u16, url: impl FnOnce(u16) -> String, trusted: Option<&Path>) {
        let proxy = Proxy::start(port);
        let w = Scene::new(url(proxy.port()));
        let mut lockrun = w.cmd(CONNECTING);
        if let Some(ca) = trusted {
            lockrun.env("SSL_CERT_FILE", ca);
        }
        connected_though_stopped(&w, &proxy, &mut lockrun);
    }
}

/// `drills!(module, Fixture)`: one `#[test]` per drill, on that backend; `drills!(@on module,
/// drill, test => Fixture, ...)`: one drill, on each of the backends listed.
macro_rules! drills {
    ($module:ident, $server:ty) => {
        drills!(@each $module, $server,
            lost_ack_of_acquire_leaves_one_holder_and_no_ghost => lost_ack_of_acquire,
            lost_ack_of_renewal_stops_early_or_is_confirmed => lost_ack_of_renewal,
            lost_ack_of_release_frees_the_lock_and_spares_the_next_holder => lost_ack_of_release,
            late_release_never_removes_the_next_holder => late_release,
            half_ttl_delay_stops_the_command_early_never_late => half_ttl_delay,
            reset_connections_are_ridden_through_or_stop_the_command_early => reset_under_a_holder,
            a_grant_that_arrives_after_its_lease_is_never_used => late_grant,
            a_try_answered_while_lockrun_is_stopped_is_read => stopped_while_its_try_is_answered,
            a_connection_answered_while_lockrun_is_stopped_is_made => stopped_while_connecting,
            a_server_silent_after_lockrun_was_stopped_gets_one_more_deadline =>
                stopped_while_the_server_stays_silent,
        );
    };
    (@each $module:ident, $server:ty, $($test:ident => $drill:ident),* $(,)?) => {
        drills!(@tests $module, $($test: $drill::<$server>),*);
    };
    (@on $module:ident, $drill:ident, $($test:ident => $server:ty),* $(,)?) => {
        drills!(@tests $module, $($test: $drill::<$server>),*);
    };
    (@tests $module:ident, $($test:ident: $drill:ident::<$server:ty>),*) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $test() {
                    $drill::<$server>();
                }
            )*
        }
    };
}

// Every backend whose grants can come too late: the shared waiting engine's, and etcd's own
// loop. (On ZooKeeper replies that slow expire the session itself: no grant is ever taken.)
drills!(@on silence_after_a_late_grant_is_ridden_out, silence_after_a_late_grant,
    on_redis => RedisServer,
    on_postgres => PgServer,
    on_mysql => MySqlServer,
    on_dynamodb => Dynalite,
    on_etcd => Etcd<1>,
);

// Every backend with passwords.
drills!(@on a_login_answered_while_lockrun_is_stopped_is_made, stopped_while_logging_in,
    on_redis => RedisServer,
    on_postgres => PgServer,
    on_mysql => MySqlServer,
    on_etcd => Etcd<1>,
    on_zookeeper => ZooKeeper<1>,
);

drills!(on_redis, RedisServer);
drills!(on_etcd, Etcd<1>);
drills!(on_postgres, PgServer);
drills!(on_mysql, MySqlServer);
drills!(on_zookeeper, ZooKeeper<1>);
drills!(on_dynamodb, Dynalite);

/// The proxy's faults, against a local echo server that records what it received.
mod proxy_faults {
    use super::*;

    struct Echo {
        port: u16,
        received: Arc<Mutex<Vec<u8>>>,
    }

    fn echo() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo server");
        let port = listener.local_addr().expect("echo address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                        if stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Echo { port, received }
    }

    /// An echo server, a proxy in front of it, and a connection through the proxy.
    fn echo_through_proxy() -> (Echo, Proxy, TcpStream) {
        let server = echo();
        let proxy = Proxy::start(server.port);
        let stream = connect(&proxy);
        (server, proxy, stream)
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect to proxy");
        stream
            .set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        stream
    }

    /// Sends `message` and reads the echo; `Err` with the read's error kind when none came.
    fn ask(stream: &mut TcpStream, message: &[u8]) -> Result<Vec<u8>, ErrorKind> {
        stream.write_all(message).map_err(|e| e.kind())?;
        let mut reply = vec![0u8; message.len()];
        let mut got = 0;
        while got < reply.len() {
            match stream.read(&mut reply[got..]) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof),
                Ok(n) => got += n,
                Err(e) => return Err(e.kind()),
            }
        }
        Ok(reply)
    }

    #[test]
    fn delay_holds_each_chunk_back_by_at_least_the_delay() {
        let (_server, proxy, mut stream) = echo_through_proxy();
        stream.set_read_timeout(Some(SOON)).unwrap();
        proxy.set_delay(Direction::ToClient, Duration::from_millis(300));
        let start = Instant::now();
        assert_eq!(ask(&mut stream, b"one"), Ok(b"one".to_vec()));
        assert!(start.elapsed() >= Duration::from_millis(300));
        proxy.delay(Duration::from_millis(200));
        let start = Instant::now();
        assert_eq!(ask(&mut stream, b"two"), Ok(b"two".to_vec()));
        assert!(start.elapsed() >= Duration::from_millis(400));
        assert!(proxy.wait_drained(SOON));
    }

    #[test]
    fn blackhole_forwards_nothing_and_loses_nothing() {
        let (server, proxy, mut stream) = echo_through_proxy();
        assert_eq!(ask(&mut stream, b"one"), Ok(b"one".to_vec()));
        proxy.blackhole();
        assert!(ask(&mut stream, b"two").is_err(), "an answer came through");
        assert_eq!(*server.received.lock().unwrap(), b"one");
        proxy.heal();
        let mut reply = [0u8; 3];
        stream
            .read_exact(&mut reply)
            .expect("the held bytes arrive");
        assert_eq!(&reply, b"two");
    }

    #[test]
    fn reset_closes_open_and_new_connections_with_rst() {
        let (_server, proxy, mut stream) = echo_through_proxy();
        assert_eq!(ask(&mut stream, b"one"), Ok(b"one".to_vec()));
        proxy.reset();
        let mut buf = [0u8; 8];
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let read = stream.read(&mut buf).map_err(|e| e.kind());
        assert_eq!(read, Err(ErrorKind::ConnectionReset));
        let mut fresh = connect(&proxy);
        let asked = ask(&mut fresh, b"two");
        assert!(
            matches!(
                asked,
                Err(ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
            ),
            "{asked:?}"
        );
        proxy.heal();
        assert_eq!(ask(&mut connect(&proxy), b"six"), Ok(b"six".to_vec()));
    }

    #[test]
    fn a_held_request_arrives_late_and_what_came_before_it_at_once() {
        let (server, proxy, mut stream) = echo_through_proxy();
        stream.set_read_timeout(Some(SOON)).unwrap();
        let held = proxy.hold_request(b"late", Duration::from_millis(300));
        let start = Instant::now();
        stream.write_all(b"soon,late").unwrap();
        let mut reply = [0u8; 9];
        stream.read_exact(&mut reply[..5]).unwrap();
        assert_eq!(&reply[..5], b"soon,");
        assert_eq!(*server.received.lock().unwrap(), b"soon,");
        stream.read_exact(&mut reply[5..]).unwrap();
        assert_eq!(&reply, b"soon,late");
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(held.fired().is_some());
    }

    #[test]
    fn lost_reply_delivers_the_request_and_swallows_the_answer() {
        let (server, proxy, mut stream) = echo_through_proxy();
        let lost = proxy.lose_reply_to(b"tw");
        assert_eq!(ask(&mut stream, b"one"), Ok(b"one".to_vec()));
        assert!(lost.fired().is_none());
        assert!(ask(&mut stream, b"two").is_err(), "the answer came through");
        assert!(lost.fired().is_some());
        assert!(
            wait_until(SOON, || server.received.lock().unwrap().ends_with(b"two")),
            "the request was not delivered"
        );
        // One-shot, and only that connection.
        assert_eq!(ask(&mut connect(&proxy), b"two"), Ok(b"two".to_vec()));
    }

    #[test]
    fn an_answered_request_never_reaches_the_server_and_its_connection_closes() {
        let (server, proxy, mut stream) = echo_through_proxy();
        let answered = proxy.answer_instead(b"busy", b"NO", 1);
        assert_eq!(ask(&mut stream, b"one"), Ok(b"one".to_vec()));
        stream.write_all(b"busy?").unwrap();
        let mut reply = Vec::new();
        stream.set_read_timeout(Some(SOON)).unwrap();
        stream
            .read_to_end(&mut reply)
            .expect("the answer, then the close");
        assert_eq!(reply, b"NO");
        assert!(answered.fired().is_some());
        assert_eq!(*server.received.lock().unwrap(), b"one");
        // One request per armed answer: the next one goes through.
        assert_eq!(ask(&mut connect(&proxy), b"busy!"), Ok(b"busy!".to_vec()));
    }
}
