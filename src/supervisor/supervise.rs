//! The supervisor loop: one `select!` over the command's exit, received signals, the renewal in
//! flight, the backend's announcement that the lease was broken, and a boot-clock timer.
//!
//! The lease's expiry is known only from confirmations: a grant or renewal sent at `s` for `ttl`
//! proves the lease until `s + ttl` and no longer. If nothing confirms it beyond that, the command
//! is sent TERM at [`Timing::stop_at`] and KILL after the grace, so both land before the backend
//! could hand the lease to someone else. If lockrun wakes to find the lease already past (it was
//! paused, or the machine slept), it kills the command at once, without a renewal first. A
//! backend's announcement of a forced release is only a reason to renew at once: the renewal's
//! answer decides.
//!
//! `--timeout` stops the command the same way (TERM, KILL after the grace), but the lease is kept
//! — still renewed — until the command is gone, and released after.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::child::Child;
use crate::backend::{Lease, Released, RenewError, Renewal, Revocation};
use crate::clock::{BootInstant, BootTimer};
use crate::exit::{self, Error};
use crate::messages::duration;
use crate::timing::Timing;

/// How the supervised run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited while the lease held; its status as lockrun passes it on.
    Exited(u8),
    /// The lease was lost; the command was stopped (or had ended after the lease did).
    LeaseLost(String),
    /// `--timeout` ran out; the command was stopped.
    TimedOut,
}

/// Longest wait for the release after the command ended: the lease expires by itself anyway.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time a lost lease's release is given, even past the lease's expiry: enough for a
/// server that answers to confirm it (a forced release, a lease found taken).
const LOST_RELEASE_FLOOR: Duration = Duration::from_millis(200);
const MIN_RETRY: Duration = Duration::from_millis(20);
/// How often the descendants of a stopped command are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_millis(20);
/// How long processes sent KILL may take to be gone before lockrun exits without them (a process
/// in uninterruptible sleep, on a stuck filesystem, may take longer), and how often it looks.
const KILLED_GONE_WITHIN: Duration = Duration::from_secs(1);
const KILLED_LOOK: Duration = Duration::from_millis(2);
const MAX_RETRY: Duration = Duration::from_secs(1);
/// How often lockrun looks for descendants that left the command's group, for the watchdog.
const ESCAPEE_LOOK: Duration = Duration::from_millis(100);
/// Forwarded signals whose sender means the command to end: a stopped command is continued
/// after one, so that it can.
const ENDING: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

type RenewFuture<'a> = Pin<Box<dyn Future<Output = Result<Renewal, RenewError>> + Send + 'a>>;
type RevokedFuture<'a> = Pin<Box<dyn Future<Output = Revocation> + Send + 'a>>;

/// Why the command is being stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cause {
    LeaseLost(String),
    TimedOut,
}

/// The lease-keeping state: what is confirmed, what is planned.
struct Keeper {
    timing: Timing,
    /// `None`: the lease lasts as long as this process (a kernel lock).
    expiry: Option<BootInstant>,
    next_renewal: BootInstant,
    /// When `--timeout` runs out.
    timeout_at: Option<BootInstant>,
    /// Set once the command is being stopped: why, and when KILL follows TERM.
    stopping: Option<Stopping>,
}

struct Stopping {
    cause: Cause,
    kill_at: Option<BootInstant>,
}

impl Keeper {
    fn retry_delay(&self) -> Duration {
        (self.timing.renew / 4).clamp(MIN_RETRY, MAX_RETRY)
    }

    /// Whether the command may run now: the lease is known to hold until past the stop point.
    fn may_run(&self, now: BootInstant) -> bool {
        self.keeps_lease() && self.expiry.is_none_or(|e| now < self.timing.stop_at(e))
    }

    /// Whether the lease is still worth renewing: not once it is known lost.
    fn keeps_lease(&self) -> bool {
        !matches!(
            self.stopping,
            Some(Stopping {
                cause: Cause::LeaseLost(_),
                ..
            })
        )
    }

    /// The next moment the loop must look at the clock.
    fn next_wake(&self, renewal_in_flight: Option<BootInstant>) -> Option<BootInstant> {
        let kill = self.stopping.as_ref().and_then(|s| s.kill_at);
        if !self.keeps_lease() {
            return kill;
        }
        let renew = match renewal_in_flight {
            Some(sent) => sent + self.timing.renew.max(MIN_RETRY),
            None => self.next_renewal,
        };
        let stop = self.expiry.map(|e| self.timing.stop_at(e));
        let timeout = self.timeout_at.filter(|_| self.stopping.is_none());
        [Some(renew), stop, timeout, kill]
            .into_iter()
            .flatten()
            .min()
    }

