//! Fault drills for the networked backends (Redis, etcd, PostgreSQL), through the fault proxy of
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
//!
//! Every command run here is the same critical section: when it starts it records its token, its
//! granted TTL and its pid, and checks that no other drill command is still alive (a violation is
//! written to `overlaps`, which must stay empty). The lockruns under test go through the proxy;
//! the witnesses (a second holder, `status`) talk to the server directly. Time bounds are safety
//! bounds only ("dead before the lease could have expired"), plus generous liveness bounds.
//!
//! The proxy's own faults are checked too, against a local echo server, so that no drill passes
//! because a fault silently did nothing.

mod common;
mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{Drive, alive, code, lockrun, text, wait_exit, wait_for_file, wait_until};
use support::etcd_cluster::EtcdCluster;
use support::postgres_server::PgServer;
use support::proxy::{Direction, Proxy};
use support::redis_server::RedisServer;
use support::world::{Holder, SOON, Server, World};

/// The lease every drill asks for (etcd's minimum with its default timing).
const TTL: &str = "2s";
/// Liveness slack: a waiter's re-check, process start-up, a loaded machine.
const SLACK: Duration = Duration::from_secs(3);

/// What a drill needs to know about one backend.
trait Rig: Server + Sized {
    /// The backend URL that goes through a proxy listening on `port`.
    fn via(&self, port: u16) -> String;
    /// The port the proxy forwards to.
    fn upstream(&self) -> u16;
    /// Readies the server so that each request a drill targets is sent as itself (scripts cached,
    /// schema created), through the direct URL.
    fn warm_up(_w: &World<Self>) {}
    /// Bytes that appear in the request that takes the lock, and in no request before it.
    fn acquire_request(w: &World<Self>, name: &str) -> Vec<u8>;
    /// Bytes that appear in `holder`'s renewals and in nothing else it sends while it holds.
    fn renew_request(w: &World<Self>, name: &str, holder: &Holder) -> Vec<u8>;
    /// Bytes that appear in `holder`'s release (and, where `RELEASE_IS_RENEWAL`, its renewals).
    fn release_request(w: &World<Self>, name: &str, holder: &Holder) -> Vec<u8>;
    /// The release cannot be told from a renewal on the wire: arm right after a renewal.
    const RELEASE_IS_RENEWAL: bool = false;
    /// How long to hold the acquiring request back, so that what was sent just before it (etcd's
    /// lease grant) is applied first.
    const ACQUIRE_HOLD: Duration = Duration::ZERO;
}

impl Rig for RedisServer {
    fn via(&self, port: u16) -> String {
        format!("redis://127.0.0.1:{port}")
    }

    fn upstream(&self) -> u16 {
        self.port()
    }

    fn warm_up(w: &World<Self>) {
        for script in [ACQUIRE_LUA, RENEW_LUA, RELEASE_LUA] {
            redis_script(&w.server, script);
        }
    }

    fn acquire_request(w: &World<Self>, _name: &str) -> Vec<u8> {
        redis_script(&w.server, ACQUIRE_LUA)
    }

    fn renew_request(w: &World<Self>, _name: &str, _holder: &Holder) -> Vec<u8> {
        redis_script(&w.server, RENEW_LUA)
    }

    fn release_request(w: &World<Self>, _name: &str, _holder: &Holder) -> Vec<u8> {
        redis_script(&w.server, RELEASE_LUA)
    }
}

const ACQUIRE_LUA: &str = include_str!("../src/backend/redis/lua/acquire.lua");
const RENEW_LUA: &str = include_str!("../src/backend/redis/lua/renew.lua");
const RELEASE_LUA: &str = include_str!("../src/backend/redis/lua/release.lua");

