//! When a waiter that cannot be woken looks at the line again: what it knows ([`View`] — where
//! it stands, and how fast the line has been moving, by the server's clock, as a try or a look
//! answered) and the pacing rule ([`pause`]). A waiter that a release would wake looks every
//! tenth of the time it has been next (at least every 5 ms, at most every 30 ms), so a handoff
//! costs a few milliseconds after a short hold and after a long one at most 30 ms and a few
//! statements. A waiter further back looks again when about half of its expected wait has
//! passed (its places ahead times the time one place took lately), so it is looking fast by the
//! time its turn comes; while a hold lasts longer than usual the first 16 waiters look at least
//! every twentieth of that hold (so a short line follows closely when it starts moving again),
//! and in a line of short holds so do those it would move past within two seconds; and a
//! waiter whose turn is more than a couple of seconds off does not look at all (the
//! engine's one-second re-check tells it where it stands). Each waiter looks O(log N) times over
//! its whole wait, so the looks per handoff grow only as the logarithm of the line (measured by
//! `bench/pg_scale.py`: about 1.4, 4 and 6 per handoff with 10, 100 and 1,000 waiting).

use std::time::Duration;

use tokio_postgres::Row;

use crate::backend::waiting::policy::SAFETY_RECHECK;

/// How often a waiter that a release would wake looks, at most and at least: every tenth of the
/// time it has been next, within these bounds. The slowest bounds a handoff after a long hold
/// (30 ms and the handoff's statements: within 50 ms) for one cheap statement 33 times a second
/// per waited-for name.
const NEXT_FASTEST: Duration = Duration::from_millis(5);
const NEXT_SLOWEST: Duration = Duration::from_millis(30);
/// How often the two waiters right behind the next look, at least (per place).
const CLOSE_SLOWEST: Duration = Duration::from_millis(200);
/// How often any other waiter looks, at most; one whose turn is further off than the engine's
/// own re-check does not look (that re-check's try tells it where it stands).
const BEHIND_FASTEST: Duration = Duration::from_millis(5);
const BEHIND_SLOWEST: Duration = SAFETY_RECHECK;
/// The time a handoff is assumed to take while the line does not move.
const ASSUMED_HANDOFF: Duration = Duration::from_millis(20);
/// How often a `--supersede` waiter looks, at least: a newer one makes it give up within a second.
const SUPERSEDE_SLOWEST: Duration = Duration::from_millis(250);
/// Waiters ahead counted exactly, beyond the slots (further back, the distance in tickets is an
/// estimate).
pub const EXACT_PLACES: i32 = 8;
/// A waiter this close to the next (in places) keeps up by listening where it can.
const NEAR_PLACES: u32 = 2;
/// Waiters this close to the next (in places) look while the line stands still; so does any
/// waiter whose turn could come within [`STALL_REACH`] of the line moving again at its usual pace
/// (see [`watches_a_stall`]).
const STALL_PLACES: u32 = 16;
/// How soon after a stalled line moves again a waiter that does not look can find itself next:
/// twice the engine's re-check, whose try is the only other way it learns that the line moves.
const STALL_REACH: Duration = SAFETY_RECHECK.saturating_mul(2);

/// What the waiter's last try (or look) found: the name's epoch, where the waiter stands, and
/// how fast the line moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub epoch: i64,
    pub standing: Standing,
    pub pace: Pace,
}

/// Where an answer (of `acquire_v2` or `peek_v2`) carries the columns of a [`View`].
pub struct ViewColumns {
    pub epoch: usize,
    pub ahead: usize,
    pub distance: usize,
    pub handoff: usize,
    pub since_release: usize,
}

impl View {
    /// Reads the view an answer carries at `at`; a `NULL` reads as nothing known (epoch 0, no
    /// one ahead, no pace). Whether the waiter is next is `next` of how many are ahead (each
    /// statement tells it its own way).
    pub fn read(
        row: &Row,
        at: &ViewColumns,
        next: impl FnOnce(i32) -> bool,
    ) -> Result<Self, tokio_postgres::Error> {
        let epoch: Option<i64> = row.try_get(at.epoch)?;
        let ahead: Option<i32> = row.try_get(at.ahead)?;
        let distance: Option<i64> = row.try_get(at.distance)?;
        let handoff: Option<f64> = row.try_get(at.handoff)?;
        let since_release: Option<f64> = row.try_get(at.since_release)?;
        let ahead = ahead.unwrap_or(0);
        Ok(View {
            epoch: epoch.unwrap_or(0),
            standing: Standing {
                next: next(ahead),
                ahead,
                distance: distance.unwrap_or(0),
            },
            pace: Pace::from_ms(handoff, since_release),
        })
    }
}

