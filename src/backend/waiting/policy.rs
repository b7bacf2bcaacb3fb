//! The rules every networked waiter follows, whichever loop it runs in: how often it looks again
//! when nothing wakes it, how long a silent waiter keeps its place, how long it rides out an
//! outage, how long it may take to leave the line, the random ids that name a run on the server,
//! and the nap between two tries.

use std::future::Future;
use std::io;
use std::time::Duration;

use crate::backend::{AcquireRequest, BackendError};
use crate::clock::{BootInstant, BootTimer};

/// Longest sleep between two tries when no release is announced; each try also renews the
/// waiter's heartbeat, so this must stay well below [`HEARTBEAT`].
pub const SAFETY_RECHECK: Duration = Duration::from_secs(1);
/// How long a waiter stays in line without trying again: a waiter that died or gave up without
/// leaving holds up the line for at most this long.
pub const HEARTBEAT: Duration = Duration::from_secs(3);
/// How long a waiter keeps waiting through a server outage before giving up (exit 69).
pub const WAIT_OUTAGE: Duration = Duration::from_secs(10);
/// How often a waiter riding out an outage says so, at most.
const OUTAGE_SAID_EVERY: Duration = Duration::from_secs(1);
/// The pause between two tries of a backend's own waiting loop (etcd, ZooKeeper) during an outage
/// it rides out.
pub const OUTAGE_PAUSE: Duration = Duration::from_millis(500);
/// How long a waiter that gives up may spend leaving the line before exiting; if leaving takes
/// longer, its place lapses by itself (its heartbeat, or its lease).
pub const LEAVE_TIMEOUT: Duration = Duration::from_secs(1);
/// Slack after a holder's lease should have expired, before looking again.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// Shortest and longest time one renewal may take.
const MIN_RENEW_TIMEOUT: Duration = Duration::from_millis(50);
const MAX_RENEW_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one renewal of a `ttl` lease may take: a quarter of the lease, so that a retry still
/// fits before the supervisor's stop point.
pub fn renew_timeout(ttl: Duration) -> Duration {
    (ttl / 4).clamp(MIN_RENEW_TIMEOUT, MAX_RENEW_TIMEOUT)
}

/// When to look again without being woken: soon after the earliest lease could expire, at the
/// latest after [`SAFETY_RECHECK`], and never past the deadline.
pub fn recheck_at(soonest_expiry: Option<Duration>, deadline: Option<BootInstant>) -> BootInstant {
    let wait = soonest_expiry.map_or(SAFETY_RECHECK, |left| {
        (left + EXPIRY_SLACK).min(SAFETY_RECHECK)
    });
    let at = BootInstant::now() + wait;
    deadline.map_or(at, |d| d.min(at))
}

/// `N` random bytes from the kernel: one `getrandom` call, no descriptor (a process at its
/// descriptor limit still gets them).
pub fn random_bytes<const N: usize>() -> Result<[u8; N], BackendError> {
    let mut bytes = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: writes at most the unfilled rest of the local array.
        let got = unsafe { libc::getrandom(bytes[filled..].as_mut_ptr().cast(), N - filled, 0) };
        match got {
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            -1 => {
                return Err(BackendError::Failed {
                    endpoint: "the kernel's random source".into(),
                    reason: crate::messages::io(&io::Error::last_os_error()),
                });
            }
            n => filled += n as usize,
        }
    }
    Ok(bytes)
}

