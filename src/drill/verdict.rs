//! The drill's verdict: a pure function from a [`Timeline`] to one [`Check`] per promise, each of
//! which can fail on its own (the tests below feed each one a timeline that breaks it).
//!
//! On a backend whose leases expire, the drill passes only if A held the lease, was paused past
//! it, B took over while A was paused (and not before A's lease could have expired) with a higher
//! token, A's writes after the takeover were rejected (or never made, because lockrun killed A's
//! command first), A's lockrun stopped its command at once on waking and exited 76, and the two
//! commands never ran at the same time. On a kernel lock (the file backend) no takeover is
//! possible while A lives: B must give up, and A must then finish normally with its write accepted.

use std::time::Duration;

use super::timeline::{A_AFTER, A_BEFORE, A_DELAYED, Timeline, ms};
use crate::exit::{BUSY, LEASE_LOST};

/// Allowance on top of the kill grace for A's command to be gone after waking: scheduling, the
/// kernel delivering the KILL, and the drill's polling.
pub const STOP_SLACK: Duration = Duration::from_millis(500);

/// How one check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// Does not apply to this backend; says why in the detail.
    Skip,
}

/// One promise, judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// A stable identifier: `a-held`, `paused-past-lease`, `takeover`, `lease-respected`,
    /// `tokens-rise`, `stale-write-rejected`, `a-stopped` or `a-completed`, `one-writer`.
    pub name: &'static str,
    pub outcome: Outcome,
    pub detail: String,
}

impl Check {
    fn new(name: &'static str, passed: bool, detail: String) -> Self {
        let outcome = if passed { Outcome::Pass } else { Outcome::Fail };
        Check {
            name,
            outcome,
            detail,
        }
    }

    fn skip(name: &'static str, detail: &str) -> Self {
        Check {
            name,
            outcome: Outcome::Skip,
            detail: detail.to_owned(),
        }
    }
}

/// Every check, in the order of the timeline.
pub fn judge(t: &Timeline) -> Vec<Check> {
    vec![
        a_held(t),
        paused_past_lease(t),
        takeover(t),
        lease_respected(t),
        tokens_rise(t),
        stale_write_rejected(t),
        a_after_resume(t),
        one_writer(t),
    ]
}

/// The names of the failed checks; empty means the drill passed.
pub fn failures(checks: &[Check]) -> Vec<&'static str> {
    checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .map(|c| c.name)
        .collect()
}

fn a_held(t: &Timeline) -> Check {
    const NAME: &str = "a-held";
    let (Some(token), Some(_)) = (t.a.token, t.a.started) else {
        return Check::new(
            NAME,
            false,
            format!(
                "holder A never ran with the lease{}",
                because(t.a.diagnostic.as_deref())
            ),
        );
    };
    match t.write(A_BEFORE) {
        Some(w) if w.accepted && w.token == token => Check::new(
            NAME,
            true,
            format!("A acquired token {token} and its first write was accepted"),
        ),
        Some(w) => Check::new(
            NAME,
            false,
            format!(
                "A's first write (token {}) was {}",
                w.token,
                accepted(w.accepted)
            ),
        ),
        None => Check::new(NAME, false, "A held the lease but never wrote".into()),
    }
}

fn paused_past_lease(t: &Timeline) -> Check {
    const NAME: &str = "paused-past-lease";
    let (Some(paused), Some(resumed)) = (t.a.paused, t.a.resumed) else {
        return Check::new(NAME, false, "A was never paused and resumed".into());
    };
    let pause = resumed.saturating_sub(paused);
    Check::new(
        NAME,
        pause > t.ttl(),
        format!(
            "A was paused for {} ms against a {} ms lease",
            ms(pause),
            ms(t.ttl())
        ),
    )
}

