//! Unit tests of the supervisor loop against a scripted lease and real child processes: the
//! command is stopped before a lease it cannot renew could expire, whatever the renewals do.

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use super::scripted_lease::{Renewals, Script, ScriptedLease};
use super::{Child, Launch, Outcome, Signals, supervise};
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
        standby: super::Standby::default(),
    })
    .expect("spawn sh")
}

/// One supervised run: a shell command (started when the run is made) under a scripted lease,
/// `ttl` long and granted at `granted`, whose renewals follow `script`; `timeout` is `--timeout`,
/// and what is sent on `signals` reaches the loop as a received signal.
struct Run {
    child: Child,
    ttl: Duration,
    granted: BootInstant,
    timeout: Option<Duration>,
    script: Arc<Script>,
    signals: mpsc::UnboundedSender<Signal>,
    received: Signals,
}

impl Run {
    /// `command` under a lease of [`TTL`] granted now whose renewals do `renewals`; no timeout.
    fn new(command: &str, renewals: Renewals) -> Self {
        let granted = BootInstant::now();
        let script = Script::new(renewals);
        let child = sh(command);
        let (signals, received) = mpsc::unbounded_channel();
        Run {
            child,
            ttl: TTL,
            granted,
            timeout: None,
            script,
            signals,
            received: Signals::fed(received),
        }
    }

    /// When the lease expires unless it is renewed.
    fn expiry(&self) -> BootInstant {
        self.granted + self.ttl
    }

    /// Supervises the command to its end while `meanwhile` runs beside the loop.
    async fn beside(mut self, meanwhile: impl Future<Output = ()>) -> Outcome {
        let timing = Timing::new(self.ttl, None, None).unwrap();
        let lease = ScriptedLease::new(self.ttl, self.granted, self.script);
        let supervised = supervise(
            lease,
            timing,
            self.timeout,
            &mut self.child,
            &mut self.received,
            crate::clock::BootTimer::new().unwrap(),
        );
        let (outcome, ()) = tokio::join!(supervised, meanwhile);
        outcome.unwrap()
    }

    /// Supervises the command to its end; `delay` after the start, `act` is done to the script.
    async fn acting_after(self, delay: Duration, act: impl FnOnce(&Script)) -> Outcome {
        let script = self.script.clone();
        let acting = async move {
            tokio::time::sleep(delay).await;
            act(&script);
        };
        self.beside(acting).await
    }

    /// Supervises the command to its end.
    async fn alone(self) -> Outcome {
        self.beside(async {}).await
    }
}

/// Runs `command` under a lease granted now whose renewals behave as `renewals`; returns the
/// outcome, when it ended, the lease's first expiry, and the script.
async fn run(
    command: &str,
    renewals: Renewals,
) -> (Outcome, BootInstant, BootInstant, Arc<Script>) {
    let supervised = Run::new(command, renewals);
    let (expiry, script) = (supervised.expiry(), supervised.script.clone());
    let outcome = supervised.alone().await;
    (outcome, BootInstant::now(), expiry, script)
}

/// The command ended (at `ended`) before the lease it could no longer renew expired.
fn assert_stopped_before(ended: BootInstant, expiry: BootInstant) {
    assert!(
        ended < expiry,
        "the command outlived the lease by {:?}",
        ended - expiry
    );
}

/// The lease was renewed at least `times` times, then released.
fn assert_renewed_then_released(script: &Script, times: u32) {
    let renewed = script.renew_calls();
    assert!(renewed >= times, "renewed {renewed} times");
    assert!(script.released.load(Ordering::SeqCst), "not released");
}

#[tokio::test]
async fn confirmed_renewals_keep_the_command_running_past_the_ttl() {
    let (outcome, _, _, script) = run("sleep 2; exit 7", Renewals::Confirm).await;
    assert_eq!(outcome, Outcome::Exited(7));
    assert_renewed_then_released(&script, 4);
}

#[tokio::test]
async fn failing_renewals_stop_the_command_before_the_lease_expires() {
    let (outcome, ended, expiry, script) = run("sleep 10", Renewals::Fail).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert_stopped_before(ended, expiry);
    assert!(script.renew_calls() >= 2, "failed renewals are retried");
}

#[tokio::test]
async fn hanging_renewals_stop_the_command_before_the_lease_expires() {
    let (outcome, ended, expiry, _) = run("sleep 10", Renewals::Hang).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert_stopped_before(ended, expiry);
}

