//! What Redlock allows for clocks and for the time a round takes. A master counts a lease from
//! when its request arrived, by its own clock; lockrun counts it from when the request was sent,
//! by the boot clock, less the drift the masters' clocks may have run ahead meanwhile. A grant is
//! used only while most of its lease is still ahead.

use std::time::Duration;

use crate::clock::BootInstant;

/// Clock drift allowed for a lease of `ttl`: 1% of it, plus 2 ms for the masters' timer
/// resolution.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How long a lease of `ttl`, asked for at some moment, is known to last from that moment:
/// `ttl` less the drift.
pub fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(drift(ttl))
}

/// Whether grants asked for at `sent` still leave the lease well inside its `ttl`: what is left of
/// it (TTL − elapsed − drift) is more than half of it.
pub fn well_inside(ttl: Duration, sent: BootInstant) -> bool {
    let elapsed = BootInstant::now().saturating_since(sent);
    elapsed + drift(ttl) < ttl / 2
}

/// A lease length in whole milliseconds, at least one.
pub fn millis(ttl: Duration) -> u64 {
    ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drift_is_a_hundredth_plus_two_milliseconds() {
        assert_eq!(drift(Duration::from_secs(2)), Duration::from_millis(22));
        assert_eq!(
            validity(Duration::from_secs(15)),
            Duration::from_millis(14_848)
        );
        assert!(well_inside(Duration::from_secs(2), BootInstant::now()));
        let long_ago = BootInstant::now().saturating_sub(Duration::from_secs(1));
        assert!(!well_inside(Duration::from_secs(2), long_ago));
    }
}
