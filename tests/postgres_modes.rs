//! The `postgres://` backend's modes and its behaviour at scale, through the real `lockrun`
//! binary against a real PostgreSQL cluster started per test — and, for every test that can run
//! there, again behind a real PgBouncer in transaction pooling (where `LISTEN` cannot work, so
//! the waiters' wake-ups without it are tested, not assumed): `--shared`, `--supersede`,
//! `--min-interval`, forced releases that reach the holder at once, waiters that leave the line
//! when interrupted, the migration of a version 1 schema, one connection per lockrun, a full
//! server ridden out, fast handoffs and 300 lockruns behind PgBouncer, and the messages for the
//! walls users hit there.

mod common;
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{BIN, Drive, alive, code, lockrun, text, wait_exit, wait_until};
use support::pgbouncer::{Options, PgBouncer, Pooled};
use support::postgres_server::PgServer;
use support::scenarios;
use support::world::{SOON, Server, World, tokens_in};

/// Runs each generic test twice: against the server, and behind PgBouncer.
macro_rules! direct_and_pooled {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            use super::*;

            #[test]
            fn direct() {
                $test::<PgServer>();
            }

            #[test]
            fn behind_pgbouncer() {
                $test::<Pooled>();
            }
        }
    )*};
}

direct_and_pooled!(
    readers_overlap_and_a_writer_never_overlaps_anyone,
    a_writer_waiting_behind_readers_goes_before_readers_that_came_later,
    tokens_rise_across_modes,
    supersede_keeps_only_the_newest_waiter,
    min_interval_skips_a_run_that_comes_too_soon,
    force_release_stops_a_long_lease_holder_within_a_second,
    an_interrupted_waiter_leaves_the_line_at_once,
);

/// A lockrun with its own backend URL, run in the world's directory.
fn cmd_at<S>(w: &World<S>, url: &str) -> Command {
    let mut cmd = lockrun();
    cmd.arg("--backend").arg(url).current_dir(w.dir());
    cmd
}

fn spawned(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockrun")
}

