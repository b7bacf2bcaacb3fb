//! Lease timing: TTL, renewal interval, TERM-to-KILL grace and the safety margin, and the rule that
//! ties them together — the command is sent TERM early enough that the grace, the KILL and the
//! margin all fit before the lease could expire on the backend:
//!
//! ```text
//! sent ─── renew ───┬─ ... ───────── stop_at ── kill_after ── KILL ── margin ── expiry
//!                   └ next renewal                (TERM)                       (sent + ttl)
//! ```
//!
//! The margin covers what lockrun cannot measure: the backend's clock running a little fast,
//! scheduling delay, and the time a KILL takes to land. A renewal sent at its time must also have
//! a moment to be answered before TERM is due (at least [`MIN_ANSWER`]): otherwise a lease kept
//! by a healthy backend would be given up at every renewal.

use std::time::Duration;

use crate::clock::BootInstant;

const MIN_MARGIN: Duration = Duration::from_millis(20);
/// The shortest renewal interval: anything shorter renews in a busy loop.
pub const MIN_RENEW: Duration = Duration::from_millis(10);
/// The least time a renewal sent on schedule has to be answered before the command must be
/// stopped: a round trip, and the timer's and the scheduler's delays.
const MIN_ANSWER: Duration = Duration::from_millis(10);
const MAX_MARGIN: Duration = Duration::from_secs(2);
const MAX_DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

/// Validated lease timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub ttl: Duration,
    pub renew: Duration,
    pub kill_after: Duration,
    explicit_renew: Option<Duration>,
    explicit_kill_after: Option<Duration>,
}

impl Timing {
    /// Checks the user's values against each other; missing ones get defaults that fit.
    pub fn new(
        ttl: Duration,
        renew: Option<Duration>,
        kill_after: Option<Duration>,
    ) -> Result<Self, String> {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        for (flag, given) in [("--renew", renew), ("--kill-after", kill_after)] {
            if let Some(given) = given
                && given >= ttl
            {
                return Err(format!(
                    "invalid {flag} {}: must be shorter than --ttl {}",
                    show(given),
                    show(ttl)
                ));
            }
        }
        if let Some(r) = renew
            && r < MIN_RENEW
        {
            return Err(format!(
                "invalid --renew {}: must be at least {} (a renewal is a request to the backend)",
                show(r),
                show(MIN_RENEW)
            ));
        }
        let (chosen_renew, chosen_kill) = choose(ttl, renew, kill_after);
        let too_short = !fits(ttl, chosen_renew, chosen_kill);
        if too_short && renew.is_none() && kill_after.is_none() {
            return Err(format!(
                "invalid --ttl {}: too short to renew the lease and stop the command in time; use at least {}",
                show(ttl),
                show(shortest_ttl())
            ));
        }
        if too_short {
            // Name only what the user gave: a default is not theirs to shorten.
            let (given, them) = match (renew, kill_after) {
                (Some(_), Some(_)) => (
                    format!(
                        "--renew {} and --kill-after {} leave",
                        show(chosen_renew),
                        show(chosen_kill)
                    ),
                    "them",
                ),
                (Some(_), None) => (format!("--renew {} leaves", show(chosen_renew)), "it"),
                _ => (format!("--kill-after {} leaves", show(chosen_kill)), "it"),
            };
            return Err(format!(
                "{given} no time to have a renewal answered and stop the command before the {} \
                 lease ends; shorten {them} or raise --ttl",
                show(ttl)
            ));
        }
        Ok(Timing {
            ttl,
            renew: chosen_renew,
            kill_after: chosen_kill,
            explicit_renew: renew,
            explicit_kill_after: kill_after,
        })
    }

    /// The same choices applied to the TTL the backend actually granted (it may raise the request
    /// to its minimum). Falls back to defaults for values that no longer fit.
    pub fn for_granted(&self, granted: Duration) -> Timing {
        if granted == self.ttl {
            return *self;
        }
        Timing::new(granted, self.explicit_renew, self.explicit_kill_after)
            .or_else(|_| Timing::new(granted, None, None))
            .unwrap_or(*self)
    }

    /// Slack kept between the final KILL and the lease's expiry.
    pub fn margin(&self) -> Duration {
        margin(self.ttl)
    }

    /// When to send TERM if no renewal confirms the lease beyond `expiry`.
    pub fn stop_at(&self, expiry: BootInstant) -> BootInstant {
        expiry.saturating_sub(self.kill_after + self.margin())
    }
}

