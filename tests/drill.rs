//! `lockrun drill`, run for real: two real lockrun holders against a private file state directory,
//! a real `redis-server`, a real PostgreSQL and a real etcd member, each started per test.

use crate::support::common::{Drive, FileEnv, code, text};
use crate::support::etcd_cluster::EtcdCluster;
use crate::support::postgres_server::PgServer;
use crate::support::redis_server::RedisServer;
use crate::support::world::World;

/// Runs the drill and asserts that it passed; returns its stdout.
fn passes(out: std::process::Output) -> String {
    let stdout = text(&out.stdout);
    // Shown with --nocapture: what the drill printed for each backend.
    println!("{stdout}");
    assert_eq!(
        code(&out),
        0,
        "drill failed:\n{stdout}\nstderr: {}",
        text(&out.stderr)
    );
    stdout
}

/// The `--json` report, parsed, with the fields every backend reports.
fn report(out: std::process::Output) -> serde_json::Value {
    let stdout = passes(out);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "pass", "{report}");
    assert_eq!(report["failed"], serde_json::json!([]), "{report}");
    assert!(report["a"]["token"].is_u64(), "{report}");
    assert!(report["granted_ttl_ms"].is_f64(), "{report}");
    assert!(report["round_trip_ms"].is_f64(), "{report}");
    let checks = report["checks"].as_array().expect("checks");
    assert!(checks.len() >= 7, "{report}");
    assert!(checks.iter().all(|c| c["result"] != "fail"), "{report}");
    report
}

/// On a networked backend: B took over with a higher token, A's command was stopped on waking
/// and A exited 76, and the stale writes were rejected.
fn assert_takeover(report: &serde_json::Value) {
    let a = report["a"]["token"].as_u64().unwrap();
    let b = report["b"]["token"].as_u64().expect("B took over");
    assert!(b > a, "{report}");
    assert_eq!(report["a"]["exit_code"], 76, "{report}");
    assert_eq!(report["b"]["exit_code"], 0, "{report}");
    assert!(
        report["stale_writes_rejected"].as_u64().unwrap() >= 1,
        "{report}"
    );
    assert!(report["b"]["takeover_after_pause_ms"].is_f64(), "{report}");
    assert!(report["a"]["stopped_after_resume_ms"].is_f64(), "{report}");
    assert_eq!(report["kernel_lock"], false);
}

#[test]
fn passes_on_the_file_backend_where_no_takeover_is_possible() {
    let env = FileEnv::new();
    let stdout = passes(env.run(["drill", "--ttl", "1s"]));
    assert!(stdout.contains("kernel lock held"), "{stdout}");
    assert!(stdout.contains("no server clock"), "{stdout}");
    assert!(stdout.ends_with("drill: PASS\n"), "{stdout}");

    let report = report(env.run(["drill", "--ttl", "1s", "--json"]));
    assert_eq!(report["kernel_lock"], true);
    assert_eq!(report["b"]["exit_code"], 75, "{report}");
    assert_eq!(report["a"]["exit_code"], 0, "{report}");
    assert!(report["clock_skew_ms"].is_null(), "{report}");
    // Nothing of the drill's is left holding a lock.
    assert!(env.run(["list", "--json"]).stdout.starts_with(b"[]"));
}

#[test]
fn passes_on_redis() {
    let w = World::<RedisServer>::new();
    let stdout = passes(w.run(["drill", "--ttl", "1s"]));
    assert!(stdout.contains("REJECTED"), "{stdout}");
    assert!(stdout.contains("server clock"), "{stdout}");
    let report = report(w.run(["drill", "--ttl", "1s", "--json"]));
    assert_takeover(&report);
    assert!(report["clock_skew_ms"].is_f64(), "{report}");
}

#[test]
fn passes_with_a_password_that_it_never_prints() {
    // The holders get the URL through a private --backend-file, never on a command line.
    let w = World::on(RedisServer::with_password("hunter2"));
    let out = w.run(["drill", "--ttl", "1s"]);
    assert!(
        !text(&out.stderr).contains("hunter2"),
        "{}",
        text(&out.stderr)
    );
    let stdout = passes(out);
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(stdout.contains("redis://:***@127.0.0.1"), "{stdout}");
}

#[test]
fn passes_on_postgres() {
    let w = World::<PgServer>::new();
    let stdout = passes(w.run(["drill", "--ttl", "1s"]));
    assert!(stdout.contains("REJECTED"), "{stdout}");
    let report = report(w.run(["drill", "--ttl", "1s", "--json"]));
    assert_takeover(&report);
    assert!(report["clock_skew_ms"].is_f64(), "{report}");
}

#[test]
fn passes_on_etcd_with_the_ttl_it_grants() {
    let w = World::<EtcdCluster>::new();
    let stdout = passes(w.run(["drill", "--ttl", "1s"]));
    assert!(stdout.contains("no server clock"), "{stdout}");
    let report = report(w.run(["drill", "--ttl", "1s", "--json"]));
    assert_takeover(&report);
    // etcd has no clock to read; it may raise a short lease to its minimum.
    assert!(report["clock_skew_ms"].is_null(), "{report}");
    assert!(
        report["granted_ttl_ms"].as_f64().unwrap() >= 1000.0,
        "{report}"
    );
}

#[test]
fn bad_input_and_a_name_in_use_run_nothing() {
    let env = FileEnv::new();
    for args in [
        &["drill", "--ttl", "0"][..],
        &["drill", "--ttl", "soon"],
        &["drill", "--name", "/bad"],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), 64, "{args:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty());
    }
    let out = crate::support::common::lockrun()
        .args(["--backend", "redis://127.0.0.1:1", "drill"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let mut holder = env.spawn(["--name", "taken", "--", "sleep", "30"]);
    assert!(crate::support::common::wait_until(
        crate::support::world::SOON,
        || { env.status("taken")["held"] == true }
    ));
    let out = env.run(["drill", "--name", "taken"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("in use"),
        "{}",
        text(&out.stderr)
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn the_probe_is_hidden_and_fences() {
    let env = FileEnv::new();
    let help = text(&env.run(["--help"]).stdout);
    assert!(help.contains("drill"), "{help}");
    assert!(!help.contains("drill-probe"), "{help}");
    let store = env.scratch("store");
    let probe = |token: &str| {
        let mut cmd = crate::support::common::lockrun();
        code(
            &cmd.arg("drill-probe")
                .arg(&store)
                .args([token, "v"])
                .output()
                .unwrap(),
        )
    };
    assert_eq!(probe("5"), 0);
    assert_eq!(probe("5"), 0);
    assert_eq!(probe("4"), 3);
    assert_eq!(probe("6"), 0);
}