/// Loads `script` into the server's cache (so lockrun's `EVALSHA` is answered, not refused with
/// `NOSCRIPT`) and returns its SHA-1, which every invocation carries.
fn redis_script(server: &RedisServer, script: &str) -> Vec<u8> {
    let out = server.cli(&["SCRIPT", "LOAD", script]);
    let sha = text(&out.stdout).trim().to_owned();
    assert_eq!(sha.len(), 40, "SCRIPT LOAD failed: {}", text(&out.stderr));
    sha.into_bytes()
}

impl Rig for PgServer {
    fn via(&self, port: u16) -> String {
        self.url_on(port)
    }

    fn upstream(&self) -> u16 {
        self.port()
    }

    fn warm_up(w: &World<Self>) {
        // Creates the schema: the first statement on a fresh server fails for want of it.
        let out = w.run(["--name", "warm-up", "--", "true"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }

    // Statements travel with their text (one round trip); only a waiter's repeated tries and
    // looks are prepared, once an answer showed the connection reaches the server directly —
    // after the first try, which is the one the drills lose.
    fn acquire_request(_w: &World<Self>, _name: &str) -> Vec<u8> {
        b"\"lockrun\".acquire_v2($1".to_vec()
    }

    fn renew_request(_w: &World<Self>, _name: &str, _holder: &Holder) -> Vec<u8> {
        b"UPDATE \"lockrun\".leases SET expires_at".to_vec()
    }

    fn release_request(_w: &World<Self>, _name: &str, _holder: &Holder) -> Vec<u8> {
        b"\"lockrun\".release_v2($1".to_vec()
    }
}

impl Rig for EtcdCluster {
    fn via(&self, port: u16) -> String {
        format!("etcd://127.0.0.1:{port}")
    }

    fn upstream(&self) -> u16 {
        self.client_port(0)
    }

    /// The join transaction carries the holder key in clear.
    fn acquire_request(_w: &World<Self>, name: &str) -> Vec<u8> {
        format!("lockrun/{name}/#holders/").into_bytes()
    }

    fn renew_request(w: &World<Self>, name: &str, holder: &Holder) -> Vec<u8> {
        lease_message(etcd_lease(&w.server, name, holder.token))
    }

    fn release_request(w: &World<Self>, name: &str, holder: &Holder) -> Vec<u8> {
        lease_message(etcd_lease(&w.server, name, holder.token))
    }

    const RELEASE_IS_RENEWAL: bool = true;
    /// The grant and the join are sent together; a join that the server sees first fails.
    const ACQUIRE_HOLD: Duration = Duration::from_millis(500);
}

/// The lease of the holder key of `name` whose create revision (the token) is `token`.
fn etcd_lease(cluster: &EtcdCluster, name: &str, token: u64) -> u64 {
    let prefix = format!("lockrun/{name}/#holders/");
    let out = cluster.etcdctl(&["get", "--prefix", &prefix, "-w", "json"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("etcdctl get failed: {}", text(&out.stderr)));
    got["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|kv| kv["create_revision"].as_u64() == Some(token))
        .and_then(|kv| kv["lease"].as_u64())
        .unwrap_or_else(|| panic!("no holder key with token {token}: {got}"))
}

/// A gRPC message (uncompressed flag, length) holding `LeaseKeepAliveRequest` — or, alike,
/// `LeaseRevokeRequest` — for lease `id`: field 1, a varint.
fn lease_message(id: u64) -> Vec<u8> {
    let mut body = vec![0x08];
    let mut rest = id;
    loop {
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            body.push(byte);
            break;
        }
        body.push(byte | 0x80);
    }
    let mut message = vec![0];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes());
    message.extend_from_slice(&body);
    message
}

/// The critical section every drill command runs: records its token, granted TTL and pid, and
/// reports (to `overlaps`) any other drill command still alive when it starts.
fn critical(tag: &str) -> String {
    format!(
        "echo $FENCING_TOKEN > {tag}.token; echo $LOCKRUN_TTL_MS > {tag}.ttl; \
         for f in *.pid; do [ -e \"$f\" ] || continue; p=$(cat \"$f\"); \
         s=$(cut -d' ' -f2,3 \"/proc/$p/stat\" 2>/dev/null); \
         case \"$s\" in ''|'(sh) Z') ;; '(sh) '*) echo \"{tag} started while $f ran\" >> overlaps;; esac; \
         done; \
         echo $$ > {tag}.pid; while [ ! -e {tag}.release ]; do sleep 0.02; done"
    )
}

/// Starts a holder of `name` through `url` (the proxy), and waits until its command runs.
fn hold_via<S>(w: &mut World<S>, url: &str, name: &str, tag: &str, extra: &[&str]) -> Holder {
    let direct = std::mem::replace(&mut w.url, url.to_owned());
    let args = [&["--ttl", TTL], extra].concat();
    let holder = w.hold_running(name, tag, &args, &critical(tag));
    w.url = direct;
    holder
}

/// The lease the backend granted to the command tagged `tag`.
fn granted<S>(w: &World<S>, tag: &str) -> Duration {
    let ms = wait_for_file(&w.path(&format!("{tag}.ttl")), SOON);
    Duration::from_millis(ms.trim().parse().expect("LOCKRUN_TTL_MS is a number"))
}

/// Whatever the commands found when they started: empty when no two ever ran at once.
fn overlaps<S>(w: &World<S>) -> String {
    std::fs::read_to_string(w.path("overlaps")).unwrap_or_default()
}

/// A lockrun started in the background that may or may not get to run its command.
struct Run {
    process: Child,
    dir: PathBuf,
    tag: String,
}

impl Run {
    /// `lockrun --backend URL --name NAME --ttl TTL ARGS -- <critical section>`.
    fn start<S>(w: &World<S>, url: &str, name: &str, tag: &str, args: &[&str]) -> Self {
        let process = lockrun()
            .args(["--backend", url, "--name", name, "--ttl", TTL])
            .args(args)
            .args(["--", "sh", "-c", &critical(tag)])
            .current_dir(w.dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockrun");
        Run {
            process,
            dir: w.dir().to_owned(),
            tag: tag.to_owned(),
        }
    }

    fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.tag))
    }