/// The renewal interval and grace for `ttl`: the user's, or defaults that fit.
fn choose(
    ttl: Duration,
    renew: Option<Duration>,
    kill_after: Option<Duration>,
) -> (Duration, Duration) {
    let renew = renew.unwrap_or(ttl / 3);
    let room = ttl
        .saturating_sub(margin(ttl))
        .saturating_sub(renew)
        .saturating_sub(MIN_ANSWER);
    let kill = kill_after.unwrap_or_else(|| (ttl / 4).min(MAX_DEFAULT_KILL_AFTER).min(room / 2));
    (renew, kill)
}

/// Whether renewing every `renew`, a moment for the renewal's answer, then a grace of `kill` and
/// the margin, fit inside `ttl`.
fn fits(ttl: Duration, renew: Duration, kill: Duration) -> bool {
    !kill.is_zero() && renew >= MIN_RENEW && renew + MIN_ANSWER + kill + margin(ttl) <= ttl
}

/// The shortest TTL whose default renewal, grace and margin fit, to the millisecond.
fn shortest_ttl() -> Duration {
    (1..=60_000)
        .map(Duration::from_millis)
        .find(|&ttl| {
            let (renew, kill) = choose(ttl, None, None);
            fits(ttl, renew, kill)
        })
        .unwrap_or(Duration::from_secs(60))
}

fn margin(ttl: Duration) -> Duration {
    (ttl / 10).clamp(MIN_MARGIN, MAX_MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn defaults_fit_inside_every_ttl_from_the_shortest_up() {
        let shortest = shortest_ttl();
        assert!(Timing::new(shortest - Duration::from_millis(1), None, None).is_err());
        let mut ttl = shortest;
        while ttl < S(7200) {
            let t = Timing::new(ttl, None, None).unwrap();
            // A renewal sent at the last moment has a moment to be answered, and then the whole
            // grace and the margin end before expiry.
            assert!(
                t.renew + MIN_ANSWER + t.kill_after + t.margin() <= ttl,
                "{t:?}"
            );
            assert!(
                t.renew >= MIN_RENEW && t.kill_after > Duration::ZERO,
                "{t:?}"
            );
            assert!(t.kill_after <= MAX_DEFAULT_KILL_AFTER, "{t:?}");
            ttl = ttl * 3 / 2 + Duration::from_millis(1);
        }
    }

    #[test]
    fn rejects_timings_that_cannot_stop_in_time() {
        assert!(
            Timing::new(S(10), Some(S(10)), None)
                .unwrap_err()
                .contains("--renew")
        );
        assert!(
            Timing::new(S(10), None, Some(S(11)))
                .unwrap_err()
                .contains("--kill-after")
        );
        assert!(Timing::new(S(10), Some(S(6)), Some(S(4))).is_err());
        let err = Timing::new(Duration::from_millis(10), None, None).unwrap_err();
        assert!(
            err.starts_with("invalid --ttl 10ms") && err.contains("at least 46ms"),
            "{err}"
        );
        // Only what the user gave is named: the grace here is a default.
        let err = Timing::new(S(1), Some(Duration::from_millis(900)), None).unwrap_err();
        assert!(
            err.starts_with("--renew 900ms leaves no time") && !err.contains("--kill-after"),
            "{err}"
        );
        assert!(
            Timing::new(S(1), Some(Duration::from_nanos(1)), None)
                .unwrap_err()
                .contains("at least 10ms")
        );
        // A long --renew shrinks the default grace rather than failing.
        let t = Timing::new(S(10), Some(S(8)), None).unwrap();
        assert!(t.renew + t.kill_after + t.margin() < S(10));
    }

    #[test]
    fn stop_at_leaves_grace_and_margin_before_expiry() {
        let t = Timing::new(S(15), None, None).unwrap();
        let expiry = BootInstant::now() + S(15);
        assert_eq!(expiry - t.stop_at(expiry), t.kill_after + t.margin());
    }

    #[test]
    fn a_raised_ttl_keeps_the_users_choices() {
        let t = Timing::new(
            Duration::from_millis(500),
            Some(Duration::from_millis(100)),
            None,
        )
        .unwrap();
        let raised = t.for_granted(S(2));
        assert_eq!(raised.ttl, S(2));
        assert_eq!(raised.renew, Duration::from_millis(100));
    }
}
