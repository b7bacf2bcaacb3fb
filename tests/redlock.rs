//! What only the `redlock://` backend has: a quorum of independent Redis masters. Everything it
//! shares with the other backends is in the conformance suite (`conformance::redlock`, on three
//! masters, where every fault hits all of them); here faults hit some masters only, with three and
//! with five:
//!
//! - a minority killed, frozen (SIGSTOP) or cut off (the proxy drops its traffic) under a holder:
//!   the command runs on, nobody else gets the lock, and it ends normally; with one master killed
//!   and another late, a newcomer still hears a quorum and waits its turn;
//! - a majority lost: the command is stopped before its lease could expire, counted from the last
//!   renewal a quorum confirmed, and lockrun exits 76;
//! - a minority restarted empty: no second holder appears, and tokens keep rising;
//! - a clean exit leaves no hold behind on any master, not only on a quorum;
//! - one master's clock stepped forward an hour and back (libfaketime): its early-expired hold lets
//!   nobody in, and tokens keep rising;
//! - six workers racing for one name while one master answers 100 ms late: no update is lost.

use std::time::{Duration, Instant};

use crate::support::asserts::assert_stopped_by_stop_point;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::holder::Holder;
use crate::support::proxy::{Direction, Proxy};
use crate::support::redlock_servers::RedlockServers;
use crate::support::scene::Scene;
use crate::support::tools;
use crate::support::wait::{SOON, code, numbers_in, text, wait_before, wait_until};

/// The lease every test here asks for.
const TTL: &str = "2s";

/// How a test breaks a master.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL: connections refused from then on.
    Kill,
    /// SIGSTOP: connections open, nothing answers.
    Pause,
    /// The proxy in front of it drops every packet both ways.
    Blackhole,
}

fn break_master<const N: usize>(
    fx: &mut RedlockServers<N>,
    proxies: &[Proxy],
    i: usize,
    fault: Fault,
) {
    match fault {
        Fault::Kill => fx.master_mut(i).kill(),
        Fault::Pause => fx.master(i).pause(),
        Fault::Blackhole => proxies[i].blackhole(),
    }
}

/// The most masters that may fail while a quorum remains.
const fn minority(n: usize) -> usize {
    (n - 1) / 2
}

/// A run that tries for `name` for `wait` must give up with 75, its command never run.
fn locked_out(s: &Scene, url: &str, name: &str, wait: &str) {
    let out = crate::support::lockrun::output(&mut s.cmd_via(
        url,
        ["--name", name, "--wait", wait, "--", "touch", "intruder"],
    ));
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(!s.path("intruder").exists(), "a second holder ran");
}

/// Waits until `holder` holds `name` on every master (slot 0), failing the test if it never does.
/// A won round does not wait for the slower masters' grants, and a hold on a bare quorum is lost
/// with any one of its masters, as Redlock has it: a test that breaks a minority under a holder
/// starts from a hold on all of them.
fn wait_until_held_on_every_master<const N: usize>(
    fx: &RedlockServers<N>,
    name: &str,
    holder: &Holder,
) {
    let holders_pid = format!("\"pid\":{}", holder.process.pid());
    let key = format!("lockrun:{{{name}}}:slot:0");
    let held_everywhere = wait_until(SOON, || {
        (0..N).all(|i| {
            fx.master(i)
                .ask(&["HGET", &key, "info"])
                .contains(&holders_pid)
        })
    });
    assert!(
        held_everywhere,
        "the holder's hold never reached every master"
    );
}

