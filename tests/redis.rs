//! The `redis://` backend, driven through the real `lockrun` binary against a real `redis-server`
//! started per test (never one that happens to run on the machine).

use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::common::{Drive, alive, code, lockrun, text, wait_exit, wait_until};
use crate::support::proxy::Proxy;
use crate::support::redis_server::{RedisServer, free_port, make_certificates};
use crate::support::scenarios;
use crate::support::world::{SOON, assert_stopped_before_expiry, tokens_in};

type World = crate::support::world::World<RedisServer>;

#[test]
fn tokens_reach_the_child_and_strictly_increase() {
    let w = World::new();
    for _ in 0..3 {
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
    }
    let tokens = tokens_in(&w.path("tokens"));
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    let env = std::fs::read_to_string(w.path("env")).unwrap();
    assert_eq!(env.trim(), "tok 2000 0");
    // The counter is stored as an exact integer, never in floating-point notation.
    let stored = w.server.cli(&["HGET", "lockrun:{tok}:meta", "token"]);
    assert_eq!(text(&stored.stdout).trim(), tokens[2].to_string());
}

#[test]
fn busy_with_no_wait_exits_75_or_the_chosen_code() {
    scenarios::busy_with_no_wait_exits_75_or_the_chosen_code::<RedisServer>("2s");
}

#[test]
fn wait_runs_out_and_leaves_the_line() {
    scenarios::wait_runs_out_and_leaves_the_line::<RedisServer>("2s", Duration::from_millis(300));
}

#[test]
fn unreachable_server_exits_69_naming_the_endpoint_not_the_password() {
    let port = free_port();
    let started = Instant::now();
    let out = lockrun()
        .args(["--backend", &format!("redis://u:hunter2@127.0.0.1:{port}")])
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
fn silent_server_at_start_exits_69_within_seconds() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.blackhole();
    let started = Instant::now();
    let out = lockrun()
        .args(["--backend", &format!("redis://127.0.0.1:{}", proxy.port())])
        .args(["--name", "x", "--", "touch", "/nonexistent/ran"])
        .output()
        .expect("run lockrun");
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{}", proxy.port())),
        "{stderr}"
    );
}

#[test]
fn passwords_never_leak() {
    let w = World::on(RedisServer::with_password("s3cr3t-pw"));
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
    // A wrong password fails before anything runs, without echoing it.
    let wrong = format!("redis://:wrong-pw@127.0.0.1:{}", w.server.port());
    let out = lockrun()
        .args(["--backend", &wrong, "--name", "pw", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    seen += &text(&out.stderr);
    assert!(seen.contains("lockrun:"), "no messages were checked");
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

    let list: serde_json::Value =
        serde_json::from_slice(&w.run(["list", "--json"]).stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["name"], "ci/deploy");
    let list: serde_json::Value =
        serde_json::from_slice(&w.run(["list", "ci/", "--json"]).stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let list: serde_json::Value =
        serde_json::from_slice(&w.run(["list", "other", "--json"]).stdout).unwrap();
    assert_eq!(list, serde_json::json!([]));

    assert_eq!(code(&holder.finish()), 0);
    let status = w.status("ci/deploy");
    assert_eq!(status["held"], false, "{status}");
    assert_eq!(status["holders"], serde_json::json!([]));
    let list: serde_json::Value =
        serde_json::from_slice(&w.run(["list", "--json"]).stdout).unwrap();
    assert_eq!(list, serde_json::json!([]));
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
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut w = World::on(server);
    w.url = format!("redis://127.0.0.1:{}", proxy.port());
    let ttl = Duration::from_secs(2);
    let mut holder = w.hold("silent", "h", &["--ttl", "2s"]);
    let lost_at = Instant::now();
    proxy.blackhole();
    assert_stopped_before_expiry(&mut holder, lost_at, ttl);
}

#[test]
fn paused_holder_is_overtaken_and_stops_at_once_without_releasing_the_new_holder() {
    let w = World::new();
    let mut stale = w.hold("pause", "a", &["--ttl", "1s"]);
    stale.signal(Signal::SIGSTOP);
    // The stale lease expires; a new holder gets a higher token.
    let mut fresh = w.hold("pause", "b", &["--ttl", "2s", "--wait", "10s"]);
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
fn paused_process_groups_are_overtaken_and_stop_at_once() {
    let w = World::new();
    let mut stale = w.hold_as("vm", "a", &["--ttl", "1s"], true);
    // lockrun and its command each lead a group; both are frozen, as in a paused VM.
    let groups = [stale.process.id() as i32, stale.child_pid];
    for group in groups {
        killpg(Pid::from_raw(group), Signal::SIGSTOP).expect("stop group");
    }
    let mut fresh = w.hold("vm", "b", &["--ttl", "2s", "--wait", "10s"]);
    assert!(fresh.token > stale.token);
    for group in groups {
        killpg(Pid::from_raw(group), Signal::SIGCONT).expect("continue group");
    }
    let out = wait_exit(&mut stale.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(
        wait_until(SOON, || !alive(stale.child_pid)),
        "the stale command still runs"
    );
    assert_eq!(w.status("vm")["holders"][0]["token"], fresh.token);
    assert_eq!(code(&fresh.finish()), 0);
}

#[test]
fn token_rises_after_the_server_restarts_empty() {
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
    w.server.restart_empty();
    let meta = w.server.cli(&["EXISTS", "lockrun:{boot}:meta"]);
    assert_eq!(text(&meta.stdout).trim(), "0", "the restart kept the keys");
    run(&w);
    let tokens = tokens_in(&w.path("tokens"));
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

#[test]
fn force_release_breaks_the_holder_within_a_renewal() {
    scenarios::force_release_breaks_the_holder_within_a_renewal::<RedisServer>("2s");
}

#[test]
fn waiters_are_served_in_arrival_order() {
    scenarios::waiters_are_served_in_arrival_order::<RedisServer>("2s");
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
    let script = "echo \"+ $LOCKRUN_SLOT\" >> log; i=0; \
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
fn a_waiter_gets_the_lock_when_the_holder_exits() {
    let w = World::new();
    let mut holder = w.hold("hand", "h", &["--ttl", "2s"]);
    let mut waiter = w.spawn([
        "--name",
        "hand",
        "--wait",
        "20s",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > w.token",
    ]);
    w.wait_waiters("hand", 1);
    assert_eq!(code(&holder.finish()), 0);
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let token: u64 = std::fs::read_to_string(w.path("w.token"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token > holder.token);
}

#[test]
fn rediss_connects_with_a_trusted_certificate_and_refuses_an_unknown_one() {
    let certs = tempfile::tempdir().unwrap();
    if !make_certificates(certs.path()) {
        eprintln!("skipped: openssl could not make test certificates");
        return;
    }
    let server = RedisServer::with_tls(certs.path());
    let url = format!("rediss://localhost:{}", server.port());
    let trusted = lockrun()
        .env("SSL_CERT_FILE", certs.path().join("ca.crt"))
        .args(["--backend", &url, "--name", "tls", "--", "sh", "-c"])
        .arg("test -n \"$FENCING_TOKEN\"")
        .output()
        .unwrap();
    assert_eq!(code(&trusted), 0, "{}", text(&trusted.stderr));
    let untrusted = lockrun()
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args(["--backend", &url, "--name", "tls", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&untrusted), 69, "{}", text(&untrusted.stderr));
    assert!(
        text(&untrusted.stderr).contains(&format!("localhost:{}", server.port())),
        "{}",
        text(&untrusted.stderr)
    );
}
