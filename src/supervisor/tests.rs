//! Unit tests of the supervisor loop against a scripted lease and real child processes: the
//! command is stopped before a lease it cannot renew could expire, whatever the renewals do.

use std::ffi::OsString;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use super::scripted_lease::{Renewals, Script, ScriptedLease};
use super::{Child, Launch, Outcome, supervise};
use crate::clock::BootInstant;
use crate::timing::Timing;

const TTL: Duration = Duration::from_millis(900);

fn sh(script: &str) -> Child {
    let program = OsString::from("sh");
    let args = [OsString::from("-c"), OsString::from(script)];
    Child::spawn(Launch {
        program: &program,
        args: &args,
        env: Vec::new(),
        env_remove: Vec::new(),
        // Tests run side by side in one process: each must touch only its own command.
        sole_child: false,
    })
    .expect("spawn sh")
}

/// Runs `script` under a lease granted now whose renewals behave as `renewals`; returns the
/// outcome, when it ended, the lease's first expiry, and the script.
async fn run(
    script: &str,
    renewals: Renewals,
) -> (Outcome, BootInstant, BootInstant, std::sync::Arc<Script>) {
    let timing = Timing::new(TTL, None, None).unwrap();
    let sent_at = BootInstant::now();
    let control = Script::new(renewals);
    let lease = ScriptedLease::new(TTL, sent_at, control.clone());
    let mut child = sh(script);
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let outcome = supervise(lease, timing, None, &mut child, &mut rx)
        .await
        .unwrap();
    (outcome, BootInstant::now(), sent_at + TTL, control)
}

#[tokio::test]
async fn confirmed_renewals_keep_the_command_running_past_the_ttl() {
    let (outcome, _, _, script) = run("sleep 2; exit 7", Renewals::Confirm).await;
    assert_eq!(outcome, Outcome::Exited(7));
    assert!(
        script.renew_calls() >= 4,
        "renewed {} times",
        script.renew_calls()
    );
    assert!(script.released.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn failing_renewals_stop_the_command_before_the_lease_expires() {
    let (outcome, ended, expiry, script) = run("sleep 10", Renewals::Fail).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert!(
        ended < expiry,
        "the command outlived the lease by {:?}",
        ended - expiry
    );
    assert!(script.renew_calls() >= 2, "failed renewals are retried");
}

#[tokio::test]
async fn hanging_renewals_stop_the_command_before_the_lease_expires() {
    let (outcome, ended, expiry, _) = run("sleep 10", Renewals::Hang).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert!(
        ended < expiry,
        "the command outlived the lease by {:?}",
        ended - expiry
    );
}

#[tokio::test]
async fn a_command_that_ignores_term_is_killed_before_the_lease_expires() {
    let (outcome, ended, expiry, _) =
        run("trap '' TERM; sleep 10 & wait; sleep 10", Renewals::Fail).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert!(
        ended < expiry,
        "the command outlived the lease by {:?}",
        ended - expiry
    );
}

#[tokio::test]
async fn a_lost_lease_stops_the_command_at_the_first_renewal() {
    let (outcome, ended, expiry, script) = run("sleep 10", Renewals::Lose).await;
    assert!(
        matches!(outcome, Outcome::LeaseLost(ref r) if r.contains("scripted loss")),
        "{outcome:?}"
    );
    assert_eq!(script.renew_calls(), 1);
    assert!(ended < expiry);
}

#[tokio::test]
async fn a_lease_already_past_is_not_renewed_and_the_command_is_killed_at_once() {
    // As if lockrun had been stopped for longer than the lease right after acquiring.
    let timing = Timing::new(TTL, None, None).unwrap();
    let sent_at = BootInstant::now().saturating_sub(TTL + Duration::from_millis(100));
    let script = Script::new(Renewals::Confirm);
    let lease = ScriptedLease::new(TTL, sent_at, script.clone());
    let mut child = sh("sleep 10");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let started = BootInstant::now();
    let outcome = supervise(lease, timing, None, &mut child, &mut rx)
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::LeaseLost(ref r) if r.contains("expired")),
        "{outcome:?}"
    );
    assert_eq!(
        script.renew_calls(),
        0,
        "no renewal after the lease has passed"
    );
    assert!(
        BootInstant::now() - started < Duration::from_millis(500),
        "killed at once"
    );
}