/// Where a waiter stands in line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// A release would wake it.
    pub next: bool,
    /// Live waiters ahead of it, counted up to the limit plus [`EXACT_PLACES`].
    pub ahead: i32,
    /// Tickets between it and the head of the line (at least `ahead`).
    pub distance: i64,
}

/// How the line has been moving, by the server's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    /// How long the line took to move one place lately (from a take to the next release: the
    /// shorter of the last two times), once known.
    pub handoff: Option<Duration>,
    /// The time since the last release.
    pub since_release: Option<Duration>,
}

impl Pace {
    /// From the milliseconds the server returns.
    pub fn from_ms(handoff: Option<f64>, since_release: Option<f64>) -> Self {
        let duration = |ms: Option<f64>| {
            ms.filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| Duration::from_secs_f64(ms.min(1e12) / 1000.0))
        };
        Pace {
            handoff: duration(handoff),
            since_release: duration(since_release),
        }
    }
}

/// The fixed facts of one waiter.
pub struct Waiter {
    pub name: String,
    pub owner: String,
    pub limit: i32,
    pub shared: bool,
    pub supersede: bool,
}

impl Waiter {
    /// How many places behind the next (waking) ones a waiter standing at `standing` is; 0 when
    /// a release would wake it.
    pub fn places(&self, standing: &Standing) -> u32 {
        if standing.next {
            return 0;
        }
        let limit = i64::from(self.limit);
        let ahead = match standing.ahead < self.limit + EXACT_PLACES {
            true => i64::from(standing.ahead),
            false => standing.distance.max(i64::from(standing.ahead)),
        };
        u32::try_from((ahead - limit + 1).max(1)).unwrap_or(u32::MAX)
    }

    /// Whether a waiter standing at `standing` is near enough its turn to listen.
    pub fn near(&self, standing: &Standing) -> bool {
        self.places(standing) <= NEAR_PLACES
    }
}

/// How long until a waiter looks again, from what it last `seen` (`since_seen` ago) and
/// when it last moved up in line (`since_moved` ago); `None` when its turn is too far off to
/// look.
pub fn pause(
    seen: &View,
    waiter: &Waiter,
    since_seen: Duration,
    since_moved: Duration,
) -> Option<Duration> {
    let places = waiter.places(&seen.standing);
    if places == 0 {
        return Some((since_moved / 10).clamp(NEXT_FASTEST, NEXT_SLOWEST));
    }
    // Half the expected wait: the places ahead times how long one place took lately, while the
    // line moves as usual. While a hold lasts longer than usual (or the pace is not known yet), a
    // quick handoff is assumed once it ends, and the waiter looks at least every twentieth of the
    // time the hold has lasted: so a long hold costs few looks, and a line that starts moving
    // again is followed closely.
    let stalled = seen
        .pace
        .since_release
        .map_or(since_moved, |d| d + since_seen);
    let usual = seen.pace.handoff.map(|hold| hold + NEXT_FASTEST);
    let mut pause = match usual {
        Some(usual) if stalled < usual * 4 => usual.saturating_mul(places) / 2,
        // Only the first few follow a stalled line closely (more when it moves fast); the
        // others learn that it moves again from their own tries, once a second, and then follow
        // its pace.
        _ if !watches_a_stall(places, usual) && !waiter.supersede => return None,
        _ => (ASSUMED_HANDOFF.saturating_mul(places) / 2).max(stalled / 20),
    }
    .max(BEHIND_FASTEST);
    if places <= NEAR_PLACES {
        // The two right behind the next never lose track for long.
        pause = pause.min(CLOSE_SLOWEST * places);
    }
    if waiter.supersede {
        return Some(pause.min(SUPERSEDE_SLOWEST));
    }
    (pause < BEHIND_SLOWEST).then_some(pause)
}

