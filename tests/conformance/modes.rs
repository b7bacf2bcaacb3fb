//! The modes every backend honours the same way: `--shared` (readers together, writers alone,
//! first come first served so writers are never starved), `--supersede` (newest-wins waiting) and
//! `--min-interval` (once per period across the fleet, by the backend's clock).

use std::time::{Duration, Instant};

use crate::support::fixture::Fixture;
use crate::support::holder::Holder;
use crate::support::lockrun::Proc;
use crate::support::scene::Scene;
use crate::support::wait::{SOON, code, text, wait_until};

/// The critical section of the mode tests: logs `+ MODE ID TOKEN` when it starts and `- MODE ID`
/// when it ends, and holds for `hold` seconds in between.
fn section(mode: &str, id: &str, hold: &str) -> String {
    format!(
        "echo \"+ {mode} {id} $FENCING_TOKEN\" >> log; sleep {hold}; echo \"- {mode} {id}\" >> log"
    )
}

/// Replays `log`: the most readers at once, and whether a writer ever ran beside anyone.
fn replay(log: &str) -> (usize, Vec<String>) {
    let mut readers = 0usize;
    let mut writers = 0usize;
    let mut peak = 0usize;
    let mut violations = Vec::new();
    for line in log.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["+", "r", ..] => {
                readers += 1;
                if writers > 0 {
                    violations.push(format!("reader beside a writer: {line}"));
                }
            }
            ["+", "w", ..] => {
                if writers > 0 || readers > 0 {
                    violations.push(format!(
                        "writer beside {writers} writers, {readers} readers: {line}"
                    ));
                }
                writers += 1;
            }
            ["-", "r", ..] => readers -= 1,
            ["-", "w", ..] => writers -= 1,
            _ => panic!("unexpected log line {line:?}"),
        }
        peak = peak.max(readers);
    }
    (peak, violations)
}

/// Guards against shared holders that exclude each other, a writer that runs beside readers or
/// another writer, and tokens that do not rise across modes.
pub fn readers_share_and_writers_run_alone<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut runs = Vec::new();
    for round in 0..2 {
        for i in 0..3 {
            let id = format!("r{round}{i}");
            let reader = section("r", &id, "0.4");
            runs.push(s.waiter("rw", &["--shared", "--ttl", F::TTL], &reader));
        }
        let writer = section("w", &format!("w{round}"), "0.2");
        runs.push(s.waiter("rw", &["--ttl", F::TTL], &writer));
    }
    for run in &mut runs {
        let out = run.wait(Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(s.path("log")).unwrap();
    let (peak, violations) = replay(&log);
    assert!(violations.is_empty(), "{violations:?}\n{log}");
    assert!(peak >= 2, "readers never ran together:\n{log}");
    let tokens: Vec<u64> = log
        .lines()
        .filter(|l| l.starts_with('+'))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 8);
    let mut sorted = tokens.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 8, "tokens repeat across modes: {tokens:?}");
}

/// Guards against writer starvation: a writer queued behind running readers gets in before
/// readers that arrived after it (plain `flock -s` lets them in first).
pub fn a_waiting_writer_goes_before_later_readers<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let first = "echo \"+ r r1\" >> log; echo $FENCING_TOKEN > r1.token; echo $$ > r1.pid; \
                 while [ ! -e r1.release ]; do sleep 0.02; done; echo \"- r r1\" >> log";
    let mut first = Holder::spawn_running(
        s.holder_cmd(s.url(), "starve", &["--shared", "--ttl", F::TTL]),
        s.dir(),
        "r1",
        first,
    )
    .started();
    let mut writer = s.waiter("starve", &["--ttl", F::TTL], &section("w", "w1", "0.1"));
    s.wait_waiters("starve", 1);
    let late_reader = section("r", "r2", "0.1");
    let mut late = s.waiter("starve", &["--shared", "--ttl", F::TTL], &late_reader);
    s.wait_waiters("starve", 2);
    assert_eq!(code(&first.finish()), 0);
    for run in [&mut writer, &mut late] {
        let out = run.wait(Duration::from_secs(30));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(s.path("log")).unwrap();
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with('+'))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(starts, ["r1", "w1", "r2"], "served out of order:\n{log}");
    let status = s.status("starve");
    assert_eq!(status["held"], false, "{status}");
}

