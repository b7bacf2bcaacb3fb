//! The lease timing the contract derives from a TTL when `--renew` and `--kill-after` are not
//! given, for tests that bound when a command must be stopped: renew every TTL/3, keep a margin of
//! TTL/10 (20 ms to 2 s) before the lease could expire, and leave the TERM-to-KILL grace
//! (TTL/4, at most 10 s, at most half of what the renewal and the margin leave) before that.
//! A command whose lease was last confirmed by a request sent at `s` must be stopped (TERM) by
//! `s + TTL − grace − margin`: its stop point.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct LeaseTiming {
    pub ttl: Duration,
    pub renew: Duration,
    pub kill_after: Duration,
    pub margin: Duration,
}

impl LeaseTiming {
    /// The defaults for a granted `ttl`.
    pub fn defaults(ttl: Duration) -> Self {
        let margin = (ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(2));
        let renew = ttl / 3;
        let room = ttl.saturating_sub(margin).saturating_sub(renew);
        let kill_after = (ttl / 4).min(Duration::from_secs(10)).min(room / 2);
        LeaseTiming {
            ttl,
            renew,
            kill_after,
            margin,
        }
    }

    /// When the command must have been sent TERM, for a lease last confirmed by a request sent
    /// at `sent`.
    pub fn stop_at(&self, sent: Instant) -> Instant {
        sent + self.ttl - self.kill_after - self.margin
    }

    /// What a test allows past the stop point for the TERM to land and be seen: half the grace,
    /// so that a lockrun that stops at the expiry, or that drops its grace, still fails.
    pub fn seen_dead_by(&self, sent: Instant) -> Instant {
        self.stop_at(sent) + self.kill_after / 2
    }
}