/// A holder through one proxy per master; `faults[i]` breaks master `i` (or not). The holder must
/// ride through two leases' worth of time, keep the name from everyone else, show in `status`,
/// and end normally.
fn minority_lost<const N: usize>(faults: &[Fault]) {
    assert!(faults.len() <= minority(N));
    let mut fx = RedlockServers::<N>::start();
    let (proxies, via) = fx.proxied_each();
    let s = Scene::new(fx.url());
    let mut holder = s.hold_via(&via, "minority", "h", &["--ttl", TTL]);
    wait_until_held_on_every_master(&fx, "minority", &holder);
    for (i, fault) in faults.iter().enumerate() {
        break_master(&mut fx, &proxies, i, *fault);
    }
    let broken = Instant::now();
    // The witnesses reach the masters that are left through the proxies too.
    locked_out(&s, &via, "minority", "1s");
    let status = Scene::new(&via).status("minority");
    assert_eq!(status["holders"][0]["token"], holder.token(), "{status}");
    let until = broken + holder.ttl() * 2;
    let stopped = wait_before(until, || !holder.command_alive());
    assert!(
        !stopped,
        "the command was stopped with {faults:?} on {} of {N} masters; lockrun said:\n{}",
        faults.len(),
        holder.process.stderr_so_far()
    );
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(s.overlaps(), "");
    for (i, fault) in faults.iter().enumerate() {
        if let Fault::Pause = fault {
            fx.master(i).resume();
        }
    }
}

#[test]
fn a_killed_minority_changes_nothing() {
    minority_lost::<3>(&[Fault::Kill]);
}

#[test]
fn a_frozen_minority_changes_nothing() {
    minority_lost::<3>(&[Fault::Pause]);
}

#[test]
fn a_silent_minority_changes_nothing() {
    minority_lost::<3>(&[Fault::Blackhole]);
}

#[test]
fn two_of_five_masters_lost_change_nothing() {
    minority_lost::<5>(&[Fault::Kill, Fault::Blackhole]);
}

