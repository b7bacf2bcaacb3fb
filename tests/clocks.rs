//! Clocks: lease deadlines live on the boot clock, so a wall-clock step of an hour either way in
//! the middle of a run changes nothing; the same step applied to the monotonic clocks as well
//! (which the kernel never does) is seen as the lease running out. Uses libfaketime, from
//! Debian's `faketime` package, with a time file re-read on every call.

use std::time::Duration;

use crate::support::fixture::Fixture;
use crate::support::lockrun::Proc;
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
use crate::support::wait::{SOON, code, text};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Runs a 2.4 s command under a 600 ms lease while the faked clock steps through `steps`, one
/// every 800 ms. `monotonic_too` also fakes the monotonic and boot clocks.
fn run_through_clock_steps(w: &Scene, steps: &[&str], monotonic_too: bool) -> std::process::Output {
    let offset = w.path("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let mut cmd = w.cmd([
        "-v",
        "--name",
        "clock",
        "--ttl",
        "600ms",
        "--",
        "sh",
        "-c",
        "sleep 2.4",
    ]);
    cmd.env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", if monotonic_too { "0" } else { "1" });
    let mut run = Proc::spawn(&mut cmd);
    for step in steps {
        std::thread::sleep(Duration::from_millis(800));
        std::fs::write(&offset, format!("{step}\n")).unwrap();
    }
    run.wait(SOON)
}

#[test]
fn a_wall_clock_step_of_an_hour_changes_nothing() {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        eprintln!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let server = RedisServer::start();
    let w = Scene::new(server.url());
    let out = run_through_clock_steps(&w, &["+3600", "-3600"], false);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn the_same_step_on_the_monotonic_clocks_reads_as_a_lost_lease() {
    // The control: proves the run above went through the faked clock at all.
    if !std::path::Path::new(LIBFAKETIME).exists() {
        eprintln!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let server = RedisServer::start();
    let w = Scene::new(server.url());
    let out = run_through_clock_steps(&w, &["+3600"], true);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}