    fn read(&self, suffix: &str) -> Option<String> {
        let contents = std::fs::read_to_string(self.file(suffix)).ok()?;
        let contents = contents.trim();
        (!contents.is_empty()).then(|| contents.to_owned())
    }

    /// Whether its command has started (it writes its pid last).
    fn started(&self) -> bool {
        self.read("pid").is_some()
    }

    fn token(&self) -> u64 {
        self.read("token")
            .expect("the command ran")
            .parse()
            .expect("token is a number")
    }

    fn child_pid(&self) -> Option<i32> {
        self.read("pid").and_then(|p| p.parse().ok())
    }

    /// Lets its command end (if it runs or ever will), and waits for lockrun to exit.
    fn finish(&mut self) -> Output {
        std::fs::write(self.file("release"), "").expect("write release file");
        wait_exit(&mut self.process, SOON)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(pid) = self.child_pid() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A fresh server with the proxy in front of it; the world's own URL stays the direct one.
fn rig<S: Rig>() -> (World<S>, Proxy, String) {
    let w = World::<S>::new();
    S::warm_up(&w);
    let proxy = Proxy::start(w.server.upstream());
    let via = w.server.via(proxy.port());
    (w, proxy, via)
}

/// Waits until `deadline`; true if `condition` held before it.
fn wait_before(deadline: Instant, condition: impl FnMut() -> bool) -> bool {
    wait_until(
        deadline.saturating_duration_since(Instant::now()),
        condition,
    )
}

/// Watches `holder`'s command whose lease was last confirmed by a request sent before
/// `confirmed_before` (so the lease is proven until `confirmed_before + ttl` at most): it must be
/// dead before that point and lockrun must exit 76 — or, if it still runs a little after it, its
/// lease was confirmed again, it is still the holder, and it completes normally. Returns which.
fn stopped_early_or_confirmed<S>(
    w: &World<S>,
    name: &str,
    holder: &mut Holder,
    confirmed_before: Instant,
    ttl: Duration,
) -> &'static str {
    let bound = confirmed_before + ttl;
    let pid = holder.child_pid;
    let dead = wait_before(bound + Duration::from_millis(500), || !alive(pid));
    if dead {
        let seen_dead = Instant::now();
        assert!(
            seen_dead < bound,
            "the command outlived the lease it could not confirm by {:?}",
            seen_dead - bound
        );
        let out = wait_exit(&mut holder.process, SOON);
        assert_eq!(code(&out), 76, "{}", text(&out.stderr));
        return "stopped early, exit 76";
    }
    // Still running past every unconfirmed expiry: a renewal must have been confirmed since.
    let status = w.status(name);
    assert_eq!(
        status["holders"][0]["token"], holder.token,
        "the command runs, but the backend shows another holder: {status}"
    );
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    "renewal retried and confirmed, exit 0"
}

/// Lost ack of the acquisition: the request that takes the lock is applied, its answer never
/// comes. Meanwhile a second run waits for the lock. Nobody may run alongside a holder, and the
/// ghost holder the lost answer left behind must be gone within one TTL.
fn lost_ack_of_acquire<S: Rig>() {
    let (w, proxy, via) = rig::<S>();
    // The drill counts only when the lost request was applied: the backend then shows A's lockrun
    // as the holder although A never heard so (a ghost). etcd sends the lease grant and the join
    // together, and a join that reaches the server first fails for want of the lease: the join is
    // held back a little, and should a try still apply nothing, it is made again on a fresh name.
    let mut tries = 0;
    let (name, mut a, lost_at) = loop {
        tries += 1;
        let name = format!("acquire-{tries}");
        let pattern = S::acquire_request(&w, &name);
        if !S::ACQUIRE_HOLD.is_zero() {
            proxy.hold_request(&pattern, S::ACQUIRE_HOLD);
        }
        let lost = proxy.lose_reply_to(&pattern);
        let a = Run::start(&w, &via, &name, &format!("a{tries}"), &["--wait", "20s"]);
        let lost_at = lost
            .wait(SOON)
            .expect("the acquire request never went through");
        let pid = a.process.id();
        let ghost = wait_until(S::ACQUIRE_HOLD + Duration::from_secs(1), || {
            w.status(&name)["holders"][0]["pid"] == pid
        });
        if ghost {
            break (name, a, lost_at);
        }
        assert!(tries < 10, "no lost acquire was applied in {tries} tries");
    };
    let name = name.as_str();
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    let ttl = Duration::from_secs(2);
    let someone = wait_before(lost_at + ttl + SLACK, || a.started() || b.started());
    assert!(
        someone,
        "nobody held the lock within one TTL of the lost ack: a ghost holder stayed; {}",
        w.status(name)
    );
    let mut outcome = format!("ghost on try {tries}; ");
    if a.started() {
        // A confirmed its acquisition after all: it is the one holder.
        let out = a.finish();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        outcome.push_str("A retried and held (exit 0); ");
    }
    assert!(
        wait_until(SOON, || b.started()),
        "the waiter never got the lock"
    );
    outcome.push_str(&format!(
        "B held {:?} after the lost ack",
        lost_at.elapsed()
    ));
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    if !a.started() {
        let out = a.finish();
        assert!(
            a.started() && code(&out) == 0 || code(&out) == 69,
            "A: exit {}: {}",
            code(&out),
            text(&out.stderr)
        );
        outcome = format!("A exit {}; {outcome}", code(&out));
    }
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!("drill outcome: {outcome}");
}

/// Lost ack of a renewal: the deadline must not move on the strength of an unconfirmed renewal.
fn lost_ack_of_renewal<S: Rig>() {
    let (mut w, proxy, via) = rig::<S>();
    let name = "renew";
    // Default timings: a renewal whose answer is lost uses up its timeout and is retried at once,
    // which still fits before the stop point; stopping early instead would also be correct.
    let mut a = hold_via(&mut w, &via, name, "a", &[]);
    let ttl = granted(&w, "a");
    let lost = proxy.lose_reply_to(&S::renew_request(&w, name, &a));
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    // Every renewal confirmed so far was sent before this one.
    let lost_at = lost.wait(ttl).expect("no renewal within a TTL");
    let outcome = stopped_early_or_confirmed(&w, name, &mut a, lost_at, ttl);
    assert!(
        wait_until(SOON, || b.started()),
        "the waiter never got the lock"
    );
    assert!(b.token() > a.token);
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!("drill outcome: {outcome}");
}

/// Lost ack of the release: the release is applied but unanswered. The lock frees by the TTL at
/// the latest, and the next holder keeps its lease until it ends.
fn lost_ack_of_release<S: Rig>() {
    let (mut w, proxy, via) = rig::<S>();
    let name = "release";
    let mut a = hold_via(&mut w, &via, name, "a", &[]);
    let ttl = granted(&w, "a");
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    w.wait_waiters(name, 1);
    let pattern = S::release_request(&w, name, &a);
    if S::RELEASE_IS_RENEWAL {
        // A renewal just went by; the next is a renewal interval away, the release is at once.
        let renewed = proxy.observe(&pattern);
        assert!(renewed.wait(ttl).is_some(), "no renewal within a TTL");
    }
    let lost = proxy.lose_reply_to(&pattern);
    std::fs::write(w.path("a.release"), "").expect("write release file");
    let lost_at = lost.wait(SOON).expect("the release never went through");
    let freed = wait_before(lost_at + ttl + SLACK, || b.started());
    assert!(freed, "the lock was not free one TTL after the release");
    let held_after = lost_at.elapsed();
    // A's command ended normally; the unanswered release is only worth a warning.
    let out = a.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(b.token() > a.token);
    keeps_holding(&w, name, b.token());
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!("drill outcome: B held {held_after:?} after the unanswered release, kept it");
}

/// A stale release: the holder's release reaches the server only after its lease expired and
/// another run took the lock. It must not remove the new holder.
fn late_release<S: Rig>() {
    let (mut w, proxy, via) = rig::<S>();
    let name = "late";
    let mut a = hold_via(&mut w, &via, name, "a", &[]);
    let ttl = granted(&w, "a");
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    w.wait_waiters(name, 1);
    if S::RELEASE_IS_RENEWAL {
        // Right after a renewal, so that the release is the next such request A sends.
        let renewed = proxy.observe(&S::renew_request(&w, name, &a));
        assert!(renewed.wait(ttl).is_some(), "no renewal within a TTL");
    }
    // The release reaches the server a second after A's lease could have expired.
    let pattern = S::release_request(&w, name, &a);
    let released = proxy.hold_request(&pattern, ttl + Duration::from_secs(1));
    let delayed_at = Instant::now();
    std::fs::write(w.path("a.release"), "").expect("write release file");
    // A's lease was last confirmed before this point: it frees by the TTL at the latest.
    let freed = wait_before(delayed_at + ttl + SLACK, || b.started());
    assert!(
        freed,
        "the lock was not free one TTL after the last renewal"
    );
    let held_after = delayed_at.elapsed();
    let out = a.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        released.fired().is_some(),
        "A sent no release through the proxy"
    );
    assert!(b.token() > a.token);
    assert!(
        proxy.wait_drained(SOON),
        "the late release was never delivered"
    );
    keeps_holding(&w, name, b.token());
    let out = b.finish();
    assert_eq!(
        code(&out),
        0,
        "the new holder lost its lease: {}",
        text(&out.stderr)
    );
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!(
        "drill outcome: B held {held_after:?} after the release was sent; \
         the release arrived late and B kept the lock"
    );
}

