//! Scenarios several backend modules run the same way, each then looking inside its own server in
//! its own terms: concurrent first use that creates the backend's storage, a brief restart ridden
//! through, a waiter that the server (or a pooler in front of it) turns away, let in once the
//! holder is gone, and readers and a writer queued among them, step by step. What every backend runs alike is in the conformance suite instead.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::fixture::Fixture;
use super::holder::Holder;
use super::lockrun::Proc;
use super::scene::Scene;
use super::wait::{SOON, code, number_in, text, wait_until};

/// Six lockruns on three names at once, the first ever on the backend of `s`: all succeed without
/// a word, however their creating the backend's tables (or schema) races. (The line a wait prints
/// after a second is not asked for: on a loaded machine the six may well wait that long.)
pub fn run_six_first_uses_at_once(s: &Scene) {
    let mut runs: Vec<Proc> = (0..6)
        .map(|i| {
            let name = format!("first{}", i % 3);
            s.spawn([
                "--name",
                &name,
                "--wait",
                "20s",
                "--progress",
                "0",
                "--",
                "true",
            ])
        })
        .collect();
    for run in &mut runs {
        let out = run.wait(Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
}

/// A holder renewing every 500 ms on a 4 s lease rides through a restart of `server` of about a
/// second, well inside its lease: a renewal reaches the restarted server (`renewed_since_restart`,
/// given the server once it is back, says whether the lease was extended since), the command is
/// never stopped, and its release frees the name.
pub fn assert_a_brief_restart_is_ridden_through<F: Fixture>(
    server: &mut F,
    renewed_since_restart: impl for<'a> FnOnce(&'a F) -> Box<dyn FnMut() -> bool + 'a>,
) {
    let s = Scene::new(server.url());
    let mut holder = s.hold("ride", "h", &["--ttl", "4s", "--renew", "500ms", "-vv"]);
    let before = holder.renewals().len();
    server.restart(false);
    // lockrun confirmed renewals sent to the restarted server, not only ones from before (which
    // a quick restart would leave in place): the first confirmed since the restart began may
    // have been answered just before it; the second was sent half a second after that answer.
    let confirmed = wait_until(SOON, || holder.renewals().len() >= before + 2);
    assert!(confirmed, "no renewal confirmed after the restart");
    // …and the server has it.
    let renewed = wait_until(SOON, renewed_since_restart(server));
    assert!(renewed, "no renewal after the restart");
    assert!(holder.command_alive(), "the command was stopped");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(s.status("ride")["holders"], serde_json::json!([]));
}

/// `waiter` (run with `-v`, its command `touch ran`) is turned away while `holder` holds, says it
/// tries again, and gets in once the holder is done.
pub fn assert_a_turned_away_waiter_gets_in(s: &Scene, mut holder: Holder, mut waiter: Proc) {
    let retried = wait_until(SOON, || waiter.stderr_so_far().contains("trying again in"));
    assert!(retried, "never turned away: {}", waiter.stderr_so_far());
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("ran").exists());
}

/// On the backend at `url`, with leases of `ttl`: three readers hold at once; a writer queues
/// behind them, and a reader that arrives after it queues behind the writer; the writer runs only
/// once the last reader is gone, and alone; the late reader runs after it; tokens rise in that
/// order. Returns the status while the three readers held, for what a backend shows of them.
pub fn assert_readers_share_and_a_waiting_writer_goes_first(url: &str, ttl: &str) -> Value {
    let s = Scene::new(url);
    let mut readers: Vec<Holder> = (0..3)
        .map(|i| s.hold("rw", &format!("r{i}"), &["--shared", "--ttl", ttl]))
        .collect();
    let held = s.wait_held("rw", 3);
    assert!(
        held["holders"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["mode"] == "shared"),
        "{held}"
    );
    let mut writer = s.waiter(
        "rw",
        &["--ttl", ttl],
        "echo $FENCING_TOKEN > w.token; sleep 0.3; touch w.done",
    );
    s.wait_waiters("rw", 1);
    let mut late = s.waiter(
        "rw",
        &["--shared", "--ttl", ttl],
        "echo $FENCING_TOKEN > late.token; test -e w.done && touch late.after-writer",
    );
    let queued = s.wait_waiters("rw", 2);
    assert_eq!(queued["queue"][0]["mode"], "exclusive", "{queued}");
    assert_eq!(queued["queue"][1]["mode"], "shared", "{queued}");
    let reader_tokens: Vec<u64> = readers.iter().map(Holder::token).collect();
    let last = readers.pop().unwrap();
    for reader in &mut readers {
        assert_eq!(code(&reader.finish()), 0);
    }
    let early = wait_until(Duration::from_millis(300), || s.path("w.token").exists());
    assert!(!early, "the writer ran beside a reader");
    assert_eq!(code(&{ last }.finish()), 0);
    assert_eq!(code(&writer.wait(SOON)), 0);
    assert_eq!(code(&late.wait(SOON)), 0);
    assert!(
        s.path("late.after-writer").exists(),
        "the late reader ran before the writer"
    );
    let (w, l) = (
        number_in(&s.path("w.token")),
        number_in(&s.path("late.token")),
    );
    assert!(
        reader_tokens.iter().all(|&r| r < w) && w < l,
        "{reader_tokens:?} {w} {l}"
    );
    held
}

/// A first use while `creator`, a client that has taken the lock under which lockrun creates its
/// tables, keeps it for `held`: the run waits for it quietly and then runs (creating the tables
/// has a budget of its own, not a request's few seconds).
pub fn assert_a_first_use_waits_for_a_slow_creator(
    s: &Scene,
    creator: std::process::Child,
    held: Duration,
) {
    let started = Instant::now();
    let out = s.run(["--name", "first", "--progress", "0", "--", "true"]);
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "a quiet wait for the tables");
    assert!(
        took >= held - Duration::from_secs(1),
        "the run did not wait for the tables' lock ({took:?})"
    );
    let creator = creator.wait_with_output().expect("the client ends");
    assert!(
        creator.status.success(),
        "the client holding the tables' lock failed"
    );
}