/// A random 128-bit id, in hex: who owns a slot or a place in line, unique per run.
pub fn owner_id() -> Result<String, BackendError> {
    Ok(random_bytes::<16>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The sleep between two tries: until `woken` resolves (a release was announced) or the boot
/// clock reaches the re-check time. The timer is created on the first nap only, so an acquisition
/// that never waits never makes one.
#[derive(Default)]
pub struct Nap {
    timer: Option<BootTimer>,
}

impl Nap {
    /// Sleeps until `woken` or `wake_at`; `endpoint` names the backend in a timer failure.
    pub async fn until(
        &mut self,
        woken: impl Future<Output = ()>,
        wake_at: BootInstant,
        endpoint: &str,
    ) -> Result<(), BackendError> {
        let failed = |reason: String| BackendError::Failed {
            endpoint: endpoint.to_owned(),
            reason,
        };
        let timer = self.timer.get_or_insert_with(BootTimer::for_waiting);
        tokio::select! {
            () = woken => Ok(()),
            slept = timer.sleep_until(Some(wake_at)) => {
                slept.map_err(|e| failed(format!("timer failed: {}", crate::messages::io(&e))))
            }
        }
    }
}

/// How a waiter treats failed tries: a failure before the backend ever answered is final (it is
/// down before anything was known: exit 69); later failures are retried until they have gone on
/// for [`WAIT_OUTAGE`].
#[derive(Debug, Default)]
pub struct Outage {
    answered: bool,
    failing_since: Option<BootInstant>,
    /// When this outage was last reported: a backend retried every 100 ms must not fill stderr.
    said_at: Option<BootInstant>,
}

impl Outage {
    /// An outage tracker for a waiter already known to be in line.
    pub fn in_line() -> Self {
        Outage {
            answered: true,
            ..Outage::default()
        }
    }

    /// An outage tracker for `request`: its first failure is final only if the backend never
    /// answered this run.
    pub fn for_request(request: &AcquireRequest) -> Self {
        Outage {
            answered: request.answered,
            ..Outage::default()
        }
    }

    /// Whether the backend has answered a try yet.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// A try got an answer.
    pub fn ok(&mut self) {
        self.answered = true;
        self.failing_since = None;
        self.said_at = None;
    }

    /// Whether a failure at `now` is worth a line: the first of an outage, then one every
    /// [`OUTAGE_SAID_EVERY`] at most.
    fn worth_saying(&mut self, now: BootInstant) -> bool {
        let due = self
            .said_at
            .is_none_or(|at| now.saturating_since(at) >= OUTAGE_SAID_EVERY);
        if due {
            self.said_at = Some(now);
        }
        due
    }

    /// A try sent at `sent_at` failed with `error` while doing `what`: `Err` gives up, `Ok` means
    /// try again.
    pub fn failed(
        &mut self,
        error: BackendError,
        sent_at: BootInstant,
        what: &str,
    ) -> Result<(), BackendError> {
        if !self.answered {
            return Err(error);
        }
        let since = *self.failing_since.get_or_insert(sent_at);
        let now = BootInstant::now();
        if now.saturating_since(since) >= WAIT_OUTAGE {
            return Err(error);
        }
        if self.worth_saying(now) {
            crate::warn!("cannot {what} ({error}); retrying");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error() -> BackendError {
        BackendError::Unsupported("down".into())
    }

    #[test]
    fn a_failure_before_any_answer_is_final_and_later_ones_are_retried_for_a_while() {
        let mut outage = Outage::default();
        assert!(outage.failed(error(), BootInstant::now(), "check").is_err());
        outage.ok();
        assert!(outage.failed(error(), BootInstant::now(), "check").is_ok());
        let long_ago = BootInstant::now().saturating_sub(WAIT_OUTAGE);
        let mut outage = Outage::in_line();
        assert!(outage.failed(error(), long_ago, "check").is_err());
    }

    #[test]
    fn an_outage_is_said_at_once_then_once_a_second_and_again_after_an_answer() {
        let mut outage = Outage::in_line();
        let start = BootInstant::now();
        assert!(outage.worth_saying(start));
        assert!(!outage.worth_saying(start + Duration::from_millis(100)));
        assert!(!outage.worth_saying(start + Duration::from_millis(900)));
        assert!(outage.worth_saying(start + OUTAGE_SAID_EVERY));
        outage.ok();
        assert!(outage.worth_saying(start + OUTAGE_SAID_EVERY + Duration::from_millis(1)));
    }

    #[test]
    fn a_request_the_backend_already_answered_rides_out_its_first_failure() {
        let mut request = AcquireRequest {
            name: crate::name::LockName::parse("n").unwrap(),
            limit: 1,
            mode: crate::backend::Mode::Exclusive,
            ttl: Duration::from_secs(2),
            deadline: None,
            holder: crate::backend::HolderInfo::unknown(),
            supersede: false,
            answered: false,
        };
        let mut first_run = Outage::for_request(&request);
        assert!(
            first_run
                .failed(error(), BootInstant::now(), "check")
                .is_err()
        );
        request.answered = true;
        let mut asked_again = Outage::for_request(&request);
        assert!(
            asked_again
                .failed(error(), BootInstant::now(), "check")
                .is_ok()
        );
    }

    #[test]
    fn rechecks_never_pass_the_deadline_and_follow_expiries() {
        let now = BootInstant::now();
        assert!(recheck_at(None, None) <= now + SAFETY_RECHECK + Duration::from_millis(50));
        assert!(recheck_at(Some(Duration::from_millis(100)), None) < now + SAFETY_RECHECK);
        let deadline = now + Duration::from_millis(10);
        assert!(recheck_at(None, Some(deadline)) <= deadline);
    }
}