/// Whether a waiter `places` behind the next looks while the line stands still: the first
/// [`STALL_PLACES`], and further back those whose turn could come within [`STALL_REACH`] of the
/// line moving again at its `usual` pace per place (or the assumed one). Without them, a line
/// of short holds would drain past the first few faster than the engine's one-second re-check
/// tells a waiter that does not look, and that waiter would hold the line up for up to a second
/// when its turn came. (Those far enough back still do not look: a look's pause is kept below a
/// second, see [`pause`].)
fn watches_a_stall(places: u32, usual: Option<Duration>) -> bool {
    let usual = usual.unwrap_or(ASSUMED_HANDOFF).max(NEXT_FASTEST);
    places <= STALL_PLACES || u128::from(places) <= STALL_REACH.as_nanos() / usual.as_nanos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn waiter(supersede: bool) -> Waiter {
        Waiter {
            name: "n".into(),
            owner: "o".into(),
            limit: 1,
            shared: false,
            supersede,
        }
    }

    fn seen(next: bool, ahead: i32, distance: i64, handoff: u64, since_release: u64) -> View {
        View {
            epoch: 1,
            standing: Standing {
                next,
                ahead,
                distance,
            },
            pace: Pace {
                handoff: Some(ms(handoff)),
                since_release: Some(ms(since_release)),
            },
        }
    }

    #[test]
    fn the_next_waiter_looks_at_a_tenth_of_its_time_as_next() {
        let next = seen(true, 0, 0, 10, 5);
        assert_eq!(pause(&next, &waiter(false), ms(0), ms(0)), Some(ms(5)));
        assert_eq!(pause(&next, &waiter(false), ms(0), ms(200)), Some(ms(20)));
        assert_eq!(
            pause(&next, &waiter(false), ms(0), ms(60_000)),
            Some(ms(30))
        );
    }

    #[test]
    fn waiters_further_back_look_by_the_lines_pace_and_stop_when_far_off() {
        let moving = |ahead, distance| seen(false, ahead, distance, 10, 5);
        // Five places behind the next in a line moving every 15 ms: halfway, 37.5 ms.
        assert_eq!(
            pause(&moving(5, 5), &waiter(false), ms(0), ms(0)),
            Some(Duration::from_micros(37_500))
        );
        // Far back (estimated from tickets): not looking.
        assert_eq!(pause(&moving(9, 500), &waiter(false), ms(0), ms(0)), None);
        // A line of one-second holds: only the two right behind the next look.
        let slow = |ahead| seen(false, ahead, i64::from(ahead), 1_000, 100);
        assert_eq!(pause(&slow(1), &waiter(false), ms(0), ms(0)), Some(ms(200)));
        assert_eq!(pause(&slow(3), &waiter(false), ms(0), ms(0)), None);
        // A hold longer than usual: a quick handoff is expected when it ends, looking every
        // twentieth of the hold so far.
        let held = |ahead, since| seen(false, ahead, i64::from(ahead), 10, since);
        assert_eq!(
            pause(&held(5, 2_000), &waiter(false), ms(0), ms(0)),
            Some(ms(100))
        );
        // Further back in a line of short holds, a waiter whose turn could come within two
        // seconds of the line moving again looks too (20 places of 15 ms)...
        assert_eq!(
            pause(&held(20, 2_000), &waiter(false), ms(0), ms(0)),
            Some(ms(200))
        );
        // ... but not one further back still, nor in a line of slower holds past the first 16.
        assert_eq!(pause(&held(120, 2_000), &waiter(false), ms(0), ms(0)), None);
        let held_slow = |ahead, since| seen(false, ahead, i64::from(ahead), 200, since);
        assert_eq!(
            pause(&held_slow(16, 2_000), &waiter(false), ms(0), ms(0)),
            Some(ms(160))
        );
        assert_eq!(
            pause(&held_slow(20, 2_000), &waiter(false), ms(0), ms(0)),
            None
        );
        // A hold that drags on: the one right behind looks at most every 200 ms, others not.
        assert_eq!(
            pause(&held(1, 300_000), &waiter(false), ms(0), ms(0)),
            Some(ms(200))
        );
        assert_eq!(pause(&held(3, 300_000), &waiter(false), ms(0), ms(0)), None);
        // A --supersede waiter always looks, to learn it was replaced.
        assert_eq!(
            pause(&held(3, 300_000), &waiter(true), ms(0), ms(0)),
            Some(ms(250))
        );
    }

    #[test]
    fn pace_from_the_server_ignores_nonsense() {
        let pace = Pace::from_ms(Some(12.5), None);
        assert_eq!(pace.handoff, Some(Duration::from_micros(12_500)));
        assert_eq!(pace.since_release, None);
        let pace = Pace::from_ms(Some(f64::NAN), Some(-3.0));
        assert_eq!(pace, Pace::default());
    }
}
