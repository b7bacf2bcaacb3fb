//! What only the `postgres://` backend has: its schema (created once under concurrent first use,
//! waited for when another lockrun is slow creating it, chosen by `lockrun_schema=`, migrated in place from version 1, refused to a second user with
//! the fix named), TLS, a restart ridden through, one connection per lockrun, a full server
//! waited out, and the fenced-write example rejecting a stale holder in the database itself. Everything it shares with the other backends
//! is in the conformance suite.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::asserts::{assert_hidden, assert_one_line, assert_said};
use crate::support::backend_scenarios::{
    assert_a_brief_restart_is_ridden_through, assert_a_first_use_waits_for_a_slow_creator,
    assert_a_turned_away_waiter_gets_in, run_six_first_uses_at_once,
};
use crate::support::fixture::{Fixture, Reachable};
use crate::support::holder::Holder;
use crate::support::lockrun::{Proc, output};
use crate::support::postgres_server::PgServer;
use crate::support::scene::Scene;
use crate::support::single_server::SingleServer;
use crate::support::tools;
use crate::support::wait::{SOON, alive, code, number_in, text, wait_for_file, wait_until};

#[test]
fn concurrent_first_use_creates_the_schema_once_without_errors() {
    let server = PgServer::start();
    run_six_first_uses_at_once(&Scene::new(server.url()));
    assert_eq!(
        server.sql("SELECT count(*) FROM pg_namespace WHERE nspname = 'lockrun'"),
        "1"
    );
    assert_eq!(server.sql("SELECT count(*) FROM lockrun.names"), "3");
}