fn readers_overlap_and_a_writer_never_overlaps_anyone<S: Server>() {
    let w = World::<S>::new();
    // Three readers at once: each waits (up to 10 s) until all three have started.
    let three = "echo + >> started; i=0; \
                 while [ $(grep -c + started) -lt 3 ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; \
                 grep -c + started >> seen";
    let mut readers: Vec<Child> = (0..3)
        .map(|_| {
            w.spawn([
                "--name", "rw", "--shared", "--wait", "30s", "--", "sh", "-c", three,
            ])
        })
        .collect();
    for reader in &mut readers {
        let out = wait_exit(reader, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let seen = std::fs::read_to_string(w.path("seen")).unwrap();
    assert_eq!(seen.split_whitespace().collect::<Vec<_>>(), ["3", "3", "3"]);

    // Four readers and two writers loop over one name; the log of their sections shows no writer
    // beside anyone.
    let section = |kind: &str| {
        format!("echo \"start {kind} $$\" >> log; sleep 0.03; echo \"end {kind} $$\" >> log")
    };
    let worker = "i=0; while [ $i -lt 4 ]; do \
                  \"$0\" --backend \"$1\" --name mixed $2 --wait 60s -- sh -c \"$3\" || exit 1; \
                  i=$((i+1)); done";
    let url = w.url();
    let mut workers: Vec<Child> = (0..6)
        .map(|i| {
            let (mode, kind) = match i % 3 {
                0 => ("--ttl=5s", "writer"),
                _ => ("--shared", "reader"),
            };
            Command::new("sh")
                .args(["-c", worker, BIN, &url, mode, &section(kind)])
                .current_dir(w.dir())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in &mut workers {
        let out = wait_exit(worker, Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(w.path("log")).unwrap();
    let (mut readers, mut writers) = (0, 0);
    for line in log.lines() {
        match line.split(' ').take(2).collect::<Vec<_>>()[..] {
            ["start", "writer"] => {
                assert!(
                    readers == 0 && writers == 0,
                    "a writer beside others:\n{log}"
                );
                writers += 1;
            }
            ["start", "reader"] => {
                assert_eq!(writers, 0, "a reader beside a writer:\n{log}");
                readers += 1;
            }
            ["end", "writer"] => writers -= 1,
            ["end", "reader"] => readers -= 1,
            _ => panic!("unexpected line {line:?}"),
        }
    }
    assert_eq!(log.lines().count(), 6 * 4 * 2, "{log}");
}

fn a_writer_waiting_behind_readers_goes_before_readers_that_came_later<S: Server>() {
    let w = World::<S>::new();
    let mut reader = w.hold("wr", "r", &["--shared", "--ttl", "5s"]);
    let mut writer = w.spawn([
        "--name",
        "wr",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        "echo writer >> order",
    ]);
    w.wait_waiters("wr", 1);
    let mut late = w.spawn([
        "--name",
        "wr",
        "--shared",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        "echo reader >> order",
    ]);
    // The late reader waits, although only a reader holds: a writer is ahead of it.
    let status = w.wait_waiters("wr", 2);
    assert_eq!(status["holders"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(status["holders"][0]["mode"], "shared", "{status}");
    assert_eq!(status["holders"][0]["slot"], 0, "{status}");
    assert_eq!(status["queue"][0]["mode"], "exclusive", "{status}");
    assert_eq!(status["queue"][0]["pid"], writer.id(), "{status}");
    assert_eq!(status["queue"][1]["mode"], "shared", "{status}");
    assert_eq!(status["queue"][1]["pid"], late.id(), "{status}");
    assert_eq!(code(&reader.finish()), 0);
    for child in [&mut writer, &mut late] {
        let out = wait_exit(child, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let order = std::fs::read_to_string(w.path("order")).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["writer", "reader"]
    );
}

fn tokens_rise_across_modes<S: Server>() {
    let w = World::<S>::new();
    let run = |mode: &[&str]| {
        let args = [
            &["--name", "tk"],
            mode,
            &[
                "--",
                "sh",
                "-c",
                "echo $FENCING_TOKEN >> tokens; echo $LOCKRUN_SLOT >> slots",
            ],
        ]
        .concat();
        let out = w.run(args);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    };
    for mode in [
        &[][..],
        &["--shared"],
        &[],
        &["--shared"],
        &["--shared"],
        &[],
    ] {
        run(mode);
    }
    let tokens = tokens_in(&w.path("tokens"));
    assert_eq!(tokens.len(), 6);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    let slots = std::fs::read_to_string(w.path("slots")).unwrap();
    assert!(slots.lines().all(|s| s == "0"), "{slots}");
    // Two readers at once, then a writer queued behind them: each token above the one before.
    let mut first = w.hold("tk", "r1", &["--shared"]);
    let mut second = w.hold("tk", "r2", &["--shared"]);
    let mut writer = w.spawn([
        "--name",
        "tk",
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > writer.token",
    ]);
    w.wait_waiters("tk", 1);
    assert_eq!(code(&first.finish()), 0);
    assert_eq!(code(&second.finish()), 0);
    let out = wait_exit(&mut writer, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let writer_token = tokens_in(&w.path("writer.token"))[0];
    assert!(tokens[5] < first.token, "{tokens:?} {}", first.token);
    assert!(first.token < second.token && second.token < writer_token);
}

fn supersede_keeps_only_the_newest_waiter<S: Server>() {
    let w = World::<S>::new();
    let mut holder = w.hold("deploy", "h", &["--ttl", "5s"]);
    let mut waiters: Vec<Child> = Vec::new();
    for i in 0..5 {
        let script = format!("touch ran{i}");
        let child = w.spawn([
            "--name",
            "deploy",
            "--supersede",
            "--note",
            &format!("deploy {i}"),
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        let pid = child.id();
        w.wait_status("deploy", "showed the new waiter", |s| {
            s["queue"]
                .as_array()
                .is_some_and(|q| q.iter().any(|x| x["pid"] == pid))
        });
        let joined = Instant::now();
        if let Some(older) = waiters.last_mut() {
            let out = wait_exit(older, SOON);
            let after = joined.elapsed();
            assert_eq!(code(&out), 75, "{}", text(&out.stderr));
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("superseded by") && stderr.contains(&format!("deploy {i}")),
                "{stderr}"
            );
            assert!(after < Duration::from_secs(1), "gave up {after:?} after");
        }
        waiters.push(child);
    }
    assert_eq!(w.status("deploy")["waiters"], 1);
    assert_eq!(code(&holder.finish()), 0);
    let out = wait_exit(waiters.last_mut().unwrap(), SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("ran4").exists());
    for i in 0..4 {
        assert!(!w.path(&format!("ran{i}")).exists(), "waiter {i} ran");
    }
}

fn min_interval_skips_a_run_that_comes_too_soon<S: Server>() {
    let w = World::<S>::new();
    let job = |name: &str, extra: &[&str], marker: &str| {
        let args = [
            &["--name", name, "--min-interval", "1h"],
            extra,
            &["--", "touch", marker],
        ]
        .concat();
        w.run(args)
    };
    let out = job("cron", &[], "first");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = job("cron", &[], "second");
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--min-interval"),
        "{}",
        text(&out.stderr)
    );
    let out = job("cron", &["--busy-exit-code", "0"], "third");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(w.path("first").exists());
    assert!(!w.path("second").exists() && !w.path("third").exists());
    // Another name has its own record; the skipped runs held and released the lock.
    let out = job("cron2", &[], "other");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(w.status("cron")["held"], false);
}

fn force_release_stops_a_long_lease_holder_within_a_second<S: Server>() {
    let w = World::<S>::new();
    let mut holder = w.hold("brk", "h", &["--ttl", "30s"]);
    let asked = Instant::now();
    let out = w.run(["release", "brk", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stopped = wait_until(Duration::from_secs(10), || !alive(holder.child_pid));
    let after = asked.elapsed();
    assert!(stopped, "the command was never stopped");
    assert!(
        after < Duration::from_secs(1),
        "the command ran on {after:?} after the forced release"
    );
    let out = wait_exit(&mut holder.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}

fn an_interrupted_waiter_leaves_the_line_at_once<S: Server>() {
    let w = World::<S>::new();
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let name = format!("int-{}", signal.as_str());
        let mut holder = w.hold(&name, &format!("h-{name}"), &["--ttl", "5s"]);
        let mut ghost = w.spawn(["--name", &name, "--wait", "30s", "--", "touch", "ghost-ran"]);
        w.wait_waiters(&name, 1);
        let next_started = w.path(&format!("{name}.next"));
        let mut next = w.spawn([
            "--name",
            &name,
            "--wait",
            "30s",
            "--",
            "touch",
            next_started.to_str().unwrap(),
        ]);
        w.wait_waiters(&name, 2);
        kill(Pid::from_raw(ghost.id() as i32), signal).unwrap();
        let out = wait_exit(&mut ghost, SOON);
        assert_ne!(code(&out), 0, "{}", text(&out.stderr));
        // It left before exiting.
        assert_eq!(
            w.status(&name)["waiters"],
            1,
            "{signal}: the ghost kept its place"
        );
        assert_eq!(code(&holder.finish()), 0);
        let released = Instant::now();
        wait_for_file_exists(&next_started);
        let after = released.elapsed();
        assert!(
            after < Duration::from_millis(700),
            "{signal}: the next waiter started {after:?} after the release"
        );
        let out = wait_exit(&mut next, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(!w.path("ghost-ran").exists());
    }
}

fn wait_for_file_exists(path: &std::path::Path) {
    assert!(
        wait_until(SOON, || path.exists()),
        "{} never appeared",
        path.display()
    );
}

/// Version 1's schema, as the previous release created it (tables and its one function).
const V1_SCHEMA: &str = include_str!("support/postgres_v1_schema.sql");

#[test]
fn a_version_1_schema_is_migrated_in_place_and_older_lockruns_still_exclude() {
    let w = World::<PgServer>::new();
    w.server.sql(V1_SCHEMA);
    w.server.sql(
        "INSERT INTO lockrun.names (name, token, max_limit) VALUES ('old', 41, 1);
         INSERT INTO lockrun.waiters (name, owner, ticket, beat_until)
             VALUES ('old', 'gone', 1, clock_timestamp() - interval '1 minute');",
    );
    let out = w.run([
        "--name",
        "old",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN > old.token",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(tokens_in(&w.path("old.token"))[0] > 41);
    assert_eq!(
        w.server.sql(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'lockrun' AND p.proname = 'acquire_v2'"
        ),
        "1"
    );
    // An older lockrun still running during the upgrade calls acquire_v1, or takes slot 0 with
    // its one-statement fast path: neither gets in beside a reader.
    let mut reader = w.hold("mixed", "r", &["--shared", "--ttl", "5s"]);
    let v1_try = "SELECT taken FROM lockrun.acquire_v1('mixed', 'v1owner', 5000, 1, '{}', 0)";
    assert_eq!(w.server.sql(v1_try), "f");
    w.server.sql(
        "INSERT INTO lockrun.leases (name, slot, owner, token, holder, expires_at) \
         VALUES ('mixed', 0, 'v1fast', 1, '{}', clock_timestamp() + interval '5 s') \
         ON CONFLICT (name, slot) DO NOTHING",
    );
    assert_eq!(
        w.server
            .sql("SELECT count(*) FROM lockrun.leases WHERE name = 'mixed' AND NOT shared"),
        "0"
    );
    assert_eq!(code(&reader.finish()), 0);
    assert_eq!(w.server.sql(v1_try), "t");
    let v1_token: u64 = w
        .server
        .sql("SELECT token FROM lockrun.leases WHERE name = 'mixed' AND owner = 'v1owner'")
        .parse()
        .unwrap();
    assert!(v1_token > reader.token);
}

#[test]
fn a_lockrun_holds_one_connection_whether_waiting_or_holding() {
    let w = World::<PgServer>::new();
    let at = |tag: &str| format!("{}?application_name={tag}", w.url);
    let mut holder = spawned({
        let mut cmd = cmd_at(&w, &at("lr_h"));
        cmd.args([
            "--name",
            "one",
            "--",
            "sh",
            "-c",
            "touch held; while [ ! -e go ]; do sleep 0.02; done",
        ]);
        cmd
    });
    wait_for_file_exists(&w.path("held"));
    let mut waiters: Vec<Child> = (0..3)
        .map(|i| {
            let mut cmd = cmd_at(&w, &at(&format!("lr_w{i}")));
            let mode = if i == 2 { "--shared" } else { "--ttl=5s" };
            cmd.args([
                "--name",
                "one",
                mode,
                "--wait",
                "30s",
                "--progress",
                "100ms",
            ])
            .args(["--", "sh", "-c", "while [ ! -e done ]; do sleep 0.02; done"]);
            spawned(cmd)
        })
        .collect();
    w.wait_waiters("one", 3);
    let sample = |expected: usize| {
        for _ in 0..20 {
            let counts = w.server.sql(
                "SELECT application_name || '=' || count(*) FROM pg_stat_activity \
                 WHERE application_name LIKE 'lr\\_%' GROUP BY application_name ORDER BY 1",
            );
            let counts: Vec<&str> = counts.lines().collect();
            assert!(
                counts.iter().all(|c| c.ends_with("=1")),
                "a lockrun with more than one connection: {counts:?}"
            );
            assert_eq!(counts.len(), expected, "{counts:?}");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    sample(4);
    std::fs::write(w.path("go"), "").unwrap();
    let out = wait_exit(&mut holder, SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // The first waiter now holds (renewing, listening for a forced release), the others wait.
    w.wait_held("one", 1);
    sample(3);
    std::fs::write(w.path("done"), "").unwrap();
    for waiter in &mut waiters {
        let out = wait_exit(waiter, SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
}

#[test]
fn a_full_server_is_waited_out_within_the_wait_and_fails_69_after_it() {
    let w = World::<PgServer>::new();
    // One connection for the role: its holder takes it, so every other lockrun is turned away
    // with 53300 — which also shows that a holder needs no second connection.
    w.server
        .sql("CREATE ROLE app LOGIN CONNECTION LIMIT 1; GRANT CREATE ON DATABASE postgres TO app");
    let url = format!(
        "postgres://app:pw-4321@127.0.0.1:{}/postgres",
        w.server.port()
    );
    let run = |args: &[&str]| {
        let mut cmd = cmd_at(&w, &url);
        cmd.args(["--name", "full"]).args(args);
        cmd
    };
    let mut holder = spawned({
        let mut cmd = run(&[]);
        cmd.args([
            "--",
            "sh",
            "-c",
            "touch held; while [ ! -e go ]; do sleep 0.02; done",
        ]);
        cmd
    });
    wait_for_file_exists(&w.path("held"));
    let out = run(&["--no-wait", "--", "touch", "ran"]).output().unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("too many connections"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("pw-4321"), "{stderr}");

    let started = Instant::now();
    let out = run(&["-v", "--wait", "1s", "--", "touch", "ran"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        text(&out.stderr).contains("trying again in"),
        "{}",
        text(&out.stderr)
    );
    assert!(!w.path("ran").exists());

    let mut waiter = run(&["-v", "--wait", "30s", "--", "touch", "ran"])
        .stderr(std::fs::File::create(w.path("waiter.err")).unwrap())
        .spawn()
        .unwrap();
    turned_away(&w.path("waiter.err"));
    std::fs::write(w.path("go"), "").unwrap();
    assert_eq!(code(&wait_exit(&mut holder, SOON)), 0);
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", read(&w.path("waiter.err")));
    assert!(w.path("ran").exists());
}

/// Waits until a lockrun's `-v` messages (in `err`) show it was turned away and tries again.
fn turned_away(err: &std::path::Path) {
    let retried = wait_until(SOON, || read(err).contains("trying again in"));
    assert!(retried, "never turned away: {}", read(err));
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn pgbouncer_turning_clients_away_is_waited_out_too() {
    let server = PgServer::start();
    let bouncer = PgBouncer::with(
        &server,
        Options {
            max_client_conn: 1,
            ..Options::default()
        },
    );
    let w = World::on(Pooled { bouncer, server });
    let mut holder = w.spawn([
        "--name",
        "full",
        "--",
        "sh",
        "-c",
        "touch held; while [ ! -e go ]; do sleep 0.02; done",
    ]);
    wait_for_file_exists(&w.path("held"));
    let out = w.run(["--name", "full", "--no-wait", "--", "touch", "ran"]);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no more connections allowed"),
        "{}",
        text(&out.stderr)
    );
    let mut waiter = w
        .cmd([
            "-v", "--name", "full", "--wait", "30s", "--", "touch", "ran",
        ])
        .stderr(std::fs::File::create(w.path("waiter.err")).unwrap())
        .spawn()
        .unwrap();
    turned_away(&w.path("waiter.err"));
    std::fs::write(w.path("go"), "").unwrap();
    assert_eq!(code(&wait_exit(&mut holder, SOON)), 0);
    let out = wait_exit(&mut waiter, SOON);
    assert_eq!(code(&out), 0, "{}", read(&w.path("waiter.err")));
    assert!(w.path("ran").exists());
}

#[test]
fn handoffs_behind_pgbouncer_take_milliseconds_not_a_recheck() {
    let w = World::<Pooled>::new();
    let mut gaps = Vec::new();
    for i in 0..8 {
        let mut holder = w.spawn([
            "--name",
            "ho",
            "--",
            "sh",
            "-c",
            &format!(
                "touch h{i}.held; while [ ! -e h{i}.go ]; do sleep 0.01; done; \
                 exec date +%s%N > h{i}.end"
            ),
        ]);
        wait_for_file_exists(&w.path(&format!("h{i}.held")));
        let mut waiter = w.spawn([
            "--name",
            "ho",
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &format!("date +%s%N > w{i}.start"),
        ]);
        w.wait_waiters("ho", 1);
        std::fs::write(w.path(&format!("h{i}.go")), "").unwrap();
        for child in [&mut holder, &mut waiter] {
            let out = wait_exit(child, SOON);
            assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        }
        let end = tokens_in(&w.path(&format!("h{i}.end")))[0];
        let start = tokens_in(&w.path(&format!("w{i}.start")))[0];
        gaps.push(Duration::from_nanos(start.saturating_sub(end)));
    }
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    // Without LISTEN, the waiters used to find out at their one-second re-check.
    assert!(
        median < Duration::from_millis(150),
        "handoffs behind PgBouncer: {gaps:?}"
    );
}

#[test]
fn three_hundred_lockruns_hold_at_once_behind_pgbouncer() {
    // The test server allows 60 connections; PgBouncer shares 20 of them among 300 lockruns.
    let w = World::<Pooled>::new();
    let mut holders: Vec<Child> = (0..300)
        .map(|i| {
            let mut cmd = w.cmd([
                "--name",
                &format!("many/{i}"),
                "--wait",
                "60s",
                "--",
                "sh",
                "-c",
                &format!("touch started.{i}; read nothing || true"),
            ]);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn lockrun")
        })
        .collect();
    let all_held = wait_until(Duration::from_secs(60), || {
        (0..300).all(|i| w.path(&format!("started.{i}")).exists())
    });
    if !all_held {
        let held = (0..300)
            .filter(|i| w.path(&format!("started.{i}")).exists())
            .count();
        let failed: Vec<String> = holders
            .iter_mut()
            .filter_map(|h| h.try_wait().ok().flatten().map(|_| wait_exit(h, SOON)))
            .map(|out| format!("{}: {}", code(&out), text(&out.stderr)))
            .take(5)
            .collect();
        panic!("only {held} of 300 held at once; some that ended: {failed:?}");
    }
    assert_eq!(w.list(&["many/"]).as_array().unwrap().len(), 300);
    for holder in &mut holders {
        drop(holder.stdin.take());
    }
    for holder in &mut holders {
        let out = wait_exit(holder, Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
}

#[test]
fn pgbouncer_refusing_the_startup_options_names_the_fix() {
    let server = PgServer::start();
    let bouncer = PgBouncer::with(
        &server,
        Options {
            ignore_options: false,
            ..Options::default()
        },
    );
    let url = format!(
        "postgres://postgres:pw-5150@127.0.0.1:{}/postgres",
        bouncer.port()
    );
    let out = lockrun()
        .args(["--backend", &url, "--name", "x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unsupported startup parameter"), "{stderr}");
    assert!(stderr.contains("ignore_startup_parameters"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("pw-5150"), "{stderr}");
}

#[test]
fn a_second_database_user_locked_out_of_the_schema_is_told_about_lockrun_schema() {
    let w = World::<PgServer>::new();
    let out = w.run(["--name", "x", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    w.server
        .sql("CREATE ROLE other LOGIN; GRANT CREATE ON DATABASE postgres TO other");
    let url = format!(
        "postgres://other:pw-8080@127.0.0.1:{}/postgres",
        w.server.port()
    );
    let out = cmd_at(&w, &url)
        .args(["--name", "x", "--", "touch", "ran"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("permission denied for schema lockrun"),
        "{stderr}"
    );
    assert!(stderr.contains("?lockrun_schema="), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("pw-8080"), "{stderr}");
    assert!(!w.path("ran").exists());
    // The fix it names works.
    let out = cmd_at(&w, &format!("{url}?lockrun_schema=other_locks"))
        .args(["--name", "x", "--", "touch", "ran"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

// The networked scenarios every backend passes, behind PgBouncer.

#[test]
fn behind_pgbouncer_busy_with_no_wait_exits_75_or_the_chosen_code() {
    scenarios::busy_with_no_wait_exits_75_or_the_chosen_code::<Pooled>("2s");
}

#[test]
fn behind_pgbouncer_wait_runs_out_and_leaves_the_line() {
    scenarios::wait_runs_out_and_leaves_the_line::<Pooled>("2s", Duration::from_millis(300));
}

#[test]
fn behind_pgbouncer_force_release_breaks_the_holder_within_a_renewal() {
    scenarios::force_release_breaks_the_holder_within_a_renewal::<Pooled>("2s");
}

#[test]
fn behind_pgbouncer_waiters_are_served_in_arrival_order() {
    scenarios::waiters_are_served_in_arrival_order::<Pooled>("2s");
}
