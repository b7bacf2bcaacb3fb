//! Clocks: lease deadlines live on the boot clock, so a wall-clock step of an hour either way in
//! the middle of a run changes nothing; the same step applied to the monotonic clocks as well
//! (which the kernel never does) is seen as the lease running out. Uses libfaketime with a time
//! file re-read on every call. Each step is made only once the lock is held (the command says so)
//! and judged over renewals lockrun reports (`-vv`), never after a fixed sleep.

use std::path::Path;
use std::process::Output;

use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{Proc, RUN_LIMIT};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
use crate::support::tools;
use crate::support::wait::{SOON, code, text, wait_for_file, wait_until};

/// How many renewals lockrun has reported so far.
fn renewals(run: &Proc) -> usize {
    run.stderr_so_far().matches("renewed").count()
}

/// Starts a holder under a 600 ms lease with the clock faked through `library`; once its command
/// runs, steps the faked clock through `steps`, each followed by two renewals, then lets the
/// command end. `monotonic_too` fakes the monotonic and boot clocks as well: lockrun's timers,
/// armed on the kernel's real clock, then wake it an hour late, so it can only see the step when
/// the command ends, which follows at once.
fn run_through_clock_steps(library: &Path, steps: &[&str], monotonic_too: bool) -> Output {
    let server = RedisServer::start();
    let s = Scene::new(server.url());
    let offset = s.path("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    // With the monotonic clocks stepped, lockrun may kill the command before it ends; a `sleep`
    // it had started would then be a descendant still dying, and lockrun's wait for it (on a
    // timer that now wakes an hour late) would outlast the test. So there the command waits
    // without starting any process (briefly: `done` follows the step at once).
    let script = match monotonic_too {
        true => "echo held > held; while [ ! -e done ]; do :; done",
        false => "echo held > held; while [ ! -e done ]; do sleep 0.02; done",
    };
    let mut cmd = s.cmd([
        "-vv", "--name", "clock", "--ttl", "600ms", "--", "sh", "-c", script,
    ]);
    cmd.env("LD_PRELOAD", library)
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", if monotonic_too { "0" } else { "1" });
    let mut run = Proc::spawn(&mut cmd);
    wait_for_file(&s.path("held"), SOON);
    for step in steps {
        std::fs::write(&offset, format!("{step}\n")).unwrap();
        if !monotonic_too {
            let before = renewals(&run);
            wait_until(SOON, || renewals(&run) >= before + 2 || run.exited());
            assert!(
                renewals(&run) >= before + 2,
                "lockrun stopped renewing after the step to {step}:\n{}",
                run.stderr_so_far()
            );
        }
    }
    std::fs::write(s.path("done"), "").unwrap();
    run.wait(RUN_LIMIT)
}

#[test]
fn a_wall_clock_step_of_an_hour_changes_nothing() {
    let Some(library) = tools::libfaketime() else {
        return;
    };
    let out = run_through_clock_steps(&library, &["+3600", "-3600"], false);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(renewal_lines(&out) >= 4, "{}", text(&out.stderr));
}

#[test]
fn the_same_step_on_the_monotonic_clocks_reads_as_a_lost_lease() {
    // The control: proves the run above went through the faked clock at all.
    let Some(library) = tools::libfaketime() else {
        return;
    };
    let out = run_through_clock_steps(&library, &["+3600"], true);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}

fn renewal_lines(out: &Output) -> usize {
    text(&out.stderr).matches("renewed").count()
}