/// One master killed and another answering late: a newcomer's round hears the late master out
/// before it says whether a quorum answered, and so waits its turn (75) instead of calling the
/// masters unreachable (69) when the dead master's failure and one refusal come first.
#[test]
fn a_killed_master_and_a_late_one_still_answer_a_newcomer() {
    let mut fx = RedlockServers::<3>::start();
    let (proxies, via) = fx.proxied_each();
    let s = Scene::new(fx.url());
    let mut holder = s.hold_via(&via, "late", "h", &["--ttl", TTL]);
    fx.master_mut(0).kill();
    proxies[2].set_delay(Direction::ToClient, Duration::from_millis(60));
    locked_out(&s, &via, "late", "1s");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards `list` against a frozen master costing it a wait per name: every name's look waited
/// out the grace for the silent master again, so twenty names took about ten seconds. The list
/// must still show the holder, from the quorum that answers, and come within a few seconds.
#[test]
fn a_frozen_master_costs_list_one_grace_not_one_per_name() {
    let fx = RedlockServers::<3>::start();
    let s = Scene::new(fx.url());
    for i in 0..20 {
        let out = s.run(["--name", &format!("used/{i}"), "--", "true"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let mut holder = s.hold("used/held", "h", &["--ttl", TTL]);
    wait_until_held_on_every_master(&fx, "used/held", &holder);
    fx.master(1).pause();
    let started = Instant::now();
    let listed = s.list(&["used/"]);
    let took = started.elapsed();
    fx.master(1).resume();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["name"], "used/held", "{listed}");
    assert!(
        took < Duration::from_secs(4),
        "list over 21 names with one master frozen took {took:?}"
    );
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// A holder through one proxy per master loses a majority to `fault`: its command must be dead by
/// the stop point of the last renewal a quorum confirmed (the masters left always confirm; the
/// last confirmation of a lost one completes the quorum), and lockrun must exit 76.
fn majority_lost<const N: usize>(fault: Fault) {
    let mut fx = RedlockServers::<N>::start();
    let (proxies, via) = fx.proxied_each();
    let s = Scene::new(fx.url());
    let mut holder = s.hold_via(&via, "majority", "h", &["--ttl", TTL]);
    wait_until_held_on_every_master(&fx, "majority", &holder);
    let lost = N / 2 + 1;
    let left = N - lost;
    for i in 0..lost {
        break_master(&mut fx, &proxies, i, fault);
    }
    // A quorum needs `quorum - left` of the lost masters: the latest moment that many of them
    // still confirmed.
    let out = assert_stopped_by_stop_point(&mut holder, |_| {
        let mut confirmed: Vec<Instant> = proxies[..lost]
            .iter()
            .map(|p| p.confirmed().expect("every master answered the holder"))
            .collect();
        confirmed.sort();
        let needed = N / 2 + 1 - left;
        confirmed[lost - needed]
    });
    let why = format!(
        "{lost} of the {N} masters could not confirm it, so no quorum of {} can",
        N / 2 + 1
    );
    assert!(text(&out.stderr).contains(&why), "{}", text(&out.stderr));
}

#[test]
fn a_killed_majority_stops_the_holder_before_expiry() {
    majority_lost::<3>(Fault::Kill);
}

#[test]
fn a_silent_majority_stops_the_holder_before_expiry() {
    majority_lost::<3>(Fault::Blackhole);
}

#[test]
fn three_of_five_masters_lost_stop_the_holder_before_expiry() {
    majority_lost::<5>(Fault::Blackhole);
}

/// Runs `true` on `name` and returns the token it got.
fn token(s: &Scene, name: &str) -> u64 {
    let out = s.run([
        "--name",
        name,
        "--ttl",
        TTL,
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN >> tokens",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    *numbers_in(&s.path("tokens")).last().expect("a token")
}

/// A minority of masters restarted with nothing (every key lost) under a holder that holds all of
/// them: nobody else gets in, the holder runs on; then, each minority in turn restarted empty
/// between two runs, every token is larger than the one before.
fn a_minority_restarted_empty_lets_nobody_in_and_tokens_rise<const N: usize>() {
    let mut fx = RedlockServers::<N>::start();
    let s = Scene::new(fx.url());
    let before = token(&s, "empty");
    let mut holder = s.hold("empty", "h", &["--ttl", "5s", "-v"]);
    assert!(holder.token() > before);
    wait_until_held_on_every_master(&fx, "empty", &holder);
    for i in 0..minority(N) {
        fx.master_mut(i).restart(true);
    }
    // Nobody else gets in (the holder's messages say what it saw if someone does).
    let out = crate::support::lockrun::output(&mut s.cmd_via(
        s.url(),
        [
            "--name", "empty", "--wait", "1500ms", "--", "touch", "intruder",
        ],
    ));
    assert_eq!(
        code(&out),
        75,
        "a second run got in: {}\nthe holder said:\n{}",
        text(&out.stderr),
        holder.process.stderr_so_far()
    );
    assert!(!s.path("intruder").exists(), "a second holder ran");
    assert!(holder.command_alive(), "the holder lost its lease");
    assert_eq!(s.status("empty")["holders"][0]["token"], holder.token());
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let mut last = holder.token();
    for first in 0..N {
        for i in (first..first + minority(N)).map(|i| i % N) {
            fx.master_mut(i).restart(true);
        }
        let next = token(&s, "empty");
        assert!(
            next > last,
            "{next} <= {last} after masters from {first} lost everything"
        );
        last = next;
    }
    assert_eq!(s.overlaps(), "");
}

/// A run that ends cleanly leaves nothing on any master: its release waits for more than a
/// quorum. A hold left on the slowest master would block that master for a whole lease and leave
/// the next holder only a bare quorum, which one more master's loss would take away.
fn a_clean_exit_leaves_no_hold_on_any_master<const N: usize>() {
    let fx = RedlockServers::<N>::start();
    let s = Scene::new(fx.url());
    for run in 0..20 {
        let out = s.run(["--name", "clean", "--ttl", "30s", "--", "true"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let left: Vec<usize> = (0..N)
            .filter(|&i| fx.master(i).ask(&["EXISTS", "lockrun:{clean}:slot:0"]) == "1")
            .collect();
        assert!(
            left.is_empty(),
            "run {run} left its hold on masters {left:?}"
        );
    }
}

/// Master 0's wall clock stepped through libfaketime: an hour ahead, its token proposals jump (the
/// token follows the largest of the quorum, and master 0 is always in it: the others answer 80 ms
/// late); back to true time (restarted empty, too) and an hour behind, the token written back on a
/// quorum keeps tokens rising. And a step of an hour ahead under a holder expires its hold on that
/// master at once: nobody else gets in, and the holder runs on.
#[test]
fn one_masters_clock_stepped_forward_and_back_keeps_tokens_rising_and_one_holder() {
    let Some(preload) = tools::faketime_for_redis() else {
        return;
    };
    let offsets = tempfile::tempdir().unwrap();
    let mut fx = RedlockServers::<3>::with_faketime(&preload, offsets.path());
    let step =
        |offset: &str| std::fs::write(offsets.path().join("0"), format!("{offset}\n")).unwrap();
    let (proxies, via) = fx.proxied_each();
    for proxy in &proxies[1..] {
        // Long enough that master 0 answers first even on a loaded machine (30 ms was not).
        proxy.set_delay(Direction::ToClient, Duration::from_millis(80));
    }
    let s = Scene::new(&via);
    let hour_us = 3_600_000_000u64;

    let first = token(&s, "skew");
    step("+3600");
    let ahead = token(&s, "skew");
    assert!(
        ahead > first + hour_us / 2,
        "master 0's clock an hour ahead did not raise the token: {first} -> {ahead}"
    );
    // Master 0, whose clock gave the last token, comes back an hour earlier with nothing: only
    // the token written back on the others is left to keep the next one above it.
    step("+0");
    fx.master_mut(0).restart(true);
    let back = token(&s, "skew");
    assert!(
        back > ahead,
        "{back} <= {ahead} after master 0 came back empty, its clock stepped back"
    );
    step("-3600");
    let behind = token(&s, "skew");
    assert!(
        behind > back,
        "{behind} <= {back} with the clock an hour behind"
    );

    step("+0");
    let mut holder = s.hold("skew", "h", &["--ttl", TTL]);
    assert!(holder.token() > behind);
    let key = "lockrun:{skew}:slot:0";
    assert_eq!(fx.master(0).ask(&["EXISTS", key]), "1");
    step("+3600");
    assert!(
        wait_until(Duration::from_secs(2), || fx
            .master(0)
            .ask(&["EXISTS", key])
            == "0"),
        "the hold on master 0 did not expire when its clock jumped"
    );
    locked_out(&s, &via, "skew", "1500ms");
    assert!(holder.command_alive(), "the holder lost its lease");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(token(&s, "skew") > holder.token());
}

/// Six workers loop read-modify-write sections on one name through one proxy per master, the last
/// master's answers 100 ms late: every update lands, tokens rise in the order the sections ran,
/// and no section ran beside another.
fn six_workers_with_one_slow_master_lose_no_update<const N: usize>() {
    const WORKERS: usize = 6;
    const SECTIONS: usize = 4;
    let fx = RedlockServers::<N>::start();
    let (proxies, via) = fx.proxied_each();
    proxies[N - 1].set_delay(Direction::ToClient, Duration::from_millis(100));
    let s = Scene::new(&via);
    std::fs::write(s.path("counter"), "0").unwrap();
    let section = "if [ -e busy ]; then echo overlap >> overlaps; fi; touch busy; \
                   n=$(cat counter); sleep 0.01; echo $((n+1)) > counter; \
                   echo $FENCING_TOKEN >> tokens; rm busy";
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                for _ in 0..SECTIONS {
                    let out = s.run([
                        "--name", "race", "--ttl", TTL, "--wait", "60s", "--", "sh", "-c", section,
                    ]);
                    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
                }
            });
        }
    });
    let counter = std::fs::read_to_string(s.path("counter")).unwrap();
    assert_eq!(
        counter.trim(),
        (WORKERS * SECTIONS).to_string(),
        "an update was lost"
    );
    assert_eq!(s.overlaps(), "", "two sections ran at once");
    let tokens = numbers_in(&s.path("tokens"));
    assert_eq!(tokens.len(), WORKERS * SECTIONS);
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
}

/// `on_masters!(module, N, scenario…)`: each scenario written once for any number of masters, run
/// on N of them as its own test, `redlock::module::SCENARIO`.
macro_rules! on_masters {
    ($module:ident, $masters:literal, $($scenario:ident),* $(,)?) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    super::$scenario::<$masters>();
                }
            )*
        }
    };
}

on_masters!(
    three_masters,
    3,
    a_minority_restarted_empty_lets_nobody_in_and_tokens_rise,
    a_clean_exit_leaves_no_hold_on_any_master,
    six_workers_with_one_slow_master_lose_no_update,
);
on_masters!(
    five_masters,
    5,
    a_minority_restarted_empty_lets_nobody_in_and_tokens_rise,
    a_clean_exit_leaves_no_hold_on_any_master,
    six_workers_with_one_slow_master_lose_no_update,
);