fn takeover(t: &Timeline) -> Check {
    const NAME: &str = "takeover";
    let b_wrote = t.b_started();
    if t.kernel_lock {
        return match (b_wrote, t.b.exit_code) {
            (None, Some(BUSY)) => Check::new(
                NAME,
                true,
                "no takeover possible while the holder is paused; kernel lock held \
                 (B gave up with exit 75)"
                    .into(),
            ),
            (Some(_), _) => Check::new(
                NAME,
                false,
                "B acquired a kernel lock while its holder was alive".into(),
            ),
            (None, code) => Check::new(
                NAME,
                false,
                format!(
                    "B should have given up with exit 75, but {}{}",
                    exit_text(code),
                    because(t.b.diagnostic.as_deref())
                ),
            ),
        };
    }
    let (Some(paused), Some(at)) = (t.a.paused, b_wrote) else {
        return Check::new(
            NAME,
            false,
            format!(
                "no takeover: B never ran while A was paused ({}){}",
                exit_text(t.b.exit_code),
                because(t.b.diagnostic.as_deref())
            ),
        );
    };
    let during_pause = at > paused && t.a.resumed.is_none_or(|resumed| at < resumed);
    Check::new(
        NAME,
        during_pause && t.b.exit_code == Some(0),
        format!(
            "B took over {} ms after A was paused and {}",
            ms(at.saturating_sub(paused)),
            exit_text(t.b.exit_code)
        ),
    )
}

fn lease_respected(t: &Timeline) -> Check {
    const NAME: &str = "lease-respected";
    if t.kernel_lock {
        return Check::skip(NAME, "a kernel lock has no lease to outlive");
    }
    let Some(at) = t.b_started() else {
        return Check::skip(NAME, "B never acquired");
    };
    // A's lease was granted after A's lockrun started, so it cannot have expired earlier than
    // that plus the TTL; B running before then means two holders at once.
    let earliest = t.a.spawned + t.ttl();
    Check::new(
        NAME,
        at >= earliest,
        format!(
            "B ran {} ms after A's lockrun started; A's lease could not expire before {} ms",
            ms(at.saturating_sub(t.a.spawned)),
            ms(t.ttl())
        ),
    )
}

fn tokens_rise(t: &Timeline) -> Check {
    const NAME: &str = "tokens-rise";
    match (t.a.token, t.b_token()) {
        (Some(a), Some(b)) => Check::new(
            NAME,
            b > a,
            format!(
                "B's token {b} is {} A's token {a}",
                if b > a { "above" } else { "not above" }
            ),
        ),
        _ if t.kernel_lock => Check::skip(NAME, "B never acquired (kernel lock)"),
        _ => Check::new(NAME, false, "no two tokens to compare".into()),
    }
}

fn stale_write_rejected(t: &Timeline) -> Check {
    const NAME: &str = "stale-write-rejected";
    // The store's own rule: no accepted token below one accepted earlier.
    let mut highest: Option<u64> = None;
    for w in t.writes.iter().filter(|w| w.accepted) {
        if let Some(h) = highest.filter(|&h| w.token < h) {
            return Check::new(
                NAME,
                false,
                format!(
                    "the store accepted {} with token {} after token {h}",
                    w.value, w.token
                ),
            );
        }
        highest = highest.max(Some(w.token));
    }
    let Some(b_at) = t.b_started() else {
        if t.kernel_lock {
            return match t.write(A_AFTER) {
                Some(w) if w.accepted => Check::new(
                    NAME,
                    true,
                    "no stale writer: A still held the kernel lock, its write was accepted".into(),
                ),
                _ => Check::new(
                    NAME,
                    false,
                    "A's write after resuming was not accepted".into(),
                ),
            };
        }
        return Check::new(
            NAME,
            false,
            "B never wrote: nothing to fence against".into(),
        );
    };
    // After B's write, every write with A's token is stale.
    let stale: Vec<_> = t
        .writes
        .iter()
        .filter(|w| w.at > b_at && Some(w.token) == t.a.token)
        .collect();
    if let Some(w) = stale.iter().find(|w| w.accepted) {
        return Check::new(
            NAME,
            false,
            format!(
                "stale write accepted: {} with A's token {} after B's write",
                w.value, w.token
            ),
        );
    }
    let Some(delayed) = stale.iter().find(|w| w.value == A_DELAYED) else {
        return Check::new(
            NAME,
            false,
            "the delayed write with A's token was never tried".into(),
        );
    };
    let own = match stale.iter().find(|w| w.value == A_AFTER) {
        Some(_) => "A's own write after resuming was rejected",
        None => "A's command was stopped before it wrote",
    };
    Check::new(
        NAME,
        true,
        format!(
            "{own}; a delayed write with token {} was rejected",
            delayed.token
        ),
    )
}