/// Guards against shared holders shown without their mode or in a slot other than the one
/// their command was given (readers share slot 0), and a crashed reader whose share outlives it
/// by more than a lease (a kernel lock: not at all).
pub fn status_shows_modes_and_a_crashed_reader_frees_its_share<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let shared = ["--shared", "--ttl", F::TTL];
    let reader = s.hold("shares", "r", &shared);
    let mut second = s.hold("shares", "r2", &shared);
    let status = s.wait_held("shares", 2);
    for holder in status["holders"].as_array().unwrap() {
        assert_eq!(holder["mode"], "shared", "{status}");
        assert_eq!(holder["slot"], 0, "{status}");
    }
    assert_eq!(code(&second.finish()), 0);
    let status = s.wait_held("shares", 1);
    assert_eq!(status["holders"][0]["mode"], "shared", "{status}");
    let mut writer = s.waiter("shares", &["--ttl", F::TTL], "touch wrote");
    let status = s.wait_waiters("shares", 1);
    assert_eq!(status["queue"][0]["mode"], "exclusive", "{status}");
    assert_eq!(status["queue"][0]["pid"], writer.pid(), "{status}");
    reader.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let bound = match F::EXPIRES {
        true => humantime::parse_duration(F::TTL).unwrap() + Duration::from_secs(3),
        false => Duration::from_secs(2),
    };
    assert!(
        wait_until(bound, || s.path("wrote").exists()),
        "the writer never ran after the reader crashed"
    );
    assert!(killed.elapsed() < bound);
    assert_eq!(code(&writer.wait(SOON)), 0);
}

/// Guards against a newest-wins queue that runs stale deploys: with five `--supersede` waiters
/// queued behind a holder, only the newest runs, and the four others give up with the busy code
/// within a second of the newest joining, each naming who superseded it.
pub fn supersede_runs_only_the_newest_waiter<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("deploy", "h", &["--ttl", F::TTL]);
    let mut waiters = Vec::new();
    for i in 0..5u64 {
        let script = format!("echo {i} >> deployed");
        let note = format!("deploy #{i}");
        let options = ["--supersede", "--note", &note, "--ttl", F::TTL, "-E", "3"];
        waiters.push(s.waiter("deploy", &options, &script));
        s.wait_status("deploy", &format!("queued {note}"), |st| {
            st["queue"]
                .as_array()
                .is_some_and(|q| q.iter().any(|w| w["note"] == note.as_str()))
        });
    }
    let newest_joined = Instant::now();
    let newest = waiters.pop().unwrap();
    for (i, mut older) in waiters.into_iter().enumerate() {
        let out = older.wait(SOON);
        assert_eq!(code(&out), 3, "waiter {i}: {}", text(&out.stderr));
        let said = text(&out.stderr);
        let by: u64 = said
            .split("superseded by ")
            .nth(1)
            .and_then(|rest| rest.split("deploy #").nth(1))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("waiter {i} did not name who superseded it: {said}"));
        assert!(
            by > i as u64,
            "waiter {i} superseded by an older one: {said}"
        );
    }
    assert!(
        newest_joined.elapsed() < Duration::from_secs(2),
        "older waiters gave up only after {:?}",
        newest_joined.elapsed()
    );
    assert!(holder.running(), "the holder was touched");
    assert_eq!(code(&holder.finish()), 0);
    let mut newest = newest;
    assert_eq!(code(&newest.wait(SOON)), 0);
    assert_eq!(std::fs::read_to_string(s.path("deployed")).unwrap(), "4\n");
}

