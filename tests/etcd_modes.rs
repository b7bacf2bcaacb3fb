//! The etcd backend's modes and waiting, through the real `lockrun` binary against real etcd
//! members started per test: `--shared` (readers together, writers alone, no writer starved,
//! tokens rising across modes), `--supersede`, `--min-interval`, a forced release reaching a
//! long-lease holder at once, and a line that hands over to the right waiter when a waiter leaves
//! or dies (each waiter watches only what can make it a holder, so these are the cases where a
//! wrong hand-over would show).

mod common;
mod support;

use std::collections::HashSet;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{BIN, Drive, alive, code, text, wait_exit, wait_for_file, wait_until};
use support::etcd_cluster::EtcdCluster;
use support::world::{SOON, tokens_in};

type World = support::world::World<EtcdCluster>;

/// A critical section that logs `+ KIND PID` when it starts and `- KIND PID` when it ends (one
/// `echo` each, appended: the file keeps the order in which they happened).
fn section(kind: &str, hold: &str) -> String {
    format!("echo \"+ {kind} $$\" >> log; sleep {hold}; echo \"- {kind} $$\" >> log")
}

/// Replays `log`: panics if a writer (`w`) ever ran beside anyone, or a reader (`r`) beside a
/// writer; returns the most readers seen at once and how many sections ran.
fn replay(log: &str) -> (usize, usize) {
    let (mut readers, mut writers) = (HashSet::new(), HashSet::new());
    let (mut peak, mut sections) = (0, 0);
    for line in log.lines() {
        let mut parts = line.split_whitespace();
        let (sign, kind, pid) = (parts.next(), parts.next(), parts.next());
        match (sign, kind) {
            (Some("+"), Some("w")) => {
                assert!(
                    readers.is_empty() && writers.is_empty(),
                    "a writer started beside others:\n{log}"
                );
                writers.insert(pid);
                sections += 1;
            }
            (Some("+"), Some("r")) => {
                assert!(
                    writers.is_empty(),
                    "a reader started beside a writer:\n{log}"
                );
                readers.insert(pid);
                peak = peak.max(readers.len());
                sections += 1;
            }
            (Some("-"), Some("w")) => assert!(writers.remove(&pid), "{log}"),
            (Some("-"), Some("r")) => assert!(readers.remove(&pid), "{log}"),
            _ => panic!("unexpected log line {line:?}"),
        }
    }
    (peak, sections)
}

/// A shell that runs `lockrun ARGS` `times` times in a row, stopping at the first failure.
fn looping(w: &World, times: u32, args: &[&str]) -> Child {
    let script = format!("i=0; while [ $i -lt {times} ]; do \"$@\" || exit 1; i=$((i+1)); done");
    Command::new("sh")
        .args(["-c", &script, "sh", BIN, "--backend", &w.url])
        .args(args)
        .current_dir(w.dir())
        .spawn()
        .expect("spawn a looping shell")
}

