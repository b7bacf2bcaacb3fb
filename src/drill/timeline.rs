//! What a drill observed, as plain data: every moment is an offset from the drill's start on the
//! boot clock, and every piece the drill could not observe is `None`. The verdict is computed from
//! this alone, so it can be tested on made-up timelines.

use std::time::Duration;

/// The value holder A writes once it holds the lease, before it is paused.
pub const A_BEFORE: &str = "a:before-pause";
/// The value holder A writes when it wakes up: stale on a backend whose leases expire.
pub const A_AFTER: &str = "a:after-resume";
/// The value holder B writes once it took over.
pub const B_WRITE: &str = "b:takeover";
/// The value the drill itself writes last with A's token: a write of A's that was already on its
/// way (a delayed packet) when A was paused, which no lock can call back.
pub const A_DELAYED: &str = "a:delayed";

/// Everything one drill saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The backend, password redacted.
    pub backend: String,
    pub name: String,
    /// A kernel lock (the file backend): it lasts as long as its holder, paused or not, so no
    /// takeover is possible and none is expected.
    pub kernel_lock: bool,
    pub requested_ttl: Duration,
    /// What A was told in `LOCKRUN_TTL_MS`.
    pub granted_ttl: Option<Duration>,
    /// The TERM-to-KILL grace lockrun uses with the granted TTL.
    pub kill_after: Duration,
    /// Median time of a status read.
    pub round_trip: Option<Duration>,
    /// Server clock minus local clock, in milliseconds; `None` without a server clock.
    pub skew_ms: Option<f64>,
    pub a: HolderA,
    pub b: HolderB,
    /// Every write attempt the probe store recorded, in order.
    pub writes: Vec<Write>,
}

/// Holder A: acquires, is paused past its lease, is resumed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HolderA {
    /// When its lockrun was started (before it asked for the lease).
    pub spawned: Duration,
    /// Its token, from its command's environment.
    pub token: Option<u64>,
    /// When the drill saw its command running with the lease.
    pub started: Option<Duration>,
    /// When its lockrun and its command were both stopped.
    pub paused: Option<Duration>,
    /// When they were continued.
    pub resumed: Option<Duration>,
    /// When its command was seen gone; `None`: still running when the drill gave up on it.
    pub command_ended: Option<Duration>,
    pub exited: Option<Duration>,
    pub exit_code: Option<u8>,
    /// The last line its lockrun printed, for a failure's detail.
    pub diagnostic: Option<String>,
}

/// Holder B: asks for the lease while A is paused.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HolderB {
    pub spawned: Option<Duration>,
    pub exited: Option<Duration>,
    pub exit_code: Option<u8>,
    pub diagnostic: Option<String>,
}

/// One write attempt through the probe store.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    pub at: Duration,
    pub token: u64,
    /// Which step wrote it: [`A_BEFORE`], [`A_AFTER`], [`B_WRITE`] or [`A_DELAYED`].
    pub value: String,
    pub accepted: bool,
}

impl Timeline {
    /// The first write of `value`.
    pub fn write(&self, value: &str) -> Option<&Write> {
        self.writes.iter().find(|w| w.value == value)
    }

    /// B's token, from its write (B's command writes first thing).
    pub fn b_token(&self) -> Option<u64> {
        self.write(B_WRITE).map(|w| w.token)
    }

    /// The moment B's command ran: its write.
    pub fn b_started(&self) -> Option<Duration> {
        self.write(B_WRITE).map(|w| w.at)
    }

    /// The lease length that counts: granted, else requested.
    pub fn ttl(&self) -> Duration {
        self.granted_ttl.unwrap_or(self.requested_ttl)
    }
}

/// Milliseconds, for reports.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

#[cfg(test)]
impl Timeline {
    /// A drill that went right on a backend whose leases expire (1 s TTL).
    pub fn example() -> Timeline {
        Timeline {
            backend: "redis://127.0.0.1:6379".into(),
            name: "lockrun-drill/test".into(),
            kernel_lock: false,
            requested_ttl: millis(1000),
            granted_ttl: Some(millis(1000)),
            kill_after: millis(250),
            round_trip: Some(millis(1)),
            skew_ms: Some(0.5),
            a: HolderA {
                spawned: millis(0),
                token: Some(33),
                started: Some(millis(20)),
                paused: Some(millis(25)),
                resumed: Some(millis(1500)),
                command_ended: Some(millis(1505)),
                exited: Some(millis(1510)),
                exit_code: Some(crate::exit::LEASE_LOST),
                diagnostic: None,
            },
            b: HolderB {
                spawned: Some(millis(30)),
                exited: Some(millis(1200)),
                exit_code: Some(0),
                diagnostic: None,
            },
            writes: vec![
                attempt(18, 33, A_BEFORE, true),
                attempt(1100, 34, B_WRITE, true),
                attempt(1503, 33, A_AFTER, false),
                attempt(1600, 33, A_DELAYED, false),
            ],
        }
    }
}

#[cfg(test)]
fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[cfg(test)]
fn attempt(ms: u64, token: u64, value: &str, accepted: bool) -> Write {
    Write {
        at: millis(ms),
        token,
        value: value.into(),
        accepted,
    }
}