/// A link delayed by half the TTL each way: renewals cannot be confirmed in time, so the command
/// must be stopped before its last confirmed lease could expire (or, should a renewal be
/// confirmed, run on as the holder).
fn half_ttl_delay<S: Rig>() {
    let (mut w, proxy, via) = rig::<S>();
    let name = "delay";
    let mut a = hold_via(&mut w, &via, name, "a", &[]);
    let ttl = granted(&w, "a");
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    w.wait_waiters(name, 1);
    proxy.delay(ttl / 2);
    // Nothing sent from here on can be confirmed sooner than a TTL after it was sent.
    let delayed_at = Instant::now();
    let outcome = stopped_early_or_confirmed(&w, name, &mut a, delayed_at, ttl);
    assert!(
        wait_until(SOON + ttl, || b.started()),
        "the waiter never got the lock"
    );
    assert!(b.token() > a.token);
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!("drill outcome: {outcome}");
}

/// Every connection reset (RST) under a holder, and new ones refused for a moment: the holder
/// reconnects and rides through, or is stopped before its last confirmed lease could expire.
fn reset_under_a_holder<S: Rig>() {
    let (mut w, proxy, via) = rig::<S>();
    let name = "reset";
    let mut a = hold_via(&mut w, &via, name, "a", &[]);
    let ttl = granted(&w, "a");
    let mut b = Run::start(&w, &w.url, name, "b", &["--wait", "30s"]);
    w.wait_waiters(name, 1);
    let open = proxy.connections();
    proxy.reset();
    let reset_at = Instant::now();
    assert!(
        wait_until(SOON, || proxy.connections() == 0),
        "{open} connection(s) survived the reset"
    );
    std::thread::sleep(ttl / 8);
    proxy.heal();
    let outcome = stopped_early_or_confirmed(&w, name, &mut a, reset_at, ttl);
    assert!(
        wait_until(SOON + ttl, || b.started()),
        "the waiter never got the lock"
    );
    assert!(b.token() > a.token);
    let out = b.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(overlaps(&w), "", "two holders ran at once");
    eprintln!("drill outcome: {outcome}");
}

