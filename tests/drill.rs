//! `lockrun drill` beyond what the conformance suite checks on every backend
//! (`conformance::*::the_drill_passes`): its input, a name already in use, a password it must not
//! print, and the hidden probe it runs as the stale writer.

use crate::support::asserts::{assert_hidden, assert_said};
use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{lockrun, output};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
use crate::support::wait::{SOON, code, text};

#[test]
fn passes_with_a_password_that_it_never_prints() {
    // The holders get the URL through a private --backend-file, never on a command line.
    let server = RedisServer::with_password("hunter2").expect("Redis has passwords");
    let s = Scene::new(server.url());
    let out = s.run(["drill", "--ttl", "1s"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 0, "{stdout}\n{stderr}");
    assert_hidden(&format!("{stdout}{stderr}"), &["hunter2"]);
    assert!(stdout.contains("redis://***@127.0.0.1"), "{stdout}");
}

#[test]
fn bad_input_and_a_name_in_use_run_nothing() {
    let env = Scene::file();
    for args in [
        &["drill", "--ttl", "0"][..],
        &["drill", "--ttl", "soon"],
        &["drill", "--name", "/bad"],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), 64, "{args:?}: {}", text(&out.stderr));
        assert!(out.stdout.is_empty());
    }
    let out = output(lockrun().args(["--backend", "redis://127.0.0.1:1", "drill"]));
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let _holder = env.hold("taken", "h", &[]);
    let out = env.run(["drill", "--name", "taken"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert_said(&out, "in use");
}

#[test]
fn the_probe_is_hidden_and_fences() {
    let env = Scene::file();
    let help = text(&env.run(["--help"]).stdout);
    assert!(help.contains("drill"), "{help}");
    assert!(!help.contains("drill-probe"), "{help}");
    let store = env.path("store");
    let probe = |token: &str| {
        code(&output(
            lockrun().arg("drill-probe").arg(&store).args([token, "v"]),
        ))
    };
    assert_eq!(probe("5"), 0);
    assert_eq!(probe("5"), 0);
    assert_eq!(probe("4"), 3);
    assert_eq!(probe("6"), 0);
}

/// Guards against a drill ended by a forwarded signal other than INT or TERM leaving its
/// directory behind (with the backend URL, password and all, in it): each gets the same cleanup.
#[test]
fn a_drill_ended_by_hangup_cleans_up_after_itself() {
    let env = Scene::file();
    let mut drill = env.spawn(["drill"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = drill.pid();
    drill.signal(nix::sys::signal::Signal::SIGHUP);
    let out = drill.wait(SOON);
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 128 + 1, "{stderr}");
    assert!(
        stderr.contains("interrupted by SIGHUP during the drill"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("lockrun-drill-{pid}-"))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