    /// Starts stopping the command: TERM now, KILL after the grace (but before the expiry). A
    /// lost lease found while a timed-out command is being stopped takes over, with its tighter
    /// KILL.
    fn begin_stop(&mut self, child: &Child, cause: Cause, now: BootInstant) {
        let mut kill_at = now + self.timing.kill_after;
        if let Some(expiry) = self.expiry {
            kill_at = kill_at.min(expiry.saturating_sub(self.timing.margin()));
        }
        match (&mut self.stopping, &cause) {
            (None, _) => {
                match &cause {
                    Cause::LeaseLost(reason) => crate::error!("{reason}; stopping the command"),
                    Cause::TimedOut => {}
                }
                child.signal_everything(Signal::SIGTERM);
                // A stopped command gets to act on the TERM (its trap runs) before the KILL.
                child.signal_everything(Signal::SIGCONT);
                self.stopping = Some(Stopping {
                    cause,
                    kill_at: Some(kill_at),
                });
            }
            (Some(stopping), Cause::LeaseLost(reason)) if stopping.cause == Cause::TimedOut => {
                crate::error!("{reason} while the command was being stopped");
                stopping.kill_at = stopping.kill_at.map(|k| k.min(kill_at));
                stopping.cause = cause;
            }
            (Some(_), _) => {}
        }
    }

    /// Kills the command at once: the lease is already gone.
    fn kill_now(&mut self, child: &Child, reason: String) {
        crate::error!("{reason}; killing the command");
        child.signal_everything(Signal::SIGKILL);
        self.stopping = Some(Stopping {
            cause: Cause::LeaseLost(reason),
            kill_at: None,
        });
    }

    /// Acts on the clock: expiry passed, stop point reached, timeout, KILL due. Returns whether a
    /// renewal should be started now.
    fn on_time(&mut self, child: &Child, now: BootInstant, renewal_in_flight: bool) -> bool {
        if let Some(stopping) = &mut self.stopping
            && stopping.kill_at.is_some_and(|k| now >= k)
        {
            stopping.kill_at = None;
            child.signal_everything(Signal::SIGKILL);
        }
        if !self.keeps_lease() {
            return false;
        }
        if let Some(expiry) = self.expiry {
            if now >= expiry {
                let late = now - expiry;
                self.kill_now(
                    child,
                    format!(
                        "lease expired {} ago while lockrun could not act (paused or suspended?)",
                        duration(late)
                    ),
                );
                return false;
            }
            if now >= self.timing.stop_at(expiry) {
                let left = expiry - now;
                self.begin_stop(
                    child,
                    Cause::LeaseLost(format!(
                        "lease not renewed in time ({} left before it could expire)",
                        duration(left)
                    )),
                    now,
                );
                return false;
            }
        }
        if self.stopping.is_none()
            && let Some(timeout_at) = self.timeout_at
            && now >= timeout_at
        {
            crate::error!("--timeout ran out; stopping the command");
            self.begin_stop(child, Cause::TimedOut, now);
        }
        !renewal_in_flight && now >= self.next_renewal
    }

    fn on_renewal(
        &mut self,
        child: &Child,
        sent: BootInstant,
        result: Result<Renewal, RenewError>,
    ) {
        let now = BootInstant::now();
        match result {
            Ok(renewal) => {
                self.expiry = renewal.ttl.map(|ttl| sent + ttl);
                self.next_renewal = sent + self.timing.renew;
                crate::debug!("renewed in {} ms", now.saturating_since(sent).as_millis());
            }
            Err(RenewError::Lost(reason)) => self.begin_stop(
                child,
                Cause::LeaseLost(format!("lease lost: {reason}")),
                now,
            ),
            Err(RenewError::Unconfirmed(e)) => {
                crate::warn!("renewal not confirmed: {e}; retrying");
                // Counted from when the failed renewal was sent: one that failed fast (connection
                // refused) waits a little, one that used up its timeout is retried at once.
                self.next_renewal = (sent + self.retry_delay()).max(now);
            }
        }
    }
}

