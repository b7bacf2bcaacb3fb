//! What only the `zk://` backend has: session timeouts clamped to the ensemble's tick bounds, a
//! three-member ensemble that must ride through the loss of its leader but not of its quorum,
//! digest ACLs, chroots, the predecessor watches that keep a release from waking the whole line,
//! and a release sent again on a fresh session when the run's own gets no answer; and the
//! run-form modes that no conformance scenario covers yet (`--shared`, `--supersede`,
//! `--min-interval` by the ensemble's clock). Everything the backend shares with the others is in
//! the conformance suite.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::support::asserts::{
    assert_rode_through, assert_said, assert_stopped_after_its_last_renewal,
};
use crate::support::backend_scenarios::assert_readers_share_and_a_waiting_writer_goes_first;
use crate::support::cluster::Members;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{Proc, output};
use crate::support::scene::Scene;
use crate::support::timing::LeaseTiming;
use crate::support::tools;
use crate::support::wait::{SOON, code, number_in, text, wait_until};
use crate::support::zk_ensemble::{USER, ZkEnsemble, ZooKeeper};

/// The longest session a 500 ms tick grants (20 ticks): the ensemble tests' lease, which leaves
/// an election several seconds before the stop point.
const LONGEST: &str = "10s";

#[test]
fn granted_ttl_is_clamped_to_the_ensembles_tick_bounds() {
    let zk = ZooKeeper::<1>::start();
    let s = Scene::new(zk.url());
    for (asked, granted) in [("500ms", 1000), ("3s", 3000), ("30s", 10_000)] {
        let out = s.run([
            "--name",
            "clamp",
            "--ttl",
            asked,
            "--",
            "sh",
            "-c",
            "echo $LOCKRUN_TTL_MS > ttl",
        ]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert_eq!(number_in(&s.path("ttl")), granted, "--ttl {asked}");
    }
}

/// Guards against a holder that gives up when the member it talks to, or the leader, dies while
/// a quorum remains: the client moves to another member with the same session, the ensemble
/// elects a leader, and the command runs on past the lease the loss would have ended. The killed
/// member then comes back with its data and the holder keeps going.
/// Guards the choice of a member for a new session: the client tries the members in a random
/// order, and one that takes connections but never answers (a local listener that never accepts)
/// used up the whole connect time when it came first, so about half the runs exited 69 although
/// the other member was up. Six runs in a row must all get their session from the live member.
#[test]
fn a_member_that_never_answers_is_passed_over_for_one_that_does() {
    let zk = ZooKeeper::<1>::start();
    let silent = TcpListener::bind("127.0.0.1:0").expect("a listener that never accepts");
    let silent_at = silent.local_addr().expect("its address");
    let s = Scene::new(format!("zk://{silent_at},{}", zk.endpoint(0)));
    for run in 0..6 {
        let out = s.run(["--name", "failover", "--ttl", LONGEST, "--", "true"]);
        assert_eq!(code(&out), 0, "run {run}: {}", text(&out.stderr));
    }
    drop(silent);
}

#[test]
fn leader_killed_under_a_holder_is_ridden_through() {
    let mut zk = ZooKeeper::<3>::start();
    let s = Scene::new(zk.url());
    let mut holder = s.hold("failover", "h", &["-vv", "--ttl", LONGEST]);
    let timing = LeaseTiming::defaults(holder.ttl());
    assert!(wait_until(timing.ttl, || !holder.renewals().is_empty()));
    let leader = zk.leader();
    zk.kill_member(leader);
    let killed = Instant::now();
    zk.restart_member(leader);
    zk.wait_serving();
    assert_rode_through(&mut holder, killed + timing.ttl + timing.renew);
}

/// Guards against a holder that runs on when the ensemble has lost its quorum (two of three
/// members dead: the survivor serves nobody): the command is stopped before the session could
/// expire, counted from the last renewal the ensemble confirmed.
#[test]
fn ensemble_without_quorum_stops_the_command_before_expiry() {
    let mut zk = ZooKeeper::<3>::start();
    let s = Scene::new(zk.url());
    let mut holder = s.hold("quorum", "h", &["-vv", "--ttl", "4s"]);
    assert!(wait_until(SOON, || !holder.renewals().is_empty()));
    let leader = zk.leader();
    zk.kill_member(leader);
    zk.kill_member((leader + 1) % 3);
    assert_stopped_after_its_last_renewal(&mut holder);
}

/// Guards against another ZooKeeper identity joining, breaking or stealing a lock tree made with
/// digest credentials: it can read who holds a name (status works without any password), but its
/// runs and its release --force are refused (exit 69, naming the ensemble), and the holder runs
/// on untouched.
#[test]
fn another_identity_can_read_but_neither_join_nor_break() {
    let zk = ZooKeeper::<1>::with_password("right-pw").expect("digest");
    let s = Scene::new(zk.url());
    let mut holder = s.hold("acl", "h", &["--ttl", "3s"]);
    let anonymous = format!("zk://{}", zk.endpoint(0));
    let stranger = format!("zk://{USER}:wrong-pw@{}", zk.endpoint(0));
    for url in [&anonymous, &stranger] {
        let out = output(&mut s.cmd_via(url, ["status", "acl", "--json"]));
        assert_eq!(code(&out), 0, "{url}: {}", text(&out.stderr));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(status["holders"][0]["token"], holder.token(), "{status}");
        for args in [
            &["--name", "acl", "--wait", "1s", "--", "touch", "ran"][..],
            &["--name", "other", "--", "touch", "ran"],
            &["release", "acl", "--force"],
        ] {
            let out = output(&mut s.cmd_via(url, args));
            assert_eq!(code(&out), 69, "{args:?}: {}", text(&out.stderr));
            assert_said(&out, "not allowed");
            assert_said(&out, &zk.endpoint(0));
        }
    }
    assert!(!s.path("ran").exists());
    assert!(
        holder.command_alive(),
        "the holder was broken by a stranger"
    );
    assert_eq!(code(&holder.finish()), 0);
}

/// Guards against chroots that are not created when missing, or that share locks: the same name
/// under two chroots is two locks, and each tree lists only its own.
#[test]
fn chroots_are_created_on_demand_and_keep_trees_apart() {
    let zk = ZooKeeper::<1>::start();
    let team = |chroot: &str| Scene::new(format!("{}/{chroot}", zk.url()));
    let (a, b) = (team("teams/a"), team("teams/b"));
    let mut holder = a.hold("deploy", "h", &["--ttl", "3s"]);
    let out = b.run(["--name", "deploy", "--no-wait", "--", "touch", "ran"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(b.path("ran").exists());
    assert_eq!(a.list(&[]).as_array().map(Vec::len), Some(1));
    assert_eq!(b.list(&[]), serde_json::json!([]));
    assert_eq!(code(&holder.finish()), 0);
}

/// Guards against empty parents left behind: a name's node is a container, which the server
/// removes once its last contender has gone (here swept every half second), so names used once
/// leave nothing in the ensemble.
#[test]
fn names_leave_no_node_behind() {
    let zk = ZkEnsemble::start_with(1, &["-Dznode.container.checkIntervalMs=500"]);
    let s = Scene::new(zk.url());
    let run = |name: &str| {
        let out = s.run(["--name", name, "--", "true"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    };
    // Before any run: no lock tree. After one: its root stays, the name's node goes.
    let before = zk.node_count(0);
    run("first");
    let mut now = 0;
    let swept = wait_until(SOON, || {
        now = zk.node_count(0);
        now == before + 1
    });
    assert!(swept, "{now} znodes after one run, {before} before it");
    for name in ["ci/deploy", "ci/deploy/x", "backup"] {
        run(name);
    }
    let cleaned = wait_until(SOON, || {
        now = zk.node_count(0);
        now == before + 1
    });
    assert!(
        cleaned,
        "{now} znodes remain after three names were used and let go"
    );
}

/// The watches the members hold, as `wchp` lists them: each watched path with its sessions.
fn watched_paths(zk: &ZooKeeper<1>) -> Vec<(String, usize)> {
    let answer = zk.four_letters(0, "wchp").expect("wchp answered");
    let mut paths: Vec<(String, usize)> = Vec::new();
    for line in answer.lines() {
        match line.strip_prefix('\t') {
            Some(_) => {
                if let Some(last) = paths.last_mut() {
                    last.1 += 1;
                }
            }
            None if line.starts_with('/') => paths.push((line.to_owned(), 0)),
            None => {}
        }
    }
    paths
}

/// Guards against a herd: with eight waiters in line, nobody watches the name's node (whose
/// children change with every join and leave), and each contender's znode but the last is watched
/// by its successor alone (the holder's by itself too, for a forced release); a release lets
/// exactly the next waiter in.
#[test]
fn waiters_watch_only_their_predecessor_and_a_release_wakes_one() {
    let zk = ZooKeeper::<1>::start();
    let s = Scene::new(zk.url());
    let mut holder = s.hold("herd", "h", &["--ttl", "3s"]);
    let mut waiters = s.queue_waiters("herd", &["--ttl", "3s"], 8, |i| {
        format!("touch ran{i}; sleep 30")
    });
    let mut watched = Vec::new();
    let settled = wait_until(SOON, || {
        watched = watched_paths(&zk);
        watched.iter().filter(|(p, _)| p.contains("/x-")).count() == 8
    });
    assert!(settled, "not one watch per contender: {watched:?}");
    assert!(
        watched
            .iter()
            .all(|(path, sessions)| !path.ends_with("/herd") && *sessions <= 2),
        "{watched:?}"
    );
    assert_eq!(code(&holder.finish()), 0);
    assert!(
        wait_until(SOON, || s.path("ran0").exists()),
        "the next waiter never ran"
    );
    let others = wait_until(Duration::from_millis(500), || {
        (1..8).any(|i| s.path(&format!("ran{i}")).exists())
    });
    assert!(!others, "a waiter further back ran while the first held");
    assert_eq!(s.status("herd")["waiters"], 7);
    for waiter in &mut waiters {
        waiter.signal(nix::sys::signal::Signal::SIGTERM);
        waiter.wait(SOON);
    }
}

/// Guards against readers that exclude each other, a writer starved by readers that came after
/// it, or tokens out of acquisition order across modes: three readers hold at once; a writer that
/// queues behind them runs before a reader that arrived after it, alone.
#[test]
fn readers_share_and_a_waiting_writer_is_not_starved() {
    let zk = ZooKeeper::<1>::start();
    assert_readers_share_and_a_waiting_writer_goes_first(&zk.url(), "3s");
}

/// Guards against --supersede leaving older deploys in line: each newer --supersede waiter makes
/// the older one give up with the busy code within a second, saying by whom; only the newest
/// runs after the holder, which is never touched.
#[test]
fn supersede_leaves_only_the_newest_waiter() {
    let zk = ZooKeeper::<1>::start();
    let s = Scene::new(zk.url());
    let mut holder = s.hold("deploy", "h", &["--ttl", "3s"]);
    let mut older: Option<Proc> = None;
    for i in 0..5 {
        let note = format!("deploy-{i}");
        let mut newest = s.waiter(
            "deploy",
            &["--supersede", "--note", &note, "--ttl", "3s"],
            &format!("touch ran{i}"),
        );
        let pid = newest.pid();
        s.wait_status("deploy", "queued the newest", |st| {
            st["queue"]
                .as_array()
                .is_some_and(|q| q.iter().any(|w| w["pid"] == pid))
        });
        let joined = Instant::now();
        if let Some(mut previous) = older.take() {
            assert!(
                wait_until(Duration::from_secs(1), || previous.exited()),
                "an older --supersede waiter stayed in line {:?} after a newer one joined",
                joined.elapsed()
            );
            let out = previous.wait(SOON);
            assert_eq!(code(&out), 75, "{}", text(&out.stderr));
            assert_said(&out, &format!("superseded by {} pid {pid}", hostname()));
            assert_said(&out, &note);
        }
        assert!(!newest.exited(), "the newest waiter gave up");
        older = Some(newest);
    }
    assert!(holder.command_alive(), "the holder was touched");
    assert_eq!(code(&holder.finish()), 0);
    let out = older.take().unwrap().wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let ran: Vec<usize> = (0..5)
        .filter(|i| s.path(&format!("ran{i}")).exists())
        .collect();
    assert_eq!(ran, [4]);
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Guards against --min-interval decided by the hosts' clocks: a once-a-minute job runs, then
/// "hosts" whose clocks are two minutes ahead and behind (libfaketime) try it at once: both are
/// refused with the busy code, because the ensemble's clock decides, and the record survives.
#[test]
fn min_interval_is_decided_by_the_ensembles_clock() {
    let Some(library) = tools::libfaketime() else {
        return;
    };
    let zk = ZooKeeper::<1>::start();
    let s = Scene::new(zk.url());
    let job = [
        "--name",
        "cron",
        "--min-interval",
        "1m",
        "--",
        "sh",
        "-c",
        "echo ran >> runs",
    ];
    let out = s.run(job);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    for offset in ["+2m", "-2m"] {
        let mut cmd = s.cmd(job);
        cmd.env("LD_PRELOAD", &library)
            .env("FAKETIME", offset)
            .env("DONT_FAKE_MONOTONIC", "1");
        let out = output(&mut cmd);
        assert_eq!(code(&out), 75, "clock {offset}: {}", text(&out.stderr));
        assert_said(&out, "less than --min-interval 1m");
    }
    let runs = std::fs::read_to_string(s.path("runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "{runs}");
}

/// Guards against a release that, finding no answer on the run's own session (its client may
/// still be backing off between reconnections), leaves the name held until that session
/// expires: the delete goes again on a fresh session, so the name is free once lockrun exits.
/// Here the proxy holds the run's delete back for a minute, well past the release's deadline and
/// the 10 s session.
#[test]
fn a_release_unanswered_on_the_runs_session_is_sent_on_a_fresh_one() {
    let zk = ZooKeeper::<1>::start();
    let (proxy, via) = zk.proxied().expect("a proxy in front of the member");
    let s = Scene::new(&via);
    let mut holder = s.hold("fallback", "h", &["--ttl", LONGEST]);
    let held = proxy.hold_request(b"fallback", Duration::from_secs(60));
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        held.fired().is_some(),
        "the release never went out on the run's session"
    );
    let out = s.run(["--name", "fallback", "--no-wait", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the name stayed held after lockrun exited: {}",
        text(&out.stderr)
    );
}
