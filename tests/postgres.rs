//! What only the `postgres://` backend has: its schema (created once under concurrent first use,
//! chosen by `lockrun_schema=`), TLS, a restart ridden through, and the fenced-write example
//! rejecting a stale holder in the database itself. Everything it shares with the other backends
//! is in the conformance suite.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::fixture::Fixture;
use crate::support::holder::Holder;
use crate::support::lockrun::Proc;
use crate::support::postgres_server::PgServer;
use crate::support::scene::Scene;
use crate::support::tools;
use crate::support::wait::{SOON, alive, code, text, wait_for_file, wait_until};

#[test]
fn concurrent_first_use_creates_the_schema_once_without_errors() {
    let server = PgServer::start();
    let s = Scene::new(server.url());
    let mut runs: Vec<Proc> = (0..6)
        .map(|i| {
            let name = format!("first{}", i % 3);
            s.spawn(["--name", &name, "--wait", "20s", "--", "true"])
        })
        .collect();
    for run in &mut runs {
        let out = run.wait(Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
    assert_eq!(
        server.sql("SELECT count(*) FROM pg_namespace WHERE nspname = 'lockrun'"),
        "1"
    );
    assert_eq!(server.sql("SELECT count(*) FROM lockrun.names"), "3");
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
    let s = Scene::new(server.url());
    // Renewals every 500 ms with a 4 s lease: a restart of about a second is well inside it.
    let mut holder = s.hold("ride", "h", &["--ttl", "4s", "--renew", "500ms"]);
    server.restart(false);
    // A renewal reached the restarted server: the lease now ends more than a TTL after it started.
    let renewed = wait_until(SOON, || {
        server.sql(
            "SELECT count(*) FROM lockrun.leases WHERE name = 'ride' \
             AND expires_at - interval '4 s' > pg_postmaster_start_time()",
        ) == "1"
    });
    assert!(renewed, "no renewal after the restart");
    assert!(holder.command_alive(), "the command was stopped");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(s.status("ride")["holders"], serde_json::json!([]));
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
