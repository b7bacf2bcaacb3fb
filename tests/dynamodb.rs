//! What only the `dynamodb://` backend has: the clock-free takeover (a holder paused past its
//! lease is taken over only once a waiter has seen its record version unchanged for a whole
//! lease, never while it renews), the table created on first use (also by several lockruns at
//! once) or refused with `create=false`, tokens that keep rising across a server restart, and
//! throttling (HTTP 400 `ThrottlingException`, injected by the fault proxy) retried within the
//! request's deadline. Everything it shares with the other backends is in the conformance suite.

use std::time::{Duration, Instant, SystemTime};

use crate::support::asserts::assert_one_line;
use crate::support::backend_scenarios::run_six_first_uses_at_once;
use crate::support::dynalite_server::{Dynalite, TABLE};
use crate::support::fixture::{Fixture, Reachable};
use crate::support::holder::Holder;
use crate::support::lockrun::output;
use crate::support::proxy::Proxy;
use crate::support::scene::Scene;
use crate::support::wait::{SOON, code, numbers_in, text, value_in, wait_until};

/// A server whose table a first run created, a scene on it, and a fault proxy in front of it with
/// the URL through the proxy.
fn warmed_up_behind_a_proxy() -> (Dynalite, Scene, Proxy, String) {
    let server = Dynalite::start();
    let s = Scene::new(server.url());
    let out = s.run(["--name", "warm", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let (proxy, via) = server.proxied().expect("a proxy");
    (server, s, proxy, via)
}

/// The lease the tests ask for, and the renewal interval lockrun derives from it.
const TTL: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_millis(667);

/// DynamoDB's answer to a request over its throughput, as the service sends it.
fn throttling() -> Vec<u8> {
    let body = "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ThrottlingException\",\
                \"message\":\"Rate of requests exceeds the allowed throughput.\"}";
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\n\
         x-amzn-RequestId: LOCKRUNTESTTHROTTLE\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The record version of `name`'s slot 0, as stored.
fn rvn(server: &Dynalite, name: &str) -> String {
    server.lock_item(name)["h_x0"]["M"]["v"]["S"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Guards against a takeover decided by a clock rather than by watching: while the holder renews
/// (its record version changes at each renewal) a waiter never takes over, however long it
/// waits; once the holder is frozen, the waiter takes over no sooner than a whole lease after it
/// could first have seen the last version, and not much later; the frozen holder, thawed, is
/// stopped (exit 76) and the new token is higher.
#[test]
fn a_paused_holder_is_taken_over_only_after_a_whole_unchanged_lease() {
    let server = Dynalite::start();
    let s = Scene::new(server.url());
    let cmd = s.holder_cmd(s.url(), "vm", &["--ttl", "2s"]);
    let mut stale = Holder::spawn_in_own_group(cmd, s.dir(), "a").started();
    let first = rvn(&server, "vm");
    assert!(
        wait_until(SOON, || rvn(&server, "vm") != first),
        "the record version never changed: renewals do not rewrite it"
    );
    let waiting = s.waiter("vm", &["--ttl", "2s"], "date +%s.%N > b.ran");
    s.wait_waiters("vm", 1);
    // Two leases of renewals: the waiter must not take over.
    std::thread::sleep(TTL * 2);
    assert!(
        !s.path("b.ran").exists(),
        "a waiter took over a holder that kept renewing"
    );
    stale.freeze();
    let frozen = SystemTime::now();
    let mut waiting = waiting;
    let out = waiting.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let ran: f64 = value_in(&s.path("b.ran"));
    let frozen: f64 = frozen
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // The last renewal before the freeze was sent at most one renewal interval before it, and
    // the waiter saw its version at the earliest then.
    let after = Duration::from_secs_f64((ran - frozen).max(0.0));
    assert!(
        after + RENEW >= TTL,
        "taken over {after:?} after the freeze: less than a lease after the last renewal"
    );
    assert!(
        after <= TTL + Duration::from_millis(1500),
        "taken over only {after:?} after the freeze"
    );
    stale.thaw();
    let out = stale.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(s.overlaps().is_empty(), "{}", s.overlaps());
}

/// Guards against a table that must exist beforehand: the first run creates it (on-demand
/// capacity, one string key `pk`), six lockruns doing so at once all succeed without a word, and
/// with `create=false` a missing table is refused (exit 69) naming it, and is not created — by
/// `status`, `list` and `release --force` too, which must not answer "free" from a table that
/// is not there.
#[test]
fn the_table_is_created_on_first_use_unless_create_false() {
    let server = Dynalite::start();
    let refused = Scene::new(format!("{}&create=false", server.url()));
    let line = refused.refuses(refused.url(), "x", 69, TABLE);
    assert!(line.contains("does not exist"), "{line}");
    for look in [
        &["status", "x"][..],
        &["status", "x", "--json"],
        &["list"],
        &["release", "x", "--force"],
    ] {
        let out = refused.run(look);
        let line = assert_one_line(&out, 69, TABLE);
        assert!(line.contains("does not exist"), "{look:?}: {line}");
    }
    let tables = server.call("ListTables", &serde_json::json!({}));
    assert_eq!(tables["TableNames"], serde_json::json!([]), "{tables}");

    run_six_first_uses_at_once(&Scene::new(server.url()));
    let table =
        server.call("DescribeTable", &serde_json::json!({"TableName": TABLE}))["Table"].clone();
    assert_eq!(table["KeySchema"][0]["AttributeName"], "pk", "{table}");
    assert_eq!(
        table["AttributeDefinitions"][0]["AttributeType"], "S",
        "{table}"
    );
    assert_eq!(
        table["BillingModeSummary"]["BillingMode"], "PAY_PER_REQUEST",
        "{table}"
    );
    let out = refused.run(["--name", "x", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "create=false with the table there: {}",
        text(&out.stderr)
    );
}

/// Guards against an AWS set-up mistake worded as an outage: with no credentials anywhere in the
/// chain the run is refused (69) saying so, not "cannot reach", and a table of someone else's
/// (another key) is named, not reported as the service's raw "key element does not match".
/// Nothing runs either way.
#[test]
fn missing_credentials_and_a_foreign_table_are_named() {
    let server = Dynalite::start();
    let s = Scene::new(server.url());
    let mut cmd = s.cmd(["--name", "x", "--", "touch", "ran"]);
    cmd.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    let said = assert_one_line(&output(&mut cmd), 69, "no AWS credentials");
    assert!(!said.contains("cannot reach"), "{said}");
    assert!(!s.path("ran").exists());

    server.call(
        "CreateTable",
        &serde_json::json!({
            "TableName": "orders",
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        }),
    );
    let foreign = server.url().replacen(TABLE, "orders", 1);
    assert!(foreign.contains("dynamodb://orders?"), "{foreign}");
    let line = s.refuses(&foreign, "x", 69, "table orders is not lockrun's");
    assert!(line.contains("string partition key named pk"), "{line}");
}

/// Guards against tokens that start over when the server restarts: they keep rising, the stored
/// counter is the last one given, and a holder rides a quick restart through.
#[test]
fn tokens_keep_rising_across_a_server_restart() {
    let mut server = Dynalite::start();
    let s = Scene::new(server.url());
    let run = |s: &Scene| {
        let out = s.run([
            "--name",
            "boot",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN >> tokens",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    };
    run(&s);
    run(&s);
    server.restart(false);
    run(&s);
    let tokens = numbers_in(&s.path("tokens"));
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    match server.counter("boot") {
        crate::support::fixture::Counter::Exact(stored) => assert_eq!(Some(&stored), tokens.last()),
        crate::support::fixture::Counter::AtLeast(_) => unreachable!("dynamodb counts exactly"),
    }
}

/// Guards a waiter's stderr through an outage: it retries about every 100 ms, and each failed
/// retry printed the same "retrying" line, some 80 of them before it gave up. It must say so at
/// most about once a second over its ten seconds of trying, then give up with 69.
#[test]
fn a_waiter_riding_out_an_outage_says_so_once_a_second() {
    let mut server = Dynalite::start();
    let s = Scene::new(server.url());
    let mut holder = s.hold("outage", "h", &["--ttl", "8s"]);
    let mut waiter = s.waiter("outage", &["--progress", "0"], "touch ran");
    // In line once its first try was answered (a waiter shows in `status` only once it has a
    // ticket of its own); a failure before any answer would be final, not an outage.
    std::thread::sleep(Duration::from_secs(1));
    server.kill();
    let out = waiter.wait(Duration::from_secs(40));
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 69, "{stderr}");
    let retries = stderr.lines().filter(|l| l.contains("retrying")).count();
    assert!(
        (1..=13).contains(&retries),
        "{retries} retry lines:\n{stderr}"
    );
    assert!(!s.path("ran").exists());
    assert_eq!(code(&holder.exit()), 76);
}

/// Guards against throttling taken for an outage: an acquisition whose first writes are
/// throttled (HTTP 400 `ThrottlingException`) is retried with the SDK's backoff and succeeds
/// within the request's own deadline; renewals throttled twice in a row are retried within the
/// renewal's deadline and the command runs on.
#[test]
fn throttled_requests_are_retried_within_the_deadline() {
    let (_server, s, proxy, via) = warmed_up_behind_a_proxy();

    let throttled = proxy.answer_instead(b"UpdateItem", &throttling(), 3);
    let started = Instant::now();
    let out = crate::support::lockrun::output(&mut s.cmd_via(
        &via,
        [
            "--name",
            "busy",
            "-vv",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN > t",
        ],
    ));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        throttled.fired().is_some(),
        "the throttling answers were not all used"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the throttled acquisition took {:?}",
        started.elapsed()
    );

    let mut holder = s.hold_via(&via, "held", "h", &["--ttl", "2s", "-vv"]);
    let before = holder.renewals().len();
    assert!(
        wait_until(TTL, || holder.renewals().len() > before),
        "no renewal"
    );
    let throttled = proxy.answer_instead(b"UpdateItem", &throttling(), 2);
    assert!(
        throttled.wait(TTL * 2).is_some(),
        "no renewal was throttled"
    );
    let after = holder.renewals().len();
    assert!(
        wait_until(TTL, || holder.renewals().len() > after),
        "no renewal after the throttling"
    );
    assert!(holder.running(), "the holder stopped on throttling");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards against throttling that never ends being ridden out past the lease: every renewal
/// refused, the command is stopped before the lease could expire and lockrun exits 76; at
/// start, a name that stays throttled is a failing backend (exit 69) reported within seconds.
#[test]
fn endless_throttling_stops_the_holder_and_fails_a_start() {
    let (_server, s, proxy, via) = warmed_up_behind_a_proxy();
    let mut holder = s.hold_via(&via, "held", "h", &["--ttl", "2s"]);
    proxy.answer_instead(b"UpdateItem", &throttling(), 10_000);
    let throttled = Instant::now();
    assert!(
        wait_until(TTL + Duration::from_secs(1), || !holder.command_alive()),
        "the command ran on with every renewal throttled"
    );
    assert!(
        throttled.elapsed() < TTL,
        "stopped only after {:?}",
        throttled.elapsed()
    );
    let out = holder.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));

    let started = Instant::now();
    let out = crate::support::lockrun::output(
        &mut s.cmd_via(&via, ["--name", "other", "--", "touch", "ran"]),
    );
    let line = assert_one_line(&out, 69, "ThrottlingException");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}: {line}",
        started.elapsed()
    );
    assert!(!s.path("ran").exists());
}
