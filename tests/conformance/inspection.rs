//! What lockrun shows and what it refuses: `status`/`list` in the contract's shape, passwords that
//! never show, backends that cannot be reached or never answer, malformed URLs, and `drill`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use nix::sys::signal::Signal;

use crate::support::asserts::{assert_ended_without_running, assert_hidden, assert_one_line};
use crate::support::fixture::Fixture;
use crate::support::lockrun::{Proc, lockrun, output};
use crate::support::scene::Scene;
use crate::support::tools::chmod;
use crate::support::wait::{SOON, code, text, wait_until};

/// The keys of an object, sorted.
fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    keys
}

/// Guards against `status` and `list` drifting from the contract's JSON (plus the line of waiters,
/// `queue`, and each holder's `mode`: issues 15 and 16), showing a released name, mixing up
/// nested names, or reading a prefix as a pattern.
pub fn status_and_list_show_the_contract_shape<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("ci/deploy", "h", &["--ttl", F::TTL, "--note", "deploy #42"]);
    let status = s.wait_held("ci/deploy", 1);
    assert_eq!(
        keys(&status),
        ["held", "holders", "limit", "name", "queue", "waiters"],
        "{status}"
    );
    assert_eq!(status["name"], "ci/deploy");
    assert_eq!(status["held"], true);
    assert_eq!(status["limit"], 1);
    assert_eq!(status["waiters"], 0);
    let h = &status["holders"][0];
    assert_eq!(
        keys(h),
        [
            "acquired_at",
            "expires_in_ms",
            "host",
            "mode",
            "note",
            "pid",
            "slot",
            "token",
            "user"
        ],
        "{h}"
    );
    assert_eq!(h["mode"], "exclusive");
    assert_eq!(h["token"], holder.token());
    assert_eq!(h["pid"], holder.process.pid());
    assert_eq!(h["note"], "deploy #42");
    assert_eq!(h["mode"], "exclusive");
    assert_eq!(h["slot"], 0);
    assert!(h["host"].as_str().is_some_and(|s| !s.is_empty()), "{h}");
    assert!(h["user"].as_str().is_some_and(|s| !s.is_empty()), "{h}");
    let left = h["expires_in_ms"].as_u64().expect("expires_in_ms");
    assert!(left > 0 && u128::from(left) <= F::ttl().as_millis(), "{h}");
    let acquired = h["acquired_at"].as_str().expect("acquired_at");
    assert!(
        humantime::parse_rfc3339(acquired).is_ok() && acquired.ends_with('Z'),
        "{h}"
    );
    let human = text(&s.run(["status", "ci/deploy"]).stdout);
    assert!(
        human.contains("held") && human.contains("deploy #42"),
        "{human}"
    );

    // A name nested under the held one is another lock.
    let out = s.run(["--name", "ci/deploy/x", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let list = s.list(&[]);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["name"], "ci/deploy");
    assert_eq!(s.list(&["ci/"]).as_array().map(Vec::len), Some(1));
    assert_eq!(s.list(&["other"]), json!([]));
    // Pattern characters in a prefix are plain characters.
    assert_eq!(s.list(&["c_"]), json!([]));
    assert_eq!(s.list(&["c%"]), json!([]));

    let mut waiter = s.waiter("ci/deploy", &["--note", "next"], "true");
    let status = s.wait_waiters("ci/deploy", 1);
    assert_eq!(status["holders"][0]["token"], holder.token());
    let w = &status["queue"][0];
    assert_eq!(
        keys(w),
        ["host", "mode", "note", "pid", "since", "user"],
        "{w}"
    );
    assert_eq!(w["pid"], waiter.pid(), "{w}");
    assert_eq!(w["note"], "next", "{w}");
    // Since when it waits: a heartbeat (every second or so) does not move it.
    std::thread::sleep(Duration::from_millis(2100));
    let later = s.status("ci/deploy");
    assert_eq!(later["queue"][0]["since"], w["since"], "{later}");
    assert_eq!(code(&holder.finish()), 0);
    assert_eq!(code(&waiter.wait(SOON)), 0);
    let status = s.status("ci/deploy");
    assert_eq!(
        status,
        json!({"name": "ci/deploy", "held": false, "limit": 1, "waiters": 0, "holders": [], "queue": []})
    );
    assert_eq!(s.list(&[]), json!([]));
    assert!(text(&s.run(["status", "ci/deploy"]).stdout).contains("free"));
}

