//! What a run does around its command on every backend: `--timeout`, `--progress` while waiting,
//! the CI job's URL as the note, and nothing left running when lockrun itself is killed.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::asserts::assert_gone_within;
use crate::support::fixture::Fixture;
use crate::support::lockrun::Proc;
use crate::support::scene::Scene;
use crate::support::wait::{SOON, alive, code, number_in, text, wait_for_file, wait_until};

/// Guards against a runaway command that outlives `--timeout`, a wrong status, or a lock still
/// held once lockrun has exited.
pub fn timeout_stops_the_command_with_124_and_frees_the_lock<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let started = Instant::now();
    // TERM is ignored: only the KILL after --kill-after ends it.
    let out = s.run([
        "--name",
        "runaway",
        "--ttl",
        F::TTL,
        "--timeout",
        "1s",
        "--kill-after",
        "300ms",
        "--",
        "sh",
        "-c",
        "date +%s%N > started; trap '' TERM; echo $$ > pid; sleep 30 & wait; sleep 30",
    ]);
    let ended = SystemTime::now();
    assert_eq!(code(&out), 124, "{}", text(&out.stderr));
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1), "stopped early: {took:?}");
    // The limit counts from the command's start (acquiring first may take a while on a loaded
    // machine): TERM at 1 s, KILL 300 ms later, then the release.
    let command_started = UNIX_EPOCH + Duration::from_nanos(number_in(&s.path("started")));
    let ran = ended.duration_since(command_started).unwrap_or_default();
    assert!(
        ran < Duration::from_millis(1300) + Duration::from_secs(1),
        "stopped late: {ran:?} after the command started"
    );
    assert!(
        !alive(number_in(&s.path("pid")) as i32),
        "the command survived"
    );
    let out = s.run(["--name", "runaway", "--no-wait", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the lock was not free right after: {}",
        text(&out.stderr)
    );
}

/// Guards against a waiter that says nothing about why it waits: with a short `--progress`, lines
/// appear naming the holder (host, pid, note) and the place in line. Also against a holder that
/// reports a forced release nobody made.
pub fn progress_names_the_holder_and_the_place_in_line<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    // -v: a holder that nobody releases must not report a forced release (a listener for one
    // starting is not an announcement).
    let mut holder = s.hold("slow", "h", &["-v", "--ttl", F::TTL, "--note", "job 42"]);
    let mut first = s.waiter("slow", &["--ttl", F::TTL], "true");
    s.wait_waiters("slow", 1);
    let mut second = s.waiter("slow", &["--ttl", F::TTL, "--progress", "300ms"], "true");
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let expected = format!("held by {host} pid {}", holder.process.pid());
    assert!(
        wait_until(SOON, || second
            .stderr_so_far()
            .lines()
            .filter(|l| l.starts_with("lockrun: waiting for slow (") && l.contains(&expected))
            .count()
            >= 2),
        "no progress lines: {}",
        second.stderr_so_far()
    );
    // And at the pace asked: four more lines take 1.2 s (a look that waited for the waiter's
    // own sleep on its connection made each about a second late).
    let lines = |p: &Proc| p.stderr_so_far().lines().count();
    let seen = lines(&second);
    assert!(
        wait_until(Duration::from_secs(3), || lines(&second) >= seen + 4),
        "--progress 300ms fell behind: {}",
        second.stderr_so_far()
    );
    let said = second.stderr_so_far();
    assert!(said.contains("note job 42"), "{said}");
    if F::FIFO {
        assert!(said.contains("1 ahead of you"), "{said}");
    }
    // The default speaks once after a second, then every 30 s.
    let spoken = first.stderr_so_far().lines().count();
    assert!(
        spoken <= 1,
        "the default progress spoke {spoken} times: {}",
        first.stderr_so_far()
    );
    let held = holder.finish();
    assert_eq!(code(&held), 0);
    let said = text(&held.stderr);
    assert!(!said.contains("forced release"), "{said}");
    assert_eq!(code(&first.wait(SOON)), 0);
    assert_eq!(code(&second.wait(SOON)), 0);
}

/// Guards against a CI job's lock that does not say which job holds it, and against a blank
/// `--note ""` (no note, not even the job's URL) stored as an empty string instead of none.
pub fn the_ci_jobs_url_is_the_note<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let in_ci = |tag: &str, extra: &[&str]| {
        let mut cmd = s.holder_cmd(s.url(), "ci", &[&["--ttl", F::TTL], extra].concat());
        cmd.env("GITHUB_ACTIONS", "true")
            .env("GITHUB_SERVER_URL", "https://github.example")
            .env("GITHUB_REPOSITORY", "acme/app")
            .env("GITHUB_RUN_ID", "4711");
        crate::support::holder::Holder::spawn(cmd, s.dir(), tag).started()
    };
    let mut holder = in_ci("url", &[]);
    let status = s.wait_held("ci", 1);
    assert_eq!(
        status["holders"][0]["note"], "https://github.example/acme/app/actions/runs/4711",
        "{status}"
    );
    assert_eq!(code(&holder.finish()), 0);
    let mut holder = in_ci("blank", &["--note", ""]);
    let status = s.wait_held("ci", 1);
    assert_eq!(status["holders"][0]["note"], Value::Null, "{status}");
    let human = text(&s.run(["status", "ci"]).stdout);
    assert!(!human.contains("note"), "{human}");
    assert_eq!(code(&holder.finish()), 0);
}

/// Guards against a killed lockrun (SIGKILL, the OOM killer) whose command's children run on
/// beside the next holder — also those that left the command's process group (invariant 8).
pub fn nothing_outlives_a_killed_lockrun<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let script = "echo $FENCING_TOKEN > h.token; sleep 60 & echo $! > child; \
                  setsid sleep 61 & echo $! > escapee; echo $$ > h.pid; wait";
    let mut holder = crate::support::holder::Holder::spawn_running(
        s.holder_cmd(s.url(), "killed", &["--ttl", F::TTL]),
        s.dir(),
        "h",
        script,
    )
    .started();
    let child = wait_for_file(&s.path("child"), SOON)
        .trim()
        .parse::<i32>()
        .unwrap();
    let escapee = wait_for_file(&s.path("escapee"), SOON)
        .trim()
        .parse::<i32>()
        .unwrap();
    holder.signal(Signal::SIGKILL);
    holder.exit();
    let killed = Instant::now();
    for (what, pid) in [
        ("the command", holder.child_pid()),
        ("the child", child),
        ("the escapee", escapee),
    ] {
        assert_gone_within(Duration::from_secs(2), what, pid, "its lockrun");
    }
    assert!(killed.elapsed() < Duration::from_secs(2));
    // The next holder finds nothing of the first one running.
    let next = s.hold("killed", "n", &["--ttl", F::TTL, "--wait", "30s"]);
    assert!(next.token() > holder.token());
    assert!(s.overlaps().is_empty(), "{}", s.overlaps());
}
