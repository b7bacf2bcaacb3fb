//! The `etcd://` backend, driven through the real `lockrun` binary against real etcd members
//! started per test (never one that happens to run on the machine): one member, or a three-member
//! cluster on loopback for failover.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::common::{
    Drive, alive, code, lockrun, text, wait_exit, wait_for_file, wait_until,
};
use crate::support::etcd_cluster::{EtcdCluster, free_port};
use crate::support::proxy::Proxy;
use crate::support::redis_server::make_certificates;
use crate::support::scenarios;
use crate::support::world::{SOON, assert_stopped_before_expiry, tokens_in};

type World = crate::support::world::World<EtcdCluster>;

#[test]
fn tokens_reach_the_child_and_strictly_increase() {
    let w = World::new();
    for _ in 0..3 {
        let out = w.run([
            "--name",
            "tok",
            "--ttl",
            "3s",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN >> tokens; echo $LOCKRUN_NAME $LOCKRUN_TTL_MS $LOCKRUN_SLOT > env",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "lockrun wrote to stdout");
    }
    let tokens = tokens_in(&w.path("tokens"));
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    let env = std::fs::read_to_string(w.path("env")).unwrap();
    assert_eq!(env.trim(), "tok 3000 0");
}

#[test]
fn granted_ttl_is_raised_to_the_server_minimum() {
    let w = World::new();
    let out = w.run([
        "--name",
        "short",
        "--ttl",
        "500ms",
        "--",
        "sh",
        "-c",
        "echo $LOCKRUN_TTL_MS > ttl",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let granted: u64 = std::fs::read_to_string(w.path("ttl"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // etcd's minimum lease at its default timing is 2 s (1.5 election timeouts, rounded up).
    assert!(granted >= 2000, "granted {granted} ms");
}

#[test]
fn busy_with_no_wait_exits_75_or_the_chosen_code() {
    scenarios::busy_with_no_wait_exits_75_or_the_chosen_code::<EtcdCluster>("3s");
}

#[test]
fn wait_runs_out_and_leaves_the_line() {
    scenarios::wait_runs_out_and_leaves_the_line::<EtcdCluster>("3s", Duration::from_millis(500));
}

#[test]
fn unreachable_cluster_exits_69_naming_the_endpoint_not_the_password() {
    let port = free_port();
    let started = Instant::now();
    let out = lockrun()
        .args(["--backend", &format!("etcd://u:hunter2@127.0.0.1:{port}")])
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
fn status_and_list_show_holders_then_nothing() {
    let w = World::new();
    let mut holder = w.hold("ci/deploy", "h", &["--ttl", "3s", "--note", "deploy #42"]);
    let status = w.status("ci/deploy");
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
    assert!(left > 0 && left <= 3000, "{left}");
    assert!(h["acquired_at"].as_str().unwrap().ends_with('Z'));

    // A name nested under the held one is a different lock.
    let out = w.run(["--name", "ci/deploy/x", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));

    let list = w.list(&[]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["name"], "ci/deploy");
    assert_eq!(w.list(&["ci/"]).as_array().unwrap().len(), 1);
    assert_eq!(w.list(&["other"]), serde_json::json!([]));

    assert_eq!(code(&holder.finish()), 0);
    let status = w.status("ci/deploy");
    assert_eq!(status["held"], false, "{status}");
    assert_eq!(status["holders"], serde_json::json!([]));
    assert_eq!(w.list(&[]), serde_json::json!([]));
}

#[test]
fn server_killed_under_a_holder_stops_the_command_before_the_ttl() {
    let mut w = World::new();
    let ttl = Duration::from_secs(3);
    let mut holder = w.hold("crash", "h", &["--ttl", "3s"]);
    let lost_at = Instant::now();
    w.server.kill(0);
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
}

#[test]
fn silent_network_stops_the_command_before_the_ttl() {
    let cluster = EtcdCluster::single();
    let proxy = Proxy::start(cluster.client_port(0));
    let mut w = World::on(cluster);
    w.url = format!("etcd://127.0.0.1:{}", proxy.port());
    let ttl = Duration::from_secs(3);
    let mut holder = w.hold("silent", "h", &["--ttl", "3s"]);
    let lost_at = Instant::now();
    proxy.blackhole();
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
}

#[test]
fn paused_holder_is_overtaken_and_stops_at_once_without_releasing_the_new_holder() {
    let w = World::new();
    let mut stale = w.hold("pause", "a", &["--ttl", "2s"]);
    stale.signal(Signal::SIGSTOP);
    // The stale lease expires; a new holder gets a higher token.
    let mut fresh = w.hold("pause", "b", &["--ttl", "3s", "--wait", "10s"]);
    assert!(
        fresh.token > stale.token,
        "{} <= {}",
        fresh.token,
        stale.token
    );
    stale.signal(Signal::SIGCONT);
    let out = wait_exit(&mut stale.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(!alive(stale.child_pid), "the stale command still runs");
    let status = w.status("pause");
    assert_eq!(status["holders"][0]["token"], fresh.token, "{status}");
    assert_eq!(code(&fresh.finish()), 0);
}

#[test]
fn token_rises_after_the_server_restarts() {
    let mut w = World::new();
    let run = |w: &World| {
        let out = w.run([
            "--name",
            "boot",
            "--",
            "sh",
            "-c",
            "echo $FENCING_TOKEN >> tokens",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    };
    run(&w);
    run(&w);
    w.server.restart(0, true);
    run(&w);
    let tokens = tokens_in(&w.path("tokens"));
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

#[test]
fn force_release_breaks_the_holder_within_a_renewal() {
    scenarios::force_release_breaks_the_holder_within_a_renewal::<EtcdCluster>("3s");
}

#[test]
fn waiters_are_served_in_arrival_order() {
    scenarios::waiters_are_served_in_arrival_order::<EtcdCluster>("3s");
}

#[test]
fn a_waiter_that_died_does_not_block_the_line_beyond_its_lease() {
    let w = World::new();
    let mut holder = w.hold("dead", "h", &["--ttl", "3s"]);
    let mut first = w.spawn([
        "--name", "dead", "--ttl", "2s", "--wait", "30s", "--", "touch", "first",
    ]);
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
fn a_waiter_whose_lease_expired_in_line_never_runs_on_it() {
    let w = World::new();
    let mut holder = w.hold("stale", "h", &["--ttl", "3s"]);
    let mut waiter = w.spawn([
        "--name",
        "stale",
        "--ttl",
        "2s",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > w.token",
    ]);
    w.wait_waiters("stale", 1);
    let frozen = Pid::from_raw(waiter.id() as i32);
    kill(frozen, Signal::SIGSTOP).unwrap();
    // Its lease expires in line; its place goes with it.
    w.wait_waiters("stale", 0);
    assert_eq!(code(&holder.finish()), 0);
    let out = w.run([
        "--name",
        "stale",
        "--no-wait",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > x.token",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    kill(frozen, Signal::SIGCONT).unwrap();
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // It ran only after joining the line again, with a new key: a token above the one after it.
    let x = tokens_in(&w.path("x.token"));
    let resumed = tokens_in(&w.path("w.token"));
    assert!(resumed[0] > x[0], "{resumed:?} <= {x:?}");
    assert!(
        text(&out.stderr).contains("expired"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn limit_three_runs_up_to_three_at_once_in_distinct_slots() {
    let w = World::new();
    // Each command waits (briefly) until three have started, so the peak is reached if allowed.
    let script = "echo \"+ $LOCKRUN_SLOT\" >> log; i=0; \
                  while [ $(grep -c + log) -lt 3 ] && [ $i -lt 100 ]; do sleep 0.02; i=$((i+1)); done; \
                  sleep 0.1; echo \"- $LOCKRUN_SLOT\" >> log";
    let mut runners: Vec<Child> = (0..7)
        .map(|_| {
            w.spawn([
                "--name", "sem", "--limit", "3", "--ttl", "3s", "--wait", "30s", "--", "sh", "-c",
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
    for line in log.lines() {
        let (sign, slot) = line.split_once(' ').unwrap();
        let slot: u32 = slot.parse().unwrap();
        assert!(slot < 3, "slot {slot}");
        if sign == "+" {
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
}

#[test]
fn passwords_work_and_never_leak() {
    let w = World::new();
    for args in [&["user", "add", "root:s3cr3t-pw"][..], &["auth", "enable"]] {
        let out = w.server.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            text(&out.stderr)
        );
    }
    let endpoint = w.server.endpoint(0);
    let mut w = w;
    w.url = format!("etcd://root:s3cr3t-pw@{endpoint}");
    let out = w.run(["-v", "--name", "pw", "--", "sh", "-c", "env > env.txt"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let mut seen = text(&out.stderr);
    seen += &std::fs::read_to_string(w.path("env.txt")).unwrap();
    let _holder = w.hold("pw", "h", &["--ttl", "3s"]);
    for args in [
        vec!["status", "pw"],
        vec!["list", "--json"],
        vec!["-v", "--name", "pw", "--no-wait", "--", "true"],
    ] {
        let out = w.run(&args);
        seen += &text(&out.stdout);
        seen += &text(&out.stderr);
    }
    let out = lockrun()
        .args(["--backend", &format!("etcd://root:wrong-pw@{endpoint}")])
        .args(["--name", "pw", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    seen += &text(&out.stderr);
    assert!(seen.contains("lockrun:"), "no messages were checked");
    assert!(!seen.contains("s3cr3t-pw"), "password leaked: {seen}");
    assert!(!seen.contains("wrong-pw"), "password leaked: {seen}");
}

/// Starts a holder whose command runs for `run` seconds (several renewals), then exits 0; returns
/// once the command has started (its pid is in `NAME.pid`).
fn cluster_holder(w: &World, name: &str, ttl: &str, run: &str) -> Child {
    let script = format!("echo $$ > {name}.pid; sleep {run}");
    let process = w.spawn(["--name", name, "--ttl", ttl, "--", "sh", "-c", &script]);
    wait_for_file(&w.path(&format!("{name}.pid")), SOON);
    process
}

#[test]
fn cluster_member_killed_under_a_holder_is_ridden_through() {
    let mut w = World::on(EtcdCluster::three());
    let mut holder = cluster_holder(&w, "failover", "3s", "5");
    // Member 0 is the first endpoint: the one lockrun talks to.
    w.server.kill(0);
    let out = wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn cluster_member_restarted_briefly_is_ridden_through() {
    let mut w = World::on(EtcdCluster::three());
    let mut holder = cluster_holder(&w, "bounce", "3s", "4");
    w.server.restart(0, true);
    let out = wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn cluster_without_quorum_stops_the_command_before_the_ttl() {
    let mut w = World::on(EtcdCluster::three());
    let ttl = Duration::from_secs(3);
    let mut process = cluster_holder(&w, "quorum", "3s", "30");
    let child_pid: i32 = std::fs::read_to_string(w.path("quorum.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let lost_at = Instant::now();
    w.server.kill(1);
    w.server.kill(2);
    let dead = wait_until(ttl * 2, || !alive(child_pid));
    let after = lost_at.elapsed();
    assert!(dead, "the command was never stopped");
    assert!(after < ttl, "the command outlived the lease: {after:?}");
    let out = wait_exit(&mut process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}

#[test]
fn tls_with_the_clusters_ca_works_and_without_it_fails_before_running() {
    let certs = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    if !make_certificates(certs.path()) || !make_certificates(other.path()) {
        eprintln!("skipped: openssl could not make test certificates");
        return;
    }
    let cluster = EtcdCluster::single_tls(certs.path(), false);
    let endpoint = cluster.endpoint(0);
    let with_ca = |dir: &Path| format!("etcd://{endpoint}?cacert={}", dir.join("ca.crt").display());
    let out = lockrun()
        .args(["--backend", &with_ca(certs.path()), "--name", "tls", "--"])
        .args(["sh", "-c", "test -n \"$FENCING_TOKEN\""])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    for url in [with_ca(other.path()), format!("etcd://{endpoint}")] {
        let out = lockrun()
            .args([
                "--backend",
                &url,
                "--name",
                "tls",
                "--",
                "touch",
                "/nonexistent/ran",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 69, "{url}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&endpoint),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn tls_with_a_client_certificate_when_the_cluster_asks_for_one() {
    let certs = tempfile::tempdir().unwrap();
    if !make_certificates(certs.path()) {
        eprintln!("skipped: openssl could not make test certificates");
        return;
    }
    let cluster = EtcdCluster::single_tls(certs.path(), true);
    let file = |name: &str| certs.path().join(name).display().to_string();
    let base = format!("etcd://{}?cacert={}", cluster.endpoint(0), file("ca.crt"));
    let with_identity = format!(
        "{base}&cert={}&key={}",
        file("server.crt"),
        file("server.key")
    );
    let out = lockrun()
        .args(["--backend", &with_identity, "--name", "mtls", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = lockrun()
        .args([
            "--backend",
            &base,
            "--name",
            "mtls",
            "--",
            "touch",
            "/nonexistent/ran",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
}

#[test]
fn cluster_member_gone_silent_is_ridden_through() {
    let cluster = EtcdCluster::three();
    let proxy = Proxy::start(cluster.client_port(0));
    let url = format!(
        "etcd://127.0.0.1:{},{},{}",
        proxy.port(),
        cluster.endpoint(1),
        cluster.endpoint(2)
    );
    let mut w = World::on(cluster);
    w.url = url;
    let mut holder = cluster_holder(&w, "silent", "3s", "5");
    proxy.blackhole();
    let out = wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn semaphore_status_shows_slots_and_waiters_and_force_release_drops_every_holder() {
    let w = World::new();
    let args = ["--limit", "2", "--ttl", "3s", "--wait", "30s"];
    let a = w.hold("pool", "a", &args);
    let b = w.hold("pool", "b", &args);
    let mut waiter = w.spawn([
        "--name", "pool", "--limit", "2", "--ttl", "3s", "--wait", "30s", "--", "true",
    ]);
    let status = w.wait_waiters("pool", 1);
    assert_eq!(status["limit"], 2, "{status}");
    let mut slots: Vec<u64> = status["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["slot"].as_u64().unwrap())
        .collect();
    slots.sort();
    assert_eq!(slots, [0, 1], "{status}");
    let out = w.run(["release", "pool", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    for mut holder in [a, b] {
        let out = wait_exit(&mut holder.process, SOON);
        assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    }
    // The waiter keeps its place and gets in.
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}