/// The longest name the contract allows: 200 bytes, in nested segments, with every character a
/// name may hold.
fn longest_name() -> String {
    let mut alphabet = "AZaz09._:-".chars().cycle();
    let mut segment = |len: usize| -> String { (&mut alphabet).take(len).collect() };
    let name = [
        segment(40),
        segment(40),
        segment(40),
        segment(40),
        segment(36),
    ]
    .join("/");
    assert_eq!(name.len(), 200);
    name
}

/// Guards against a backend whose keys, rows, paths, files or channels cannot take the longest
/// name the contract allows: two holders of it under `--limit 2`, `status` and `list` (by a
/// prefix) naming it exactly, and a `--min-interval` waiter that the first release wakes.
pub fn the_longest_name_works_end_to_end<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let name = longest_name();
    let limit = ["--ttl", F::TTL, "--limit", "2"];
    let mut first = s.hold(&name, "first", &limit);
    let mut second = s.hold(&name, "second", &limit);
    let status = s.wait_held(&name, 2);
    assert_eq!(status["name"], name.as_str(), "{status}");
    assert_eq!(status["limit"], 2, "{status}");
    let mut slots: Vec<u64> = status["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["slot"].as_u64())
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1], "{status}");
    let list = s.list(&[&name[..120]]);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["name"], name.as_str(), "{list}");

    let mut waiter = s.waiter(
        &name,
        &["--ttl", F::TTL, "--limit", "2", "--min-interval", "1ms"],
        "echo ran > waiter.ran",
    );
    s.wait_waiters(&name, 1);
    assert_eq!(code(&first.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("waiter.ran").exists());
    assert_eq!(code(&second.finish()), 0);
    assert_eq!(s.status(&name)["held"], false);
}

/// Guards against a password reaching a message (`-v` included), `status` or `list` output, or
/// the child's environment, however lockrun was given it (invariant 7). Backends without
/// passwords refuse credentials in their URL without echoing them.
pub fn passwords_never_leak<F: Fixture>() {
    const PASSWORD: &str = "s3cr3t-pw";
    let Some(fx) = F::with_password(PASSWORD) else {
        return credentials_are_refused::<F>(PASSWORD);
    };
    let s = Scene::new(fx.url());
    let file = s.path("backend");
    std::fs::write(&file, format!("{}\n", fx.url())).unwrap();
    chmod(&file, 0o600);
    let mut seen = String::new();
    for (i, given) in ["--backend", "LOCKRUN_BACKEND", "--backend-file"]
        .iter()
        .enumerate()
    {
        let mut cmd = lockrun();
        match *given {
            "--backend" => cmd.args(["--backend", s.url()]),
            "LOCKRUN_BACKEND" => cmd.env("LOCKRUN_BACKEND", s.url()),
            _ => cmd.arg("--backend-file").arg(&file),
        };
        let env = format!("env{i}");
        cmd.current_dir(s.dir())
            .args(["-vv", "--name", "pw", "--", "sh", "-c"])
            .arg(format!("env > {env}"));
        let out = output(&mut cmd);
        assert_eq!(code(&out), 0, "{given}: {}", text(&out.stderr));
        seen += &text(&out.stderr);
        seen += &std::fs::read_to_string(s.path(&env)).unwrap();
    }
    let _holder = s.hold("pw", "h", &["--ttl", F::TTL]);
    for args in [
        &["status", "pw"][..],
        &["status", "pw", "--json"],
        &["list"],
        &["list", "--json"],
        &["-v", "--name", "pw", "--no-wait", "--", "true"],
    ] {
        let out = s.run(args);
        seen += &text(&out.stdout);
        seen += &text(&out.stderr);
    }
    let wrong = s.url().replace(PASSWORD, "wrong-pw");
    let out = output(&mut s.cmd_via(&wrong, ["--name", "pw", "--", "touch", "ran"]));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    seen += &text(&out.stderr);
    assert!(!s.path("ran").exists());
    assert!(
        seen.contains("lockrun: ") && seen.contains("FENCING_TOKEN="),
        "nothing was checked"
    );
    assert_hidden(&seen, &[PASSWORD, "wrong-pw"]);
}