#[test]
fn readers_share_and_writers_run_alone() {
    let w = World::new();
    let reader = section("r", "0.05");
    let writer = section("w", "0.05");
    let mut loops = Vec::new();
    for _ in 0..6 {
        let args = [
            "--name", "rw", "--shared", "--ttl", "3s", "--", "sh", "-c", &reader,
        ];
        loops.push(looping(&w, 5, &args));
    }
    for _ in 0..2 {
        let args = ["--name", "rw", "--ttl", "3s", "--", "sh", "-c", &writer];
        loops.push(looping(&w, 5, &args));
    }
    for mut each in loops {
        let status = each.wait().expect("wait for a looping shell");
        assert!(status.success(), "a run failed: {status}");
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let (_, sections) = replay(&log);
    assert_eq!(sections, 40, "{log}");
}

#[test]
fn three_readers_hold_at_once_in_slot_zero() {
    let w = World::new();
    // Each reader waits (bounded) until three have started, then until the test lets it go.
    let script = "echo \"+ r $$ $LOCKRUN_SLOT\" >> log; i=0; \
                  while [ $(grep -c + log) -lt 3 ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done; \
                  while [ ! -e go ]; do sleep 0.02; done; echo \"- r $$\" >> log";
    let mut readers: Vec<Child> = (0..3)
        .map(|_| {
            w.spawn([
                "--name", "share", "--shared", "--ttl", "3s", "--wait", "20s", "--", "sh", "-c",
                script,
            ])
        })
        .collect();
    let status = w.wait_held("share", 3);
    for holder in status["holders"].as_array().unwrap() {
        assert_eq!(holder["mode"], "shared", "{status}");
        assert_eq!(holder["slot"], 0, "{status}");
    }
    assert_eq!(status["waiters"], 0, "{status}");
    std::fs::write(w.path("go"), "").unwrap();
    for reader in &mut readers {
        let out = wait_exit(reader, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    assert!(
        log.lines()
            .filter(|l| l.starts_with('+'))
            .all(|l| l.ends_with(" 0")),
        "LOCKRUN_SLOT of a shared holder is 0: {log}"
    );
    let (peak, _) = replay(&log.replace(" 0\n", "\n"));
    assert_eq!(peak, 3, "{log}");
}

#[test]
fn a_writer_queued_behind_readers_goes_before_readers_that_came_after_it() {
    let w = World::new();
    let mut r1 = w.hold("order", "r1", &["--shared", "--ttl", "3s"]);
    let mut r2 = w.hold("order", "r2", &["--shared", "--ttl", "3s"]);
    let record = |tag: &str| format!("echo $FENCING_TOKEN > {tag}.token; echo {tag} >> order");
    let mut writer = w.spawn([
        "--name",
        "order",
        "--ttl",
        "3s",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        &format!("{}; sleep 0.2; echo w-end >> order", record("w")),
    ]);
    w.wait_waiters("order", 1);
    let mut r3 = w.spawn([
        "--name",
        "order",
        "--shared",
        "--ttl",
        "3s",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        &record("r3"),
    ]);
    let status = w.wait_waiters("order", 2);
    // Readers hold, yet the reader that came after the writer waits behind it.
    assert_eq!(status["holders"].as_array().unwrap().len(), 2, "{status}");
    let modes: Vec<&str> = status["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["exclusive", "shared"], "{status}");
    assert!(!w.path("order").exists(), "someone ran early");
    assert_eq!(code(&r1.finish()), 0);
    assert_eq!(code(&r2.finish()), 0);
    for waiter in [&mut writer, &mut r3] {
        let out = wait_exit(waiter, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let order = std::fs::read_to_string(w.path("order")).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["w", "w-end", "r3"]
    );
    let token = |tag: &str| tokens_in(&w.path(&format!("{tag}.token")))[0];
    assert!(token("w") > r1.token.max(r2.token));
    assert!(token("r3") > token("w"));
}

#[test]
fn tokens_rise_across_modes() {
    let w = World::new();
    let mut tokens = Vec::new();
    let mut w1 = w.hold("tok", "w1", &["--ttl", "3s"]);
    tokens.push(w1.token);
    assert_eq!(code(&w1.finish()), 0);
    // Two readers at once: both above the writer before them.
    let mut r1 = w.hold("tok", "r1", &["--shared", "--ttl", "3s"]);
    let mut r2 = w.hold("tok", "r2", &["--shared", "--ttl", "3s"]);
    tokens.push(r1.token.min(r2.token));
    tokens.push(r1.token.max(r2.token));
    assert_eq!(code(&r1.finish()), 0);
    assert_eq!(code(&r2.finish()), 0);
    for (i, shared) in [false, true, false].into_iter().enumerate() {
        let mut args = vec!["--name", "tok", "--ttl", "3s"];
        if shared {
            args.push("--shared");
        }
        args.extend(["--", "sh", "-c", "echo $FENCING_TOKEN >> tokens"]);
        let out = w.run(&args);
        assert_eq!(code(&out), 0, "run {i}: {}", text(&out.stderr));
    }
    tokens.extend(tokens_in(&w.path("tokens")));
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

#[test]
fn supersede_leaves_only_the_newest_waiter_and_never_touches_the_holder() {
    let w = World::new();
    let mut holder = w.hold("deploy", "h", &["--ttl", "3s"]);
    let mut older: Vec<Child> = Vec::new();
    for i in 0..5 {
        let script = format!("echo d{i} >> ran");
        let note = format!("deploy {i}");
        let joined = Instant::now();
        let newest = w.spawn([
            "--name",
            "deploy",
            "--supersede",
            "--note",
            &note,
            "--ttl",
            "3s",
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        if let Some(mut previous) = older.pop() {
            // The one before gives up, with the busy code, promptly.
            let out = wait_exit(&mut previous, Duration::from_secs(2));
            let after = joined.elapsed();
            assert_eq!(code(&out), 75, "{}", text(&out.stderr));
            assert!(after < Duration::from_secs(1), "gave up {after:?} after");
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("superseded by") && stderr.contains(&note),
                "{stderr}"
            );
        }
        w.wait_waiters("deploy", 1);
        older.push(newest);
    }
    assert!(alive(holder.child_pid), "the holder was touched");
    assert_eq!(w.status("deploy")["holders"][0]["token"], holder.token);
    assert_eq!(code(&holder.finish()), 0);
    let out = wait_exit(&mut older[0], SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(w.path("ran")).unwrap(), "d4\n");
}

#[test]
fn a_waiter_without_supersede_keeps_its_place() {
    let w = World::new();
    let mut holder = w.hold("mixed", "h", &["--ttl", "3s"]);
    let args = |tag: &str, supersede: bool| {
        let mut args = vec![
            "--name".to_owned(),
            "mixed".into(),
            "--wait".into(),
            "30s".into(),
        ];
        if supersede {
            args.push("--supersede".into());
        }
        args.extend([
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!("echo {tag} >> ran"),
        ]);
        args
    };
    let mut plain = w.spawn(args("plain", false));
    w.wait_waiters("mixed", 1);
    let mut old = w.spawn(args("old", true));
    w.wait_waiters("mixed", 2);
    let mut new = w.spawn(args("new", true));
    let out = wait_exit(&mut old, SOON);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    w.wait_waiters("mixed", 2);
    assert_eq!(code(&holder.finish()), 0);
    for waiter in [&mut plain, &mut new] {
        let out = wait_exit(waiter, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let ran = std::fs::read_to_string(w.path("ran")).unwrap();
    assert_eq!(ran.split_whitespace().collect::<Vec<_>>(), ["plain", "new"]);
}

#[test]
fn min_interval_skips_a_second_run_by_the_clusters_clock() {
    let w = World::new();
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec!["--name", name, "--min-interval", "1m"];
        args.extend_from_slice(extra);
        args.extend(["--", "sh", "-c", "echo ran >> runs"]);
        w.run(&args)
    };
    let out = run("cron", &[]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = run("cron", &[]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--min-interval"), "{stderr}");
    let out = run("cron", &["--busy-exit-code", "0"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(w.path("runs")).unwrap(), "ran\n");
    // Another name has its own interval, and the lock itself is free again.
    assert_eq!(code(&run("cron-other", &[])), 0);
    assert_eq!(w.status("cron")["held"], false);
}

#[test]
fn force_release_stops_a_long_lease_holder_within_a_second() {
    let w = World::new();
    let mut holder = w.hold("brk", "h", &["--ttl", "30s"]);
    let released = Instant::now();
    let out = w.run(["release", "brk", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = wait_exit(&mut holder.process, SOON);
    let after = released.elapsed();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(after < Duration::from_secs(1), "stopped {after:?} after");
    assert!(!alive(holder.child_pid), "the command still runs");
}

#[test]
fn a_waiter_stopped_by_sigterm_lets_the_next_one_in_at_once() {
    let w = World::new();
    let mut holder = w.hold("term", "h", &["--ttl", "3s"]);
    let mut first = w.spawn(["--name", "term", "--wait", "30s", "--", "touch", "first"]);
    w.wait_waiters("term", 1);
    let mut second = w.spawn([
        "--name",
        "term",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        "date +%s%N > second",
    ]);
    w.wait_waiters("term", 2);
    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_exit(&mut first, SOON);
    assert_eq!(code(&out), 128 + 15, "{}", text(&out.stderr));
    w.wait_waiters("term", 1);
    let released = std::time::SystemTime::now();
    assert_eq!(code(&holder.finish()), 0);
    let out = wait_exit(&mut second, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let started: u128 = wait_for_file(&w.path("second"), SOON)
        .trim()
        .parse()
        .unwrap();
    let released: u128 = released
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let after = Duration::from_nanos(u64::try_from(started.saturating_sub(released)).unwrap());
    assert!(
        after < Duration::from_millis(500),
        "started {after:?} after the release"
    );
    assert!(!w.path("first").exists());
}

#[test]
fn a_waiter_that_dies_in_the_middle_of_the_line_hands_over_in_order() {
    let w = World::new();
    let mut holder = w.hold("mid", "h", &["--ttl", "3s"]);
    let mut waiters = Vec::new();
    for (tag, ttl) in [("a", "3s"), ("dead", "2s"), ("c", "3s")] {
        waiters.push(w.spawn([
            "--name",
            "mid",
            "--ttl",
            ttl,
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &section(tag, "0.2"),
        ]));
        w.wait_waiters("mid", waiters.len() as u64);
    }
    // The middle waiter dies without a word; its lease expires, and the one behind it must wait
    // for the one ahead of it.
    let mut dead = waiters.remove(1);
    dead.kill().unwrap();
    dead.wait().unwrap();
    w.wait_waiters("mid", 2);
    assert_eq!(code(&holder.finish()), 0);
    for waiter in &mut waiters {
        let out = wait_exit(waiter, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let starts: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with('+'))
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(starts, ["a", "c"], "{log}");
    assert_eq!(
        log.lines().nth(1).map(|l| l.starts_with("- a")),
        Some(true),
        "c started before a ended:\n{log}"
    );
}

#[test]
fn a_holder_that_dies_hands_over_within_its_lease_and_in_order() {
    let w = World::new();
    let ttl = Duration::from_secs(2);
    let holder = w.hold("crash", "h", &["--ttl", "2s"]);
    let mut waiters = Vec::new();
    for tag in ["a", "b"] {
        waiters.push(w.spawn([
            "--name",
            "crash",
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &section(tag, "0.2"),
        ]));
        w.wait_waiters("crash", waiters.len() as u64);
    }
    let killed = Instant::now();
    kill(Pid::from_raw(holder.process.id() as i32), Signal::SIGKILL).unwrap();
    assert!(
        wait_until(ttl * 3, || w.path("log").exists()),
        "nobody took over"
    );
    let after = killed.elapsed();
    assert!(
        after < ttl + Duration::from_secs(1),
        "took over {after:?} after the crash"
    );
    for waiter in &mut waiters {
        let out = wait_exit(waiter, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let (peak, sections) = replay(&log.replace(" a ", " w ").replace(" b ", " w "));
    assert_eq!((peak, sections), (0, 2), "{log}");
    assert!(log.starts_with("+ a"), "{log}");
}

#[test]
fn limit_three_with_ten_waiters_keeps_exactly_three_holders() {
    let w = World::new();
    let args = [
        "--name", "pool", "--limit", "3", "--ttl", "3s", "--wait", "60s",
    ];
    let holders: Vec<_> = ["h0", "h1", "h2"]
        .iter()
        .map(|tag| w.hold("pool", tag, &args[2..]))
        .collect();
    // Each section waits (bounded) until three are running, so the peak is reached if allowed.
    let script = "echo \"+ $LOCKRUN_SLOT\" >> log; i=0; \
                  while [ $(( $(grep -c + log) - $(grep -c - log) )) -lt 3 ] && [ $i -lt 25 ]; do \
                  sleep 0.02; i=$((i+1)); done; echo \"- $LOCKRUN_SLOT\" >> log";
    let mut waiters: Vec<Child> = (0..10)
        .map(|_| {
            let mut all: Vec<&str> = args.to_vec();
            all.extend(["--", "sh", "-c", script]);
            w.spawn(all)
        })
        .collect();
    let status = w.wait_waiters("pool", 10);
    assert_eq!(status["holders"].as_array().unwrap().len(), 3, "{status}");
    for mut holder in holders {
        assert_eq!(code(&holder.finish()), 0);
    }
    for waiter in &mut waiters {
        let out = wait_exit(waiter, Duration::from_secs(30));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let (mut running, mut peak) = (HashSet::new(), 0);
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
    assert_eq!(log.lines().count(), 20, "{log}");
}

#[test]
fn a_waiter_whose_member_dies_watches_again_on_another_and_gets_its_turn() {
    let mut w = World::on(EtcdCluster::three());
    let mut holder = w.hold("failover", "h", &["--ttl", "3s"]);
    let mut waiter = w.spawn([
        "--name", "failover", "--ttl", "3s", "--wait", "30s", "--", "touch", "ran",
    ]);
    w.wait_waiters("failover", 1);
    // Member 0 is the first endpoint: the one both talk to.
    w.server.kill(0);
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = wait_exit(&mut waiter, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran").exists());
}