/// The advisory lock under which lockrun creates its schema `lockrun` (its key is the FNV-1a hash
/// of `lockrun schema lockrun`, as a signed 64-bit number).
fn schema_lock() -> i64 {
    let hash = "lockrun schema lockrun"
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// A first use that finds another lockrun still creating the schema (here: holding its lock for
/// longer than a request may take) waits for it quietly and then runs: creating the schema has a
/// budget of its own, not a request's few seconds.
#[test]
fn a_first_use_waits_for_a_slow_creation_of_the_schema() {
    const HELD: Duration = Duration::from_secs(7);
    let server = PgServer::start();
    let s = Scene::new(server.url());
    let key = schema_lock();
    let creator = server
        .psql_command(&format!(
            "SELECT pg_advisory_lock({key}); SELECT pg_sleep({});",
            HELD.as_secs()
        ))
        .spawn()
        .expect("run psql");
    let held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted";
    assert!(
        wait_until(SOON, || server.sql(held) == "1"),
        "psql never took the schema's lock"
    );
    assert_a_first_use_waits_for_a_slow_creator(&s, creator, HELD);
}

#[test]
fn the_schema_can_be_chosen_and_is_validated() {
    let server = PgServer::start();
    let chosen = Scene::new(format!(
        "{}?lockrun_schema=jobs_locks&application_name=x",
        server.url()
    ));
    let out = chosen.run(["--name", "s", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(server.sql("SELECT count(*) FROM jobs_locks.names"), "1");
    // A bad schema is a usage error, judged before connecting.
    let bad = format!("{}?lockrun_schema=Bad%22Name", server.url());
    chosen.refuses(&bad, "s", 64, "lockrun_schema");
}

/// A server that asks for a password a URL does not give (nor PGPASSWORD, nor a password file)
/// is a server's refusal, said as such, not an unreachable server.
#[test]
fn a_server_that_wants_a_password_the_url_lacks_says_so() {
    let server = PgServer::with_password("pw").expect("postgres has passwords");
    let bare = server.url().replace(":pw@", "@");
    assert_ne!(bare, server.url());
    let home = tempfile::tempdir().unwrap();
    let s = Scene::new(&bare);
    let out = output(
        s.cmd(["--name", "pw", "--", "touch", "ran"])
            .env("HOME", home.path())
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE"),
    );
    let line = assert_one_line(&out, 69, "asks for a password and none was given");
    assert!(!line.contains("cannot reach"), "{line}");
    assert!(!s.path("ran").exists());
}

#[test]
fn tls_is_used_and_verified_when_the_url_asks_for_it() {
    if !tools::openssl() {
        return;
    }
    let server = PgServer::with_tls();
    let verified = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        server.ca_file().display()
    );
    let s = Scene::new(verified);
    let mut holder = s.hold("tls", "h", &["--ttl", "2s"]);
    let encrypted = server.sql(
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE application_name = 'lockrun' AND ssl",
    );
    assert_ne!(encrypted, "0", "no lockrun connection uses TLS");
    assert_eq!(code(&holder.finish()), 0);
    // A certificate that the system's roots do not vouch for is refused.
    let unverified = format!("{}?sslmode=require", server.url());
    s.refuses(&unverified, "tls", 69, "certificate");
}

#[test]
fn a_brief_restart_is_ridden_through() {
    let mut server = PgServer::start();
    assert_a_brief_restart_is_ridden_through(&mut server, |server| {
        // The lease now ends more than a TTL after the server started.
        Box::new(|| {
            server.sql(
                "SELECT count(*) FROM lockrun.leases WHERE name = 'ride' \
                 AND expires_at - interval '4 s' > pg_postmaster_start_time()",
            ) == "1"
        })
    });
}

#[test]
fn paused_holder_is_fenced_off_by_the_database_and_exits_76() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    let fenced = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fenced-write.sh");
    let db = server.url();
    // A's command writes once `a.go` exists, then keeps running.
    let a_script = format!(
        "echo $FENCING_TOKEN > a.token; echo $$ > a.pid; \
         while [ ! -e a.go ]; do sleep 0.02; done; \
         {fenced} '{db}' from-a 2> a.err; echo $? > a.exit; \
         while :; do sleep 0.02; done"
    );
    let a = s.holder_cmd(s.url(), "drill", &["--ttl", "1s"]);
    let mut stale = Holder::spawn_running(a, s.dir(), "a", &a_script).started();
    stale.signal(Signal::SIGSTOP);
    // A's lease expires by the server's clock; B takes over with a higher token and writes.
    let b_script = format!(
        "echo $$ > b.pid; {fenced} '{db}' from-b 2> b.err && echo $FENCING_TOKEN > b.token; \
         while [ ! -e b.release ]; do sleep 0.02; done"
    );
    let b = s.holder_cmd(s.url(), "drill", &["--ttl", "2s", "--wait", "10s"]);
    let mut fresh = Holder::spawn_running(b, s.dir(), "b", &b_script).started();
    assert!(
        fresh.token() > stale.token(),
        "{} <= {}",
        fresh.token(),
        stale.token()
    );
    // A's command, still running while its lockrun is frozen, tries its write: the database
    // rejects it.
    std::fs::write(s.path("a.go"), "").unwrap();
    let exit = wait_for_file(&s.path("a.exit"), SOON);
    assert_eq!(
        exit,
        "3",
        "{}",
        std::fs::read_to_string(s.path("a.err")).unwrap_or_default()
    );
    assert_eq!(
        server.sql("SELECT value || ' ' || fence_token FROM fenced_demo WHERE id = 1"),
        format!("from-b {}", fresh.token())
    );
    // A wakes up: its command is stopped at once, and B's lease is untouched.
    stale.signal(Signal::SIGCONT);
    let pid = stale.child_pid();
    assert!(
        wait_until(Duration::from_secs(1), || !alive(pid)),
        "the stale command still runs"
    );
    let out = stale.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    let status = s.status("drill");
    assert_eq!(status["holders"][0]["token"], fresh.token(), "{status}");
    assert_eq!(code(&fresh.finish()), 0);
}

/// Version 1's schema, as the previous release created it (tables and its one function).
const V1_SCHEMA: &str = include_str!("support/postgres_v1_schema.sql");

#[test]
fn a_version_1_schema_is_migrated_in_place_and_older_lockruns_still_exclude() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    server.sql(V1_SCHEMA);
    server.sql(
        "INSERT INTO lockrun.names (name, token, max_limit) VALUES ('old', 41, 1);
         INSERT INTO lockrun.waiters (name, owner, ticket, beat_until)
             VALUES ('old', 'gone', 1, clock_timestamp() - interval '1 minute');",
    );
    let out = s.run([
        "--name",
        "old",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > old.token",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(number_in(&s.path("old.token")) > 41);
    assert_eq!(
        server.sql(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'lockrun' AND p.proname = 'acquire_v2'"
        ),
        "1"
    );
    // An older lockrun still running during the upgrade calls acquire_v1, or takes slot 0 with
    // its one-statement fast path: neither gets in beside a reader.
    let mut reader = s.hold("mixed", "r", &["--shared", "--ttl", "5s"]);
    let v1_try = "SELECT taken FROM lockrun.acquire_v1('mixed', 'v1owner', 5000, 1, '{}', 0)";
    assert_eq!(server.sql(v1_try), "f");
    server.sql(
        "INSERT INTO lockrun.leases (name, slot, owner, token, holder, expires_at) \
         VALUES ('mixed', 0, 'v1fast', 1, '{}', clock_timestamp() + interval '5 s') \
         ON CONFLICT (name, slot) DO NOTHING",
    );
    assert_eq!(
        server.sql("SELECT count(*) FROM lockrun.leases WHERE name = 'mixed' AND NOT shared"),
        "0"
    );
    assert_eq!(code(&reader.finish()), 0);
    assert_eq!(server.sql(v1_try), "t");
    let v1_token: u64 = server
        .sql("SELECT token FROM lockrun.leases WHERE name = 'mixed' AND owner = 'v1owner'")
        .parse()
        .unwrap();
    assert!(v1_token > reader.token());
}

#[test]
fn a_lockrun_holds_one_connection_whether_waiting_or_holding() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    let at = |tag: &str| format!("{}?application_name={tag}", server.url());
    let mut holder = s.hold_via(&at("lr_h"), "one", "h", &[]);
    let mut waiters: Vec<Proc> = (0..3)
        .map(|i| {
            let mode = if i == 2 { "--shared" } else { "--ttl=5s" };
            let mut cmd = s.cmd_via(
                &at(&format!("lr_w{i}")),
                [
                    "--name",
                    "one",
                    mode,
                    "--wait",
                    "30s",
                    "--progress",
                    "100ms",
                ],
            );
            cmd.args(["--", "sh", "-c", "while [ ! -e done ]; do sleep 0.02; done"]);
            Proc::spawn(&mut cmd)
        })
        .collect();
    s.wait_waiters("one", 3);
    let sample = |expected: usize| {
        for _ in 0..20 {
            let counts = server.sql(
                "SELECT application_name || '=' || count(*) FROM pg_stat_activity \
                 WHERE application_name LIKE 'lr\\_%' GROUP BY application_name ORDER BY 1",
            );
            let counts: Vec<&str> = counts.lines().collect();
            assert!(
                counts.iter().all(|c| c.ends_with("=1")),
                "a lockrun with more than one connection: {counts:?}"
            );
            assert_eq!(counts.len(), expected, "{counts:?}");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    sample(4);
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // The first waiter now holds (renewing, listening for a forced release), the others wait.
    s.wait_held("one", 1);
    sample(3);
    std::fs::write(s.path("done"), "").unwrap();
    for waiter in &mut waiters {
        let out = waiter.wait(SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
}

#[test]
fn a_full_server_is_waited_out_within_the_wait_and_fails_69_after_it() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    // One connection for the role: its holder takes it, so every other lockrun is turned away
    // with 53300 — which also shows that a holder needs no second connection.
    server
        .sql("CREATE ROLE app LOGIN CONNECTION LIMIT 1; GRANT CREATE ON DATABASE postgres TO app");
    let url = format!(
        "postgres://app:pw-4321@127.0.0.1:{}/postgres",
        server.port()
    );
    let run = |args: &[&str]| {
        let mut cmd = s.cmd_via(&url, ["--name", "full"]);
        cmd.args(args).args(["--", "touch", "ran"]);
        cmd
    };
    let holder = s.hold_via(&url, "full", "h", &[]);
    let out = output(&mut run(&["--no-wait"]));
    let line = assert_one_line(&out, 69, "too many connections");
    assert_hidden(&line, &["pw-4321"]);

    let started = Instant::now();
    let out = output(&mut run(&["-v", "--wait", "1s"]));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_said(&out, "trying again in");
    assert!(!s.path("ran").exists());

    let waiter = Proc::spawn(&mut run(&["-v", "--wait", "30s"]));
    assert_a_turned_away_waiter_gets_in(&s, holder, waiter);
}

#[test]
fn a_second_database_user_locked_out_of_the_schema_is_told_about_lockrun_schema() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    s.accepts(s.url(), "x");
    server.sql("CREATE ROLE other LOGIN; GRANT CREATE ON DATABASE postgres TO other");
    let url = format!(
        "postgres://other:pw-8080@127.0.0.1:{}/postgres",
        server.port()
    );
    let line = s.refuses(&url, "x", 69, "permission denied for schema lockrun");
    assert!(line.contains("?lockrun_schema="), "{line}");
    assert_hidden(&line, &["pw-8080"]);
    // The fix it names works.
    s.accepts(&format!("{url}?lockrun_schema=other_locks"), "x");
}