/// A backend without passwords: a URL with credentials is a usage error that does not show them,
/// however it is given.
fn credentials_are_refused<F: Fixture>(password: &str) {
    let url = F::url_at(&format!("u:{password}@localhost"));
    let s = Scene::new(&url);
    let file = s.path("backend");
    std::fs::write(&file, &url).unwrap();
    chmod(&file, 0o600);
    for given in ["--backend", "LOCKRUN_BACKEND", "--backend-file"] {
        let mut cmd = lockrun();
        match given {
            "--backend" => cmd.args(["--backend", &url]),
            "LOCKRUN_BACKEND" => cmd.env("LOCKRUN_BACKEND", &url),
            _ => cmd.arg("--backend-file").arg(&file),
        };
        cmd.current_dir(s.dir())
            .args(["--name", "pw", "--", "touch", "ran"]);
        let out = output(&mut cmd);
        let line = assert_one_line(&out, 64, "lockrun: ");
        assert_hidden(&line, &[password]);
    }
    assert!(!s.path("ran").exists());
}

/// Guards against an unreachable backend running the command, taking long to say so, or naming
/// anything but the endpoint; for `run`, `status`, `list` and `release` (invariants 6 and 7).
pub fn unreachable_backend_exits_69_naming_it<F: Fixture>() {
    let (url, endpoint) = F::unreachable();
    let s = Scene::new(url);
    for args in [
        &["--name", "x", "--", "touch", "ran"][..],
        &["status", "x"],
        &["list"],
        &["release", "x", "--force"],
    ] {
        let started = Instant::now();
        let out = s.run(args);
        let line = assert_one_line(&out, 69, &endpoint);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_hidden(&line, &["hunter2"]);
        // A closed port says so, in the system's words, not in a client library's layers.
        if endpoint.starts_with("127.0.0.1:") {
            assert!(line.contains(": connection refused"), "{args:?}: {line}");
        }
    }
    assert!(!s.path("ran").exists());
}

/// Guards against a server that accepts connections but never answers making lockrun hang or
/// run the command: it exits 69 within seconds, naming the endpoint. Without a server: a state
/// directory lockrun must not use fails as fast, naming the problem.
pub fn silent_server_at_startup_exits_69<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let started = Instant::now();
    match fx.proxied() {
        Some((proxy, url)) => {
            proxy.blackhole();
            s.refuses(&url, "x", 69, &format!("127.0.0.1:{}", proxy.port()));
            assert!(proxy.accepted() > 0, "lockrun never connected to the proxy");
        }
        None => {
            let state = s.url().strip_prefix("file://").expect("a file URL");
            std::fs::create_dir_all(state).unwrap();
            chmod(state, 0o777);
            s.refuses(s.url(), "x", 69, "world-writable");
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "gave up only after {:?}",
        started.elapsed()
    );
}

/// Guards against a signal being held until a silent server's timeouts run out: Ctrl-C or SIGTERM
/// while lockrun waits for a server that never answers (to open the backend, or to a try) ends
/// the run at once with the signal's status, and nothing runs. Without a server: a signal while
/// waiting behind a holder does the same.
pub fn a_signal_while_the_server_is_silent_ends_the_run_at_once<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let (mut run, _proxy, _holder) = match fx.proxied() {
        Some((proxy, url)) => {
            proxy.blackhole();
            let run = Proc::spawn(&mut s.cmd_via(&url, ["--name", "x", "--", "touch", "ran"]));
            let connected = wait_until(SOON, || proxy.accepted() > 0);
            assert!(connected, "lockrun never connected to the proxy");
            (run, Some(proxy), None)
        }
        None => {
            let holder = s.hold("x", "h", &[]);
            let run = s.spawn(["--name", "x", "--", "touch", "ran"]);
            s.wait_waiters("x", 1);
            (run, None, Some(holder))
        }
    };
    run.signal(Signal::SIGTERM);
    let out = run.wait(SOON);
    assert_ended_without_running(&s, &out, 128 + 15, "interrupted by SIGTERM");
}