fn a_after_resume(t: &Timeline) -> Check {
    let Some(resumed) = t.a.resumed else {
        let name = if t.kernel_lock {
            "a-completed"
        } else {
            "a-stopped"
        };
        return Check::new(name, false, "A was never resumed".into());
    };
    if t.kernel_lock {
        const NAME: &str = "a-completed";
        let wrote = t.write(A_AFTER).is_some_and(|w| w.accepted);
        return Check::new(
            NAME,
            t.a.exit_code == Some(0) && wrote,
            format!(
                "A {} after resuming, its write {}",
                exit_text(t.a.exit_code),
                if wrote { "accepted" } else { "missing" }
            ),
        );
    }
    const NAME: &str = "a-stopped";
    let limit = t.kill_after + STOP_SLACK;
    let Some(ended) = t.a.command_ended else {
        return Check::new(
            NAME,
            false,
            format!(
                "A's command was still running {} ms after A resumed",
                ms(limit)
            ),
        );
    };
    let took = ended.saturating_sub(resumed);
    let in_time = took <= limit;
    let lost = t.a.exit_code == Some(LEASE_LOST);
    Check::new(
        NAME,
        in_time && lost,
        format!(
            "A's command was stopped {} ms after A resumed (limit {} ms), and A {}{}",
            ms(took),
            ms(limit),
            exit_text(t.a.exit_code),
            if lost { "" } else { ", not 76" }
        ),
    )
}

fn one_writer(t: &Timeline) -> Check {
    const NAME: &str = "one-writer";
    let Some(b_start) = t.b_started() else {
        return Check::new(NAME, true, "only A ever ran".into());
    };
    let b_end = t.b.exited.unwrap_or(Duration::MAX);
    let a_start = t.a.started.unwrap_or_default();
    // A's command ran from its start until it was paused, and again from its resumption until
    // it was gone.
    let mut a_active = vec![(a_start, t.a.paused.unwrap_or(Duration::MAX))];
    if let Some(resumed) = t.a.resumed {
        a_active.push((resumed, t.a.command_ended.unwrap_or(Duration::MAX)));
    }
    let overlap = a_active
        .iter()
        .any(|&(from, to)| from < b_end && b_start < to);
    Check::new(
        NAME,
        !overlap,
        if overlap {
            "A's command was running while B's command ran".into()
        } else {
            "A's command was paused or gone whenever B's command ran".into()
        },
    )
}

fn exit_text(code: Option<u8>) -> String {
    match code {
        Some(code) => format!("exited {code}"),
        None => "never exited".into(),
    }
}

fn accepted(yes: bool) -> &'static str {
    if yes { "accepted" } else { "rejected" }
}