/// `token` stays the one holder of `name` for a while (a few renewals of the new holder and time
/// for anything still in flight to land), as the backend itself says.
fn keeps_holding<S>(w: &World<S>, name: &str, token: u64) {
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

macro_rules! drills {
    ($module:ident, $server:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn lost_ack_of_acquire_leaves_one_holder_and_no_ghost() {
                lost_ack_of_acquire::<$server>();
            }

            #[test]
            fn lost_ack_of_renewal_stops_early_or_is_confirmed() {
                lost_ack_of_renewal::<$server>();
            }

            #[test]
            fn lost_ack_of_release_frees_the_lock_and_spares_the_next_holder() {
                lost_ack_of_release::<$server>();
            }

            #[test]
            fn late_release_never_removes_the_next_holder() {
                late_release::<$server>();
            }

            #[test]
            fn half_ttl_delay_stops_the_command_early_never_late() {
                half_ttl_delay::<$server>();
            }

            #[test]
            fn reset_connections_are_ridden_through_or_stop_the_command_early() {
                reset_under_a_holder::<$server>();
            }
        }
    };
}

drills!(on_redis, RedisServer);
drills!(on_etcd, EtcdCluster);
drills!(on_postgres, PgServer);

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
        let server = echo();
        let proxy = Proxy::start(server.port);
        let mut stream = connect(&proxy);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
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
        let server = echo();
        let proxy = Proxy::start(server.port);
        let mut stream = connect(&proxy);
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
        let server = echo();
        let proxy = Proxy::start(server.port);
        let mut stream = connect(&proxy);
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
        let server = echo();
        let proxy = Proxy::start(server.port);
        let mut stream = connect(&proxy);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
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
        let server = echo();
        let proxy = Proxy::start(server.port);
        let mut stream = connect(&proxy);
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
}