/// Guards against a lost deploy: a `--supersede` run that does not wait — `--no-wait`, or a
/// `--min-interval` run that skips behind a recent run — is no waiter, so the waiter already in
/// line must not give up for it, and runs once the holder is done.
pub fn a_run_that_does_not_wait_supersedes_nobody<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("ship", "h", &["--ttl", F::TTL, "--min-interval", "1m"]);
    let options = ["--supersede", "--note", "queued", "--ttl", F::TTL];
    let mut waiter = s.waiter("ship", &options, "echo queued >> shipped");
    s.wait_waiters("ship", 1);
    for tries in [
        &["--no-wait"][..],
        &["--min-interval", "1m", "--wait", "60s"],
        &["--min-interval", "1m", "--no-wait"],
    ] {
        let mut args = vec!["--name", "ship", "--supersede", "--ttl", F::TTL];
        args.extend_from_slice(tries);
        args.extend(["--", "sh", "-c", "echo newer >> shipped"]);
        let out = s.run(&args);
        assert_eq!(code(&out), 75, "{tries:?}: {}", text(&out.stderr));
        assert!(
            s.status("ship")["queue"][0]["note"] == "queued",
            "{tries:?} took the waiter's place: {}",
            s.status("ship")
        );
    }
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(s.path("shipped")).unwrap(),
        "queued\n"
    );
}

/// `lockrun --name cron --min-interval INTERVAL EXTRA... -- sh -c 'echo ran >> runs'`.
fn cron_run<F: Fixture>(s: &Scene, interval: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--name",
        "cron",
        "--min-interval",
        interval,
        "--ttl",
        F::TTL,
    ];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", "echo ran >> runs"]);
    s.run(&args)
}

/// Guards against a fleet cron that runs twice within its interval, or never again after it, and
/// against a run without `--min-interval` counting as one (it neither checks nor records).
pub fn min_interval_runs_once_per_period<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let plain = s.run(["--name", "cron", "--ttl", F::TTL, "--", "true"]);
    assert_eq!(code(&plain), 0, "{}", text(&plain.stderr));
    let run = || cron_run::<F>(&s, "2s", &["-E", "0"]);
    let out = run();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = run();
    assert_eq!(code(&out), 0, "a skip with -E 0: {}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(s.path("runs")).unwrap(), "ran\n");
    let out = s.run([
        "--name",
        "cron",
        "--min-interval",
        "2s",
        "--ttl",
        F::TTL,
        "--",
        "true",
    ]);
    skipped_for_min_interval(&out);
    assert!(
        wait_until(Duration::from_secs(5), || {
            run();
            std::fs::read_to_string(s.path("runs"))
                .unwrap()
                .lines()
                .count()
                == 2
        }),
        "never ran again after the interval"
    );
}

/// Guards against a run judged by another run's interval: each run asks whether NAME ran within
/// its own `--min-interval`, so a run with a shorter interval goes ahead once that much has
/// passed, even behind a run that asked for a longer one (as a look before waiting and as the
/// claim once held).
pub fn min_interval_is_each_runs_own<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let run = |interval: &str| cron_run::<F>(&s, interval, &[]);
    let out = run("1h");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // Past the later runs' 2 s by the backend's clock (DynamoDB's whole seconds keep a run out up
    // to 2.5 s past it), and well within 10 s.
    std::thread::sleep(
        F::interval_kept_at_most(Duration::from_secs(2)) + Duration::from_millis(1500),
    );
    skipped_for_min_interval(&run("10s"));
    // Behind a holder, the look before waiting must not skip the run: NAME last ran more than
    // this run's 2 s ago. Once held, its claim goes ahead for the same reason.
    let mut holder = s.hold("cron", "h", &["--ttl", F::TTL]);
    let mut late = s.waiter(
        "cron",
        &["--min-interval", "2s", "--ttl", F::TTL],
        "echo late >> runs",
    );
    s.wait_waiters("cron", 1);
    assert_eq!(code(&holder.finish()), 0);
    let out = late.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // And that run now counts, for a run with a shorter interval as for any.
    skipped_for_min_interval(&run("2s"));
    let runs = std::fs::read_to_string(s.path("runs")).unwrap();
    assert_eq!(runs, "ran\nlate\n");
}