fn because(diagnostic: Option<&str>) -> String {
    diagnostic.map(|d| format!(": {d}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drill::timeline::{B_WRITE, Write};

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn w(ms: u64, token: u64, value: &str, accepted: bool) -> Write {
        Write {
            at: at(ms),
            token,
            value: value.into(),
            accepted,
        }
    }

    fn good() -> Timeline {
        Timeline::example()
    }

    /// A drill that went right on the file backend.
    fn good_kernel() -> Timeline {
        let mut t = good();
        t.backend = "file:///tmp/x".into();
        t.kernel_lock = true;
        t.b.exit_code = Some(BUSY);
        t.b.exited = Some(at(2030));
        t.a.resumed = Some(at(2040));
        t.a.command_ended = Some(at(2060));
        t.a.exit_code = Some(0);
        t.writes = vec![w(18, 33, A_BEFORE, true), w(2055, 33, A_AFTER, true)];
        t
    }

    fn failed(t: &Timeline) -> Vec<&'static str> {
        failures(&judge(t))
    }

    #[test]
    fn good_timelines_pass() {
        assert_eq!(failed(&good()), Vec::<&str>::new());
        let mut killed_first = good();
        killed_first.writes.remove(2);
        assert_eq!(failed(&killed_first), Vec::<&str>::new());
        assert_eq!(failed(&good_kernel()), Vec::<&str>::new());
        let checks = judge(&good_kernel());
        let takeover = checks.iter().find(|c| c.name == "takeover").unwrap();
        assert!(takeover.detail.contains("kernel lock held"), "{takeover:?}");
    }

    #[test]
    fn a_stale_write_accepted_fails() {
        let mut t = good();
        t.writes[2].accepted = true;
        assert_eq!(failed(&t), ["stale-write-rejected"]);
        // Also when the store's own rule was broken by a lower token on another step.
        let mut t = good();
        t.writes[3].accepted = true;
        assert_eq!(failed(&t), ["stale-write-rejected"]);
    }

    #[test]
    fn a_token_that_did_not_rise_fails() {
        let mut t = good();
        t.writes[1].token = 33;
        assert!(failed(&t).contains(&"tokens-rise"), "{:?}", failed(&t));
        t.writes[1].token = 20;
        assert!(failed(&t).contains(&"tokens-rise"), "{:?}", failed(&t));
    }

    #[test]
    fn a_command_stopped_late_or_never_fails() {
        let mut late = good();
        late.a.command_ended = Some(at(1500) + late.kill_after + STOP_SLACK + at(1));
        assert_eq!(failed(&late), ["a-stopped"]);
        let mut running = good();
        running.a.command_ended = None;
        running.a.exit_code = None;
        // Still running after the resume: A's command also overlaps nothing it should not, but
        // it was never stopped.
        assert_eq!(failed(&running), ["a-stopped"]);
        let mut wrong_status = good();
        wrong_status.a.exit_code = Some(0);
        assert_eq!(failed(&wrong_status), ["a-stopped"]);
    }

    #[test]
    fn no_takeover_on_a_networked_backend_fails() {
        let mut t = good();
        t.writes.retain(|w| w.value != B_WRITE);
        t.b.exit_code = Some(BUSY);
        let failed = failed(&t);
        assert!(failed.contains(&"takeover"), "{failed:?}");
        assert!(!failed.contains(&"lease-respected"), "{failed:?}");
        // B took over, but only after A was already running again.
        let mut t = good();
        t.writes[1].at = at(1501);
        assert!(self::failed(&t).contains(&"takeover"));
    }

    /// A good timeline whose pause ends early: A resumes at `a_resumed` (its command is stopped
    /// 5 ms later), and B wrote at `b_wrote` and exited at `b_exited`, all in milliseconds.
    fn resumed_early(a_resumed: u64, b_wrote: u64, b_exited: u64) -> Timeline {
        let mut t = good();
        t.a.resumed = Some(at(a_resumed));
        t.a.command_ended = Some(at(a_resumed + 5));
        t.writes[1].at = at(b_wrote);
        t.b.exited = Some(at(b_exited));
        t
    }

    #[test]
    fn a_takeover_before_the_lease_could_expire_fails() {
        let t = resumed_early(1100, 500, 600);
        assert_eq!(failed(&t), ["lease-respected"]);
    }

    #[test]
    fn a_pause_shorter_than_the_lease_fails() {
        let t = resumed_early(900, 850, 860);
        let failed = failed(&t);
        assert!(failed.contains(&"paused-past-lease"), "{failed:?}");
    }

    #[test]
    fn overlapping_writers_fail() {
        // B's command ran while A's command was running again.
        let mut t = good();
        t.b.exited = Some(at(1502));
        assert_eq!(failed(&t), ["one-writer"]);
        // Or before A was paused at all.
        let mut t = good();
        t.a.paused = Some(at(1150));
        let failed = failed(&t);
        assert!(failed.contains(&"one-writer"), "{failed:?}");
    }

    #[test]
    fn a_holder_that_never_held_fails() {
        let mut t = good();
        t.a.token = None;
        t.a.started = None;
        t.a.diagnostic = Some("lockrun: cannot reach 127.0.0.1:1".into());
        let checks = judge(&t);
        let held = checks.iter().find(|c| c.name == "a-held").unwrap();
        assert_eq!(held.outcome, Outcome::Fail);
        assert!(held.detail.contains("cannot reach"), "{held:?}");
    }

    #[test]
    fn a_kernel_lock_taken_over_or_not_completed_fails() {
        let mut t = good_kernel();
        t.writes.insert(1, w(1000, 34, B_WRITE, true));
        t.b.exit_code = Some(0);
        assert!(failed(&t).contains(&"takeover"), "{:?}", failed(&t));
        let mut t = good_kernel();
        t.a.exit_code = Some(LEASE_LOST);
        assert_eq!(failed(&t), ["a-completed"]);
        let mut t = good_kernel();
        t.b.exit_code = Some(69);
        assert_eq!(failed(&t), ["takeover"]);
    }
}
