//! The `postgres://` backend, driven through the real `lockrun` binary against a real PostgreSQL
//! cluster started per test (never one that happens to run on the machine).

use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::common::{
    Drive, alive, code, lockrun, text, wait_exit, wait_for_file, wait_until,
};
use crate::support::postgres_server::{PgServer, free_port};
use crate::support::proxy::Proxy;
use crate::support::scenarios;
use crate::support::world::{SOON, assert_stopped_before_expiry, tokens_in};

type World = crate::support::world::World<PgServer>;

#[test]
fn tokens_reach_the_child_and_strictly_increase_across_a_restart() {
    let mut w = World::new();
    let run = |w: &World| {
        let out = w.run([
            "--name",
            "tok",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN >> tokens; echo $LOCKRUN_NAME $LOCKRUN_TTL_MS $LOCKRUN_SLOT > env",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "lockrun wrote to stdout");
    };
    for _ in 0..3 {
        run(&w);
    }
    let env = std::fs::read_to_string(w.path("env")).unwrap();
    assert_eq!(env.trim(), "tok 2000 0");
    let stored = w
        .server
        .sql("SELECT token FROM lockrun.names WHERE name = 'tok'");
    assert_eq!(stored, tokens_in(&w.path("tokens"))[2].to_string());
    // The counter is durable: a crash and restart does not bring it back.
    w.server.restart();
    run(&w);
    let tokens = tokens_in(&w.path("tokens"));
    assert_eq!(tokens.len(), 4);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

#[test]
fn busy_with_no_wait_exits_75_or_the_chosen_code() {
    scenarios::busy_with_no_wait_exits_75_or_the_chosen_code::<PgServer>("2s");
}

#[test]
fn wait_runs_out_and_leaves_the_line() {
    scenarios::wait_runs_out_and_leaves_the_line::<PgServer>("2s", Duration::from_millis(300));
}

#[test]
fn unreachable_server_exits_69_naming_the_endpoint_not_the_password() {
    let port = free_port();
    let started = Instant::now();
    let out = lockrun()
        .args([
            "--backend",
            &format!("postgres://u:hunter2@127.0.0.1:{port}/db"),
        ])
        .args(["--name", "x", "--", "touch", "/nonexistent/ran"])
        .output()
        .expect("run lockrun");
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_silent_server_at_startup_exits_69_within_seconds() {
    let server = PgServer::start();
    let proxy = Proxy::start(server.port());
    proxy.blackhole();
    let started = Instant::now();
    let out = lockrun()
        .args(["--backend", &server.url_on(proxy.port())])
        .args(["--name", "x", "--", "true"])
        .output()
        .expect("run lockrun");
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(6));
    assert!(text(&out.stderr).contains(&format!("127.0.0.1:{}", proxy.port())));
}

#[test]
fn passwords_never_leak() {
    let w = World::on(PgServer::with_password("s3cr3t-pw"));
    let out = w.run(["-v", "--name", "pw", "--", "sh", "-c", "env > env.txt"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let mut seen = text(&out.stderr);
    seen += &std::fs::read_to_string(w.path("env.txt")).unwrap();

    // Through the environment variable too: the child must not inherit it.
    let out = lockrun()
        .env("LOCKRUN_BACKEND", &w.url)
        .current_dir(w.dir())
        .args(["-v", "--name", "pw", "--", "sh", "-c", "env > env2.txt"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    seen += &text(&out.stderr);
    seen += &std::fs::read_to_string(w.path("env2.txt")).unwrap();

    let _holder = w.hold("pw", "h", &["--ttl", "2s"]);
    for args in [
        vec!["status", "pw"],
        vec!["status", "pw", "--json"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["-v", "--name", "pw", "--no-wait", "--", "true"],
    ] {
        let out = w.run(&args);
        seen += &text(&out.stdout);
        seen += &text(&out.stderr);
    }
    // A wrong password fails before anything runs, without echoing it; so does one given as a
    // query parameter.
    for wrong in [
        format!(
            "postgres://postgres:wrong-pw@127.0.0.1:{}/postgres",
            w.server.port()
        ),
        format!(
            "postgres://127.0.0.1:{}/postgres?user=postgres&password=wrong-pw",
            w.server.port()
        ),
    ] {
        let out = lockrun()
            .args(["--backend", &wrong, "--name", "pw", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 69, "{}", text(&out.stderr));
        seen += &text(&out.stderr);
    }
    assert!(seen.contains("lockrun:"), "no messages were checked");
    assert!(seen.contains("password authentication failed"), "{seen}");
    assert!(!seen.contains("s3cr3t-pw"), "password leaked: {seen}");
    assert!(!seen.contains("wrong-pw"), "password leaked: {seen}");
}

#[test]
fn status_and_list_show_holders_then_nothing() {
    let w = World::new();
    let mut holder = w.hold("ci/deploy", "h", &["--ttl", "2s", "--note", "deploy #42"]);
    let status = w.wait_held("ci/deploy", 1);
    assert_eq!(status["name"], "ci/deploy");
    assert_eq!(status["held"], true);
    assert_eq!(status["limit"], 1);
    assert_eq!(status["waiters"], 0);
    let h = &status["holders"][0];
    assert_eq!(h["token"], holder.token);
    assert_eq!(h["pid"], holder.process.id());
    assert_eq!(h["note"], "deploy #42");
    assert_eq!(h["slot"], 0);
    let left = h["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 2000, "{left}");
    assert!(h["acquired_at"].as_str().unwrap().ends_with('Z'));

    let list = w.list(&[]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["name"], "ci/deploy");
    assert_eq!(w.list(&["ci/"]).as_array().unwrap().len(), 1);
    assert_eq!(w.list(&["other"]), serde_json::json!([]));
    // LIKE wildcards in a prefix are plain characters.
    assert_eq!(w.list(&["c_"]), serde_json::json!([]));

    let mut waiter = w.spawn(["--name", "ci/deploy", "--wait", "20s", "--", "true"]);
    w.wait_waiters("ci/deploy", 1);
    assert_eq!(code(&holder.finish()), 0);
    assert_eq!(code(&wait_exit(&mut waiter, SOON)), 0);
    let status = w.status("ci/deploy");
    assert_eq!(status["held"], false, "{status}");
    assert_eq!(status["waiters"], 0, "{status}");
    assert_eq!(status["holders"], serde_json::json!([]));
    assert_eq!(w.list(&[]), serde_json::json!([]));
}

#[test]
fn server_killed_under_a_holder_stops_the_command_before_the_ttl() {
    let mut w = World::new();
    let ttl = Duration::from_secs(2);
    let mut holder = w.hold("crash", "h", &["--ttl", "2s"]);
    let lost_at = Instant::now();
    w.server.kill();
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
}

#[test]
fn silent_network_stops_the_command_before_the_ttl() {
    let server = PgServer::start();
    let proxy = Proxy::start(server.port());
    let mut w = World::on(server);
    w.url = w.server.url_on(proxy.port());
    let ttl = Duration::from_secs(2);
    let mut holder = w.hold("silent", "h", &["--ttl", "2s"]);
    let lost_at = Instant::now();
    proxy.blackhole();
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
}

#[test]
fn a_brief_restart_is_ridden_through() {
    let mut w = World::new();
    // Renewals every 500 ms with a 4 s lease: a restart of about a second is well inside it.
    let mut holder = w.hold("ride", "h", &["--ttl", "4s", "--renew", "500ms"]);
    w.server.restart();
    // A renewal reached the restarted server: the lease now ends more than a TTL after it started.
    let renewed = wait_until(SOON, || {
        w.server.sql(
            "SELECT count(*) FROM lockrun.leases WHERE name = 'ride' \
             AND expires_at - interval '4 s' > pg_postmaster_start_time()",
        ) == "1"
    });
    assert!(renewed, "no renewal after the restart");
    assert!(alive(holder.child_pid), "the command was stopped");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(w.status("ride")["holders"], serde_json::json!([]));
}

#[test]
fn paused_holder_is_fenced_off_by_the_database_and_exits_76() {
    let w = World::new();
    let fenced = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fenced-write.sh");
    let db = w.server.url();
    // A's command writes once `a.go` exists, then keeps running.
    let a_script = format!(
        "echo $FENCING_TOKEN > a.token; echo $$ > a.pid; \
         while [ ! -e a.go ]; do sleep 0.02; done; \
         {fenced} '{db}' from-a 2> a.err; echo $? > a.exit; \
         while :; do sleep 0.02; done"
    );
    let mut stale = w.hold_running("drill", "a", &["--ttl", "1s"], &a_script);
    stale.signal(Signal::SIGSTOP);
    // A's lease expires by the server's clock; B takes over with a higher token and writes.
    let b_script = format!(
        "echo $$ > b.pid; {fenced} '{db}' from-b 2> b.err && echo $FENCING_TOKEN > b.token; \
         while [ ! -e b.release ]; do sleep 0.02; done"
    );
    let mut fresh = w.hold_running("drill", "b", &["--ttl", "2s", "--wait", "10s"], &b_script);
    assert!(
        fresh.token > stale.token,
        "{} <= {}",
        fresh.token,
        stale.token
    );
    // A's command, still running while its lockrun is frozen, tries its write: the database
    // rejects it.
    std::fs::write(w.path("a.go"), "").unwrap();
    let exit = wait_for_file(&w.path("a.exit"), SOON);
    assert_eq!(
        exit.trim(),
        "3",
        "{}",
        std::fs::read_to_string(w.path("a.err")).unwrap_or_default()
    );
    assert_eq!(
        w.server
            .sql("SELECT value || ' ' || fence_token FROM fenced_demo WHERE id = 1"),
        format!("from-b {}", fresh.token)
    );
    // A wakes up: its command is stopped at once, and B's lease is untouched.
    stale.signal(Signal::SIGCONT);
    let out = wait_exit(&mut stale.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(
        wait_until(SOON, || !alive(stale.child_pid)),
        "the stale command still runs"
    );
    let status = w.status("drill");
    assert_eq!(status["holders"][0]["token"], fresh.token, "{status}");
    assert_eq!(code(&fresh.finish()), 0);
}

#[test]
fn force_release_breaks_the_holder_within_a_renewal() {
    scenarios::force_release_breaks_the_holder_within_a_renewal::<PgServer>("2s");
}

#[test]
fn waiters_are_served_in_arrival_order() {
    scenarios::waiters_are_served_in_arrival_order::<PgServer>("2s");
}

#[test]
fn a_waiter_that_died_does_not_block_the_line() {
    let w = World::new();
    let mut holder = w.hold("dead", "h", &["--ttl", "2s"]);
    let mut first = w.spawn(["--name", "dead", "--wait", "30s", "--", "touch", "first"]);
    w.wait_waiters("dead", 1);
    let mut second = w.spawn(["--name", "dead", "--wait", "30s", "--", "touch", "second"]);
    w.wait_waiters("dead", 2);
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(code(&holder.finish()), 0);
    let out = wait_exit(&mut second, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("second").exists() && !w.path("first").exists());
}

#[test]
fn limit_three_runs_up_to_three_at_once() {
    let w = World::new();
    // Each command waits (briefly) until three have started, so the peak is reached if allowed.
    let script = "echo \"+ $LOCKRUN_SLOT $FENCING_TOKEN\" >> log; i=0; \
                  while [ $(grep -c + log) -lt 3 ] && [ $i -lt 100 ]; do sleep 0.02; i=$((i+1)); done; \
                  sleep 0.1; echo \"- $LOCKRUN_SLOT\" >> log";
    let mut runners: Vec<Child> = (0..7)
        .map(|_| {
            w.spawn([
                "--name", "sem", "--limit", "3", "--ttl", "2s", "--wait", "30s", "--", "sh", "-c",
                script,
            ])
        })
        .collect();
    for runner in &mut runners {
        let out = wait_exit(runner, Duration::from_secs(30));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let (mut running, mut peak) = (std::collections::HashSet::new(), 0);
    let mut tokens = std::collections::HashSet::new();
    for line in log.lines() {
        let mut fields = line.split(' ');
        let sign = fields.next().unwrap();
        let slot: u32 = fields.next().unwrap().parse().unwrap();
        assert!(slot < 3, "slot {slot}");
        if sign == "+" {
            let token: u64 = fields.next().unwrap().parse().unwrap();
            assert!(tokens.insert(token), "token {token} given twice:\n{log}");
            assert!(
                running.insert(slot),
                "slot {slot} given twice at once:\n{log}"
            );
        } else {
            running.remove(&slot);
        }
        peak = peak.max(running.len());
    }
    assert_eq!(peak, 3, "{log}");
    assert_eq!(w.status("sem")["limit"], 3);
}

#[test]
fn concurrent_first_use_creates_the_schema_once_without_errors() {
    let w = World::new();
    let mut runs: Vec<Child> = (0..6)
        .map(|i| {
            let name = format!("first{}", i % 3);
            w.spawn(["--name", &name, "--wait", "20s", "--", "true"])
        })
        .collect();
    for run in &mut runs {
        let out = wait_exit(run, Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
    assert_eq!(
        w.server
            .sql("SELECT count(*) FROM pg_namespace WHERE nspname = 'lockrun'"),
        "1"
    );
    assert_eq!(w.server.sql("SELECT count(*) FROM lockrun.names"), "3");
}

#[test]
fn the_schema_can_be_chosen_and_is_validated() {
    let mut w = World::new();
    let base = w.url.clone();
    w.url = format!("{base}?lockrun_schema=jobs_locks&application_name=x");
    let out = w.run(["--name", "s", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(w.server.sql("SELECT count(*) FROM jobs_locks.names"), "1");
    // A bad schema is a usage error, judged before connecting.
    w.url = format!("{base}?lockrun_schema=Bad%22Name");
    let out = w.run(["--name", "s", "--", "touch", "ran"]);
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("lockrun_schema"));
    assert!(!w.path("ran").exists());
}

#[test]
fn tls_is_used_and_verified_when_the_url_asks_for_it() {
    let server = PgServer::with_tls();
    let ca = server.ca_file();
    let plain = server.url();
    let mut w = World::on(server);
    w.url = format!("{plain}?sslmode=verify-full&sslrootcert={}", ca.display());
    let mut holder = w.hold("tls", "h", &["--ttl", "2s"]);
    let encrypted = w.server.sql(
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE application_name = 'lockrun' AND ssl",
    );
    assert_ne!(encrypted, "0", "no lockrun connection uses TLS");
    assert_eq!(code(&holder.finish()), 0);
    // A certificate that the system's roots do not vouch for is refused.
    w.url = format!("{plain}?sslmode=require");
    let out = w.run(["--name", "tls", "--", "touch", "ran"]);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("certificate"),
        "{}",
        text(&out.stderr)
    );
    assert!(!w.path("ran").exists());
}

#[test]
fn a_crashed_holder_blocks_others_for_at_most_one_ttl() {
    let w = World::new();
    let holder = w.hold("gone", "h", &["--ttl", "1s"]);
    let mut waiter = w.spawn(["--name", "gone", "--wait", "20s", "--", "touch", "ran"]);
    w.wait_waiters("gone", 1);
    // No release is ever sent: the lease must run out by the server's clock.
    let crashed_at = Instant::now();
    holder.signal(Signal::SIGKILL);
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran").exists());
    assert!(
        crashed_at.elapsed() < Duration::from_secs(5),
        "took {:?}",
        crashed_at.elapsed()
    );
}

#[test]
fn a_frozen_server_stops_the_command_before_the_ttl() {
    let w = World::new();
    let ttl = Duration::from_secs(2);
    let mut holder = w.hold("frozen", "h", &["--ttl", "2s"]);
    let lost_at = Instant::now();
    w.server.pause();
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
    w.server.resume();
}