/// Keeps `lease` while `child` runs, forwarding `signals` to its group, stopping it when
/// `timeout` runs out, and releases the lease at the end. `timer` was made before the command
/// started: nothing this needs may be refused by the system once the command runs.
pub async fn supervise(
    lease: Box<dyn Lease>,
    timing: Timing,
    timeout: Option<Duration>,
    child: &mut Child,
    signals: &mut super::Signals,
    mut timer: BootTimer,
) -> Result<Outcome, Error> {
    let grant = lease.grant();
    let mut keeper = Keeper {
        timing,
        expiry: grant.ttl.map(|ttl| grant.sent_at + ttl),
        next_renewal: grant.sent_at + timing.renew,
        timeout_at: timeout.map(|t| BootInstant::now() + t),
        stopping: None,
    };
    let mut renewal: Option<(BootInstant, RenewFuture<'_>)> = None;
    let mut revoked: RevokedFuture<'_> = lease.revoked();
    let mut signals_open = true;
    // Until the command runs in a cgroup of its own, the watchdog learns of descendants that
    // leave the command's group from lockrun's own looks at its tree. The first look waits a
    // period: the command has only just been started, and a short run then never walks `/proc`.
    let mut escapee_looks =
        tokio::time::interval_at(tokio::time::Instant::now() + ESCAPEE_LOOK, ESCAPEE_LOOK);
    escapee_looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let status = loop {
        let now = BootInstant::now();
        // A renewal that outlived its interval is abandoned; a fresh one is sent.
        if renewal
            .as_ref()
            .is_some_and(|(sent, _)| now.saturating_since(*sent) >= timing.renew.max(MIN_RETRY))
        {
            crate::warn!(
                "renewal not answered within {}; retrying",
                duration(timing.renew)
            );
            renewal = None;
        }
        if keeper.on_time(child, now, renewal.is_some()) {
            renewal = Some((now, lease.renew()));
        }
        let wake = keeper.next_wake(renewal.as_ref().map(|(sent, _)| *sent));
        tokio::select! {
            biased;
            status = child.wait() => {
                break status.map_err(|e| Error::os("cannot wait for the command", &e));
            }
            signal = signals.recv(), if signals_open => match signal {
                Some(Signal::SIGCHLD) => {
                    child.follow_stop(|| keeper.may_run(BootInstant::now()));
                    child.reap_orphans();
                    child.track_escapees();
                }
                // Caught only while the command runs without the terminal: lockrun passes them on
                // and itself never stops, so the command never runs on an unrenewed lease. A
                // continue after a stop longer than the lease must not wake the command: the next
                // look at the clock kills it.
                Some(Signal::SIGCONT) if !keeper.may_run(BootInstant::now()) => {}
                Some(signal) => {
                    crate::info!("forwarding {signal} to the command");
                    child.signal_group(signal);
                    // A stopped command would keep a signal that should end it pending, and
                    // lockrun would wait for it forever: it is continued, as `timeout` and shells
                    // do — unless the lease ran out meanwhile (the clock's next look kills it).
                    if ENDING.contains(&signal) && keeper.may_run(BootInstant::now()) {
                        child.signal_group(Signal::SIGCONT);
                    }
                }
                None => signals_open = false,
            },
            _ = escapee_looks.tick(), if child.tracks_escapees() => child.track_escapees(),
            result = async { renewal.as_mut().expect("guarded by the condition").1.as_mut().await }, if renewal.is_some() => {
                let (sent, _) = renewal.take().expect("renewal in flight");
                keeper.on_renewal(child, sent, result);
            }
            hint = revoked.as_mut(), if keeper.keeps_lease() => {
                match hint {
                    Revocation::Announced => crate::info!(
                        "the backend says the lease may be gone; renewing at once to find out"
                    ),
                    Revocation::MayHaveMissed => crate::debug!(
                        "listening for a forced release; renewing at once in case one came unheard"
                    ),
                }
                keeper.next_renewal = BootInstant::now();
                revoked = lease.revoked();
            }
            slept = timer.sleep_until(wake) => {
                if let Err(e) = slept {
                    break Err(Error::os("timer failed", &e));
                }
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            // Without its exit or the clock in sight the command cannot be kept on the lease:
            // it is killed (and waited for, as far as the clock still serves), and the name
            // freed for the next holder, before lockrun says why.
            drop(renewal);
            drop(revoked);
            child.restore_terminal();
            finish_stop(None, child, &mut timer).await;
            release(lease, RELEASE_TIMEOUT.min(timing.ttl)).await;
            child.disarm();
            return Err(e);
        }
    };
    // When lockrun saw the command end: what follows (giving back the terminal, removing the
    // command's cgroup, which a busy kernel can take seconds over) is not the command's run.
    let ended = BootInstant::now();
    drop(renewal);
    drop(revoked);
    child.restore_terminal();
    if let Some(stopping) = &keeper.stopping {
        finish_stop(stopping.kill_at, child, &mut timer).await;
    }

    // The lease must have covered the whole run: a command that ended after the lease did (lockrun
    // was paused meanwhile) ran unprotected for a while, and that is reported as a loss.
    if keeper.keeps_lease()
        && let Some(expiry) = keeper.expiry
        && ended >= expiry
    {
        let reason = "lease expired before the command ended (lockrun was paused or suspended?)";
        crate::error!("{reason}");
        keeper.stopping = Some(Stopping {
            cause: Cause::LeaseLost(reason.into()),
            kill_at: None,
        });
    }

    // Once the lease is lost, a release still frees the name sooner where the server holds it,
    // but not after it expires there: a frozen or unreachable server must not hold lockrun's
    // exit (and the 76 its caller waits for) beyond that.
    let mut release_limit = RELEASE_TIMEOUT.min(timing.ttl);
    if let Some(Stopping {
        cause: Cause::LeaseLost(_),
        ..
    }) = &keeper.stopping
        && let Some(expiry) = keeper.expiry
    {
        release_limit = release_limit.min(expiry.remaining().max(LOST_RELEASE_FLOOR));
    }
    let released = release(lease, release_limit).await;
    // A release that finds the lease already gone, answered while the lease had to hold unless
    // broken, shows it was broken while the command ran, unnoticed because the command ended
    // before the next renewal would have told: the run was not covered to its end, which is a
    // loss like any other.
    if released == Some(Released::AlreadyGone)
        && answered_while_held(keeper.expiry, BootInstant::now())
        && !matches!(
            keeper.stopping,
            Some(Stopping {
                cause: Cause::LeaseLost(_),
                ..
            })
        )
    {
        let reason = "the lease was gone when the command ended (broken with release --force, \
                      expired, or taken over)";
        crate::error!("{reason}");
        keeper.stopping = Some(Stopping {
            cause: Cause::LeaseLost(reason.into()),
            kill_at: None,
        });
    }
    // From here on, whatever happens to lockrun, what the command left running is its own. The
    // lease goes back first: standing the watchdog down wakes it to exit (a process's teardown,
    // on a CPU the next holder may be waiting for) and, for a command moved into a cgroup, moves
    // what it left back out and removes the cgroup, which a busy kernel can take seconds over.
    child.disarm();
    Ok(match keeper.stopping.map(|s| s.cause) {
        Some(Cause::LeaseLost(reason)) => Outcome::LeaseLost(reason),
        Some(Cause::TimedOut) => Outcome::TimedOut,
        None => Outcome::Exited(exit::from_wait_status(status)),
    })
}

/// Whether a release answered at `answered` that found the lease gone proves the lease was broken
/// while it should have held: only when the answer came before `expiry`, the earliest the server
/// could let the lease run out on its own (counted from when the last renewal was sent); a kernel
/// lock has no expiry. A later answer may come from a release that reached a loaded server after
/// the lease ran out there, once the command had ended within it: that run was covered.
pub(super) fn answered_while_held(expiry: Option<BootInstant>, answered: BootInstant) -> bool {
    expiry.is_none_or(|expiry| answered < expiry)
}

/// The command exited while being stopped; its descendants got the same TERM. Waits for them
/// until the KILL is due, then kills whatever is left, and waits (up to [`KILLED_GONE_WITHIN`])
/// until it is gone, so nothing the command started outlives a lost lease or a timeout: lockrun
/// exits, and gives the lease back, only after its tree did.
async fn finish_stop(kill_at: Option<BootInstant>, child: &Child, timer: &mut BootTimer) {
    let mut deadline = kill_at.unwrap_or_else(BootInstant::now);
    let mut killed = false;
    loop {
        child.reap_orphans();
        if !child.descendants_alive() {
            return;
        }
        let now = BootInstant::now();
        if now >= deadline {
            if killed {
                crate::warn!("what the command left was killed but is not gone yet");
                return;
            }
            child.signal_everything(Signal::SIGKILL);
            if !child.sees_deaths() {
                return;
            }
            killed = true;
            deadline = now + KILLED_GONE_WITHIN;
            continue;
        }
        let step = if killed { KILLED_LOOK } else { SWEEP_INTERVAL };
        if timer
            .sleep_until(Some((now + step).min(deadline)))
            .await
            .is_err()
        {
            child.signal_everything(Signal::SIGKILL);
            return;
        }
    }
}

/// Gives the lease back (owner-checked by the backend), without letting a dead backend hold up
/// lockrun's exit; what the backend found, if it answered.
async fn release(lease: Box<dyn Lease>, limit: Duration) -> Option<Released> {
    match tokio::time::timeout(limit, lease.release()).await {
        Ok(Ok(found)) => {
            match found {
                Released::Given => crate::info!("released"),
                Released::AlreadyGone => {
                    crate::info!("the lease was no longer this run's; nothing to release")
                }
            }
            Some(found)
        }
        Ok(Err(e)) => {
            crate::warn!("release failed: {e}; the lease will expire by itself");
            None
        }
        Err(_) => {
            crate::warn!("release not answered; the lease will expire by itself");
            None
        }
    }
}
