//! [`Sightings`]: the clock-free rule by which a waiter decides that a holder (or a waiter ahead
//! of it) is gone.
//!
//! DynamoDB has no clock that a condition can read, and hosts' wall clocks may be anything, so
//! no record carries an expiry. Instead every holder rewrites its record version number (RVN) at
//! each renewal, and counts its lease from when that renewal was *sent*. A watcher notes when
//! (by its own boot clock) a read first *answered* with a given RVN. That answer left the server
//! after the renewal was applied, which was after it was sent; so once the watcher has seen the
//! same RVN for a whole lease, the holder's lease — counted from that renewal or any earlier one —
//! has run out, whatever the two hosts' wall clocks say, and the takeover write (conditional on
//! that very RVN) cannot overtake a renewal that would have saved it. A renewal that lands first
//! changes the RVN and the takeover fails. Only the rates of the two boot clocks matter, and the
//! holder's safety margin covers those.
//!
//! The same rule, with the heartbeat's horizon instead of a lease, lets the waiters just behind
//! the head of the line skip a waiter that died in line.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use crate::clock::BootInstant;

/// For each thing watched, the version last seen and when a read first answered with it.
#[derive(Debug)]
pub struct Sightings<K> {
    seen: HashMap<K, (String, BootInstant)>,
}

impl<K> Default for Sightings<K> {
    fn default() -> Self {
        Sightings {
            seen: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Sightings<K> {
    /// Records what one read showed, answered at `at`: the version of each thing it lists. Things
    /// it no longer lists are forgotten.
    pub fn observe(&mut self, shown: impl IntoIterator<Item = (K, String)>, at: BootInstant) {
        let mut next = HashMap::new();
        for (key, version) in shown {
            let since = match self.seen.remove(&key) {
                Some((seen, since)) if seen == version => since,
                _ => at,
            };
            next.insert(key, (version, since));
        }
        self.seen = next;
    }

    /// Whether `key` has shown `version` for at least `horizon`.
    pub fn gone(&self, key: &K, version: &str, horizon: Duration, now: BootInstant) -> bool {
        self.seen
            .get(key)
            .is_some_and(|(seen, since)| seen == version && now.saturating_since(*since) >= horizon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unchanged_version_counts_and_a_change_starts_over() {
        let t0 = BootInstant::now();
        let later = |ms| t0 + Duration::from_millis(ms);
        let mut s = Sightings::default();
        s.observe([("a", "1".to_owned())], t0);
        s.observe([("a", "1".to_owned())], later(500));
        assert!(s.gone(&"a", "1", Duration::from_millis(900), later(900)));
        assert!(!s.gone(&"a", "1", Duration::from_millis(901), later(900)));
        s.observe([("a", "2".to_owned())], later(1000));
        assert!(!s.gone(&"a", "2", Duration::from_millis(500), later(1400)));
        assert!(s.gone(&"a", "2", Duration::from_millis(500), later(1500)));
        assert!(!s.gone(&"a", "1", Duration::from_millis(1), later(2000)));
        s.observe([], later(1600));
        assert!(!s.gone(&"a", "2", Duration::from_millis(1), later(3000)));
    }
}