/// Guards against a run refused once its interval is over, when the interval is not whole
/// seconds or the backend counts in them (etcd gave "ran 1s ago" for a run 2.1 s after one with
/// `--min-interval 1500ms`, its lease just expired and not yet revoked): a run just past what
/// the backend's clock allows goes ahead.
pub fn min_interval_lets_a_run_through_just_past_it<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let interval = Duration::from_millis(1500);
    let out = cron_run::<F>(&s, "1500ms", &[]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    std::thread::sleep(F::interval_kept_at_most(interval) + Duration::from_millis(100));
    let out = cron_run::<F>(&s, "1500ms", &[]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(s.path("runs")).unwrap(),
        "ran\nran\n"
    );
}

/// Guards against a reader beside a writer when a name's exclusive runs pass `--limit`: a
/// `--shared` run (Redis and Redlock looked only at slot 0, as a run of limit 1; the file backend
/// shared slot 0's lock only) got in beside an exclusive holder of slot 1, and an exclusive
/// `--limit 2` run must not get in beside a reader — neither at once nor after waiting, and each
/// gets in once the other has gone.
pub fn shared_never_holds_beside_an_exclusive_limit_holder<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let limit = ["--limit", "3", "--ttl", F::TTL];
    let mut first = s.hold("mix", "a", &limit);
    let second = s.hold("mix", "b", &limit);
    assert_eq!(code(&first.finish()), 0);
    // One try, without waiting, with `extra`: its exit status.
    let try_once = |extra: &[&str]| {
        let mut args = vec!["--name", "mix", "-n", "--ttl", F::TTL];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        code(&s.run(args))
    };
    assert_eq!(
        try_once(&["--shared"]),
        75,
        "a reader beside the holder of slot 1"
    );
    let waiting_reader = s.waiter("mix", &["--shared", "--ttl", F::TTL], "echo r >> ran");
    assert_kept_out_until(
        &s,
        waiting_reader,
        second,
        "a reader beside the holder of slot 1",
    );
    let reader = s.hold("mix", "r", &["--shared", "--ttl", F::TTL]);
    assert_eq!(
        try_once(&["--limit", "2"]),
        75,
        "a writer of limit 2 beside a reader"
    );
    let waiting_writer = s.waiter("mix", &["--limit", "2", "--ttl", F::TTL], "echo w >> ran");
    assert_kept_out_until(
        &s,
        waiting_writer,
        reader,
        "a writer of limit 2 beside a reader",
    );
}

/// Asserts that `waiter`, once in line for `mix`, does not run while `holder` holds, and runs
/// after it.
fn assert_kept_out_until(s: &Scene, mut waiter: Proc, mut holder: Holder, what: &str) {
    s.wait_waiters("mix", 1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!s.path("ran").exists(), "{what}, after waiting");
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    std::fs::remove_file(s.path("ran")).unwrap();
}

/// Guards against a fleet cron whose runs queue up behind a long job only to skip once they get
/// the lock: a run that finds NAME ran within the interval skips at once, while the holder still
/// runs.
pub fn min_interval_skips_at_once_behind_a_recent_run<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("cron", "h", &["--min-interval", "1h", "--ttl", F::TTL]);
    let mut late = s.waiter(
        "cron",
        &["--min-interval", "1h", "--ttl", F::TTL],
        "echo ran >> runs",
    );
    let out = late.wait(SOON);
    skipped_for_min_interval(&out);
    assert!(
        holder.running(),
        "the holder ended before the late run skipped"
    );
    assert!(!s.path("runs").exists(), "the late run ran");
    assert_eq!(code(&holder.finish()), 0);
}

/// Asserts that `out` is a run that skipped with the busy code, saying --min-interval is why.
fn skipped_for_min_interval(out: &std::process::Output) {
    assert_eq!(code(out), 75, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--min-interval"),
        "{}",
        text(&out.stderr)
    );
}