#[tokio::test]
async fn a_command_that_ignores_term_is_killed_before_the_lease_expires() {
    let (outcome, ended, expiry, _) =
        run("trap '' TERM; sleep 10 & wait; sleep 10", Renewals::Fail).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)), "{outcome:?}");
    assert_stopped_before(ended, expiry);
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
    let run = Run {
        granted: BootInstant::now().saturating_sub(TTL + Duration::from_millis(100)),
        ..Run::new("sleep 10", Renewals::Confirm)
    };
    let script = run.script.clone();
    let started = BootInstant::now();
    let outcome = run.alone().await;
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
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let run = Run::new(
        &format!(
            "trap 'exit 42' USR1; touch {}; while :; do sleep 0.05; done",
            ready.display()
        ),
        Renewals::Confirm,
    );
    let signals = run.signals.clone();
    let forward = async {
        // The command says when its trap is set; only then is the signal sent.
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        signals.send(Signal::SIGUSR1).unwrap();
    };
    assert_eq!(run.beside(forward).await, Outcome::Exited(42));
}

#[tokio::test]
async fn renewals_that_recover_in_time_keep_the_lease() {
    let outcome = Run::new("sleep 1.5; exit 3", Renewals::Fail)
        .acting_after(Duration::from_millis(350), |script| {
            script.set(Renewals::Confirm)
        })
        .await;
    assert_eq!(outcome, Outcome::Exited(3));
}

#[tokio::test]
async fn a_timeout_stops_the_command_while_the_lease_is_still_renewed() {
    let timeout = Duration::from_millis(600);
    // TERM is ignored, so only the KILL after the grace ends it: renewals must go on meanwhile.
    let run = Run {
        timeout: Some(timeout),
        ..Run::new("trap '' TERM; sleep 10 & wait; sleep 10", Renewals::Confirm)
    };
    let script = run.script.clone();
    let kill_after = Timing::new(run.ttl, None, None).unwrap().kill_after;
    let started = BootInstant::now();
    let outcome = run.alone().await;
    assert_eq!(outcome, Outcome::TimedOut);
    let took = BootInstant::now() - started;
    assert!(
        took >= timeout + kill_after && took < timeout + kill_after + Duration::from_secs(1),
        "stopped after {took:?}"
    );
    assert_renewed_then_released(&script, 2);
}

#[tokio::test]
async fn an_announced_revocation_is_checked_at_once_not_at_the_next_renewal() {
    let run = Run {
        ttl: Duration::from_secs(30),
        ..Run::new("sleep 20", Renewals::Confirm)
    };
    let started = BootInstant::now();
    let revoke = |script: &Script| {
        script.set(Renewals::Lose);
        script.revoke.notify_one();
    };
    let outcome = run.acting_after(Duration::from_millis(100), revoke).await;
    assert!(matches!(outcome, Outcome::LeaseLost(_)));
    assert!(
        BootInstant::now() - started < Duration::from_secs(5),
        "the revocation waited for the 10 s renewal"
    );
}

#[tokio::test]
async fn a_spurious_announcement_only_costs_a_renewal() {
    let outcome = Run::new("sleep 0.5; exit 5", Renewals::Confirm)
        .acting_after(Duration::from_millis(50), |script| {
            script.revoke.notify_one()
        })
        .await;
    assert_eq!(outcome, Outcome::Exited(5));
}

#[test]
fn a_lease_found_gone_is_a_loss_only_when_the_answer_came_while_it_had_to_hold() {
    let now = BootInstant::now();
    let later = now + Duration::from_millis(1);
    assert!(super::supervise::answered_while_held(Some(later), now));
    assert!(!super::supervise::answered_while_held(Some(now), later));
    assert!(!super::supervise::answered_while_held(Some(now), now));
    assert!(super::supervise::answered_while_held(None, now));
}

#[tokio::test]
async fn a_lease_found_gone_at_the_release_is_a_loss_not_the_commands_status() {
    // The command ends before any renewal could learn that the lease was broken: only the
    // release finds out, and the run must not pass the command's 0 on as if it had been covered.
    let run = Run::new("exit 0", Renewals::Confirm);
    run.script.gone_at_release.store(true, Ordering::SeqCst);
    let outcome = run.alone().await;
    assert!(
        matches!(outcome, Outcome::LeaseLost(ref r) if r.contains("gone when the command ended")),
        "{outcome:?}"
    );
}