/// Guards against a malformed URL being echoed with its password or read as anything but a usage
/// error (exit 64): a password with an unencoded `/`, `#` or `?` breaks the URL; one with `@` or
/// `:` may be read whole (then the error names only the endpoint); no part of the password shows
/// either way. Each backend adds its own malformed URLs.
pub fn malformed_urls_exit_64_without_the_password<F: Fixture>() {
    let s = Scene::new(F::url_at("127.0.0.1:1"));
    for c in ['/', '#', '?', '@', ':'] {
        let url = F::url_at(&format!("u:Sec1{c}Ret2@127.0.0.1:1"));
        let out = output(&mut s.cmd_via(&url, ["--name", "x", "--", "touch", "ran"]));
        let stderr = text(&out.stderr);
        let status = match c {
            '@' | ':' if code(&out) == 69 => 69,
            _ => 64,
        };
        let named = if status == 69 {
            "127.0.0.1:1"
        } else {
            "lockrun: "
        };
        assert_one_line(&out, status, named);
        assert_hidden(&stderr, &["Sec1", "Ret2"]);
    }
    for (url, word) in F::malformed() {
        assert_hidden(&s.refuses(&url, "x", 64, &word), &["hunter2"]);
    }
    assert!(!s.path("ran").exists());
}

/// Guards against `lockrun drill` failing where the pause drill should pass, or passing without
/// what it claims: a takeover with a higher token and a stale writer stopped and fenced off
/// (kernel locks: no takeover), and the server's clock read where the backend has one.
pub fn the_drill_passes<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let out = s.run(["drill", "--ttl", "1s", "--json"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        code(&out),
        0,
        "drill failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "pass", "{report}");
    assert_eq!(report["failed"], json!([]), "{report}");
    let checks = report["checks"].as_array().expect("checks");
    assert!(
        checks.len() >= 7 && checks.iter().all(|c| c["result"] != "fail"),
        "{report}"
    );
    assert!(report["round_trip_ms"].is_f64(), "{report}");
    assert!(
        report["granted_ttl_ms"]
            .as_f64()
            .is_some_and(|ms| ms >= 1000.0),
        "{report}"
    );
    let a = report["a"]["token"].as_u64().expect("A's token");
    assert_eq!(report["kernel_lock"], !F::EXPIRES, "{report}");
    if F::EXPIRES {
        let b = report["b"]["token"].as_u64().expect("B took over");
        assert!(b > a, "{report}");
        assert_eq!(report["a"]["exit_code"], 76, "{report}");
        assert_eq!(report["b"]["exit_code"], 0, "{report}");
        assert!(
            report["stale_writes_rejected"].as_u64() >= Some(1),
            "{report}"
        );
        assert!(report["b"]["takeover_after_pause_ms"].is_f64(), "{report}");
        assert!(report["a"]["stopped_after_resume_ms"].is_f64(), "{report}");
    } else {
        assert_eq!(report["a"]["exit_code"], 0, "{report}");
        assert_eq!(report["b"]["exit_code"], 75, "{report}");
    }
    assert_eq!(
        report["clock_skew_ms"].is_f64(),
        F::SERVER_CLOCK,
        "{report}"
    );
    assert_eq!(s.list(&[]), json!([]), "the drill left a lock held");

    let out = s.run(["drill", "--ttl", "1s"]);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.ends_with("drill: PASS\n"), "{stdout}");
    assert_eq!(
        stdout.contains("no server clock"),
        !F::SERVER_CLOCK,
        "{stdout}"
    );
    let outcome = if F::EXPIRES {
        "REJECTED"
    } else {
        "kernel lock held"
    };
    assert!(stdout.contains(outcome), "{stdout}");
}