#[tokio::test]
async fn received_signals_are_forwarded_to_the_command() {
    let timing = Timing::new(TTL, None, None).unwrap();
    let lease = ScriptedLease::new(TTL, BootInstant::now(), Script::new(Renewals::Confirm));
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut child = sh(&format!(
        "trap 'exit 42' USR1; touch {}; while :; do sleep 0.05; done",
        ready.display()
    ));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let forward = async {
        // The command says when its trap is set; only then is the signal sent.
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.send(Signal::SIGUSR1).unwrap();
    };
    let (outcome, ()) = tokio::join!(supervise(lease, timing, None, &mut child, &mut rx), forward);
    assert_eq!(outcome.unwrap(), Outcome::Exited(42));
}

#[tokio::test]
async fn renewals_that_recover_in_time_keep_the_lease() {
    let timing = Timing::new(TTL, None, None).unwrap();
    let script = Script::new(Renewals::Fail);
    let lease = ScriptedLease::new(TTL, BootInstant::now(), script.clone());
    let mut child = sh("sleep 1.5; exit 3");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let heal = async {
        tokio::time::sleep(Duration::from_millis(350)).await;
        script.set(Renewals::Confirm);
    };
    let (outcome, ()) = tokio::join!(supervise(lease, timing, None, &mut child, &mut rx), heal);
    assert_eq!(outcome.unwrap(), Outcome::Exited(3));
}

#[tokio::test]
async fn a_timeout_stops_the_command_while_the_lease_is_still_renewed() {
    let timing = Timing::new(TTL, None, None).unwrap();
    let script = Script::new(Renewals::Confirm);
    let lease = ScriptedLease::new(TTL, BootInstant::now(), script.clone());
    // TERM is ignored, so only the KILL after the grace ends it: renewals must go on meanwhile.
    let mut child = sh("trap '' TERM; sleep 10 & wait; sleep 10");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let started = BootInstant::now();
    let timeout = Duration::from_millis(600);
    let outcome = supervise(lease, timing, Some(timeout), &mut child, &mut rx)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::TimedOut);
    let took = BootInstant::now() - started;
    assert!(
        took >= timeout + timing.kill_after
            && took < timeout + timing.kill_after + Duration::from_secs(1),
        "stopped after {took:?}"
    );
    assert!(
        script.renew_calls() >= 2,
        "renewed {} times",
        script.renew_calls()
    );
    assert!(script.released.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn an_announced_revocation_is_checked_at_once_not_at_the_next_renewal() {
    let ttl = Duration::from_secs(30);
    let timing = Timing::new(ttl, None, None).unwrap();
    let script = Script::new(Renewals::Confirm);
    let lease = ScriptedLease::new(ttl, BootInstant::now(), script.clone());
    let mut child = sh("sleep 20");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let started = BootInstant::now();
    let revoke = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        script.set(Renewals::Lose);
        script.revoke.notify_one();
    };
    let (outcome, ()) = tokio::join!(supervise(lease, timing, None, &mut child, &mut rx), revoke);
    assert!(matches!(outcome.unwrap(), Outcome::LeaseLost(_)));
    assert!(
        BootInstant::now() - started < Duration::from_secs(5),
        "the revocation waited for the 10 s renewal"
    );
}

#[tokio::test]
async fn a_spurious_announcement_only_costs_a_renewal() {
    let timing = Timing::new(TTL, None, None).unwrap();
    let script = Script::new(Renewals::Confirm);
    let lease = ScriptedLease::new(TTL, BootInstant::now(), script.clone());
    let mut child = sh("sleep 0.5; exit 5");
    let (_tx, mut rx) = mpsc::unbounded_channel();
    let announce = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        script.revoke.notify_one();
    };
    let (outcome, ()) = tokio::join!(
        supervise(lease, timing, None, &mut child, &mut rx),
        announce
    );
    assert_eq!(outcome.unwrap(), Outcome::Exited(5));
}
