//! [`Crowd`]: riding out a full server. `53300 too many clients` (or PgBouncer's `no more
//! connections allowed`) while acquiring or waiting clears by itself as other clients leave, so a
//! contender tries again after a jittered, growing pause (many lockruns turned away together do
//! not all come back at once), saying so at `-v`, until its `--wait` runs out; then, or at once
//! with `--no-wait`, the failure stands (exit 69).

use std::time::Duration;

use crate::backend::waiting::policy::random_bytes;
use crate::backend::{AcquireRequest, BackendError};
use crate::clock::BootInstant;
use crate::messages::duration;

/// The first pause, and the longest.
const FIRST: Duration = Duration::from_millis(50);
const LONGEST: Duration = Duration::from_secs(2);

/// The pauses of one contender.
#[derive(Debug)]
pub struct Crowd {
    next: Duration,
}

impl Default for Crowd {
    fn default() -> Self {
        Crowd { next: FIRST }
    }
}

impl Crowd {
    /// After a try that found the server full with `error`: pauses and returns `Ok` to try
    /// again, or returns the error when `request`'s wait is over.
    pub async fn pause(
        &mut self,
        error: BackendError,
        request: &AcquireRequest,
    ) -> Result<(), BackendError> {
        let now = BootInstant::now();
        let mut pause = jittered(self.next);
        self.next = (self.next * 2).min(LONGEST);
        if let Some(deadline) = request.deadline {
            if deadline <= now {
                return Err(error);
            }
            pause = pause.min(deadline.saturating_since(now));
        }
        crate::info!(
            "{error}; trying again in {} (until the wait runs out)",
            duration(pause)
        );
        tokio::time::sleep(pause).await;
        Ok(())
    }
}

/// Between half of `pause` and all of it.
fn jittered(pause: Duration) -> Duration {
    let random = random_bytes::<2>().map_or(u16::MAX, u16::from_ne_bytes);
    pause / 2 + pause / 2 * u32::from(random) / u32::from(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_between_half_and_all() {
        for _ in 0..100 {
            let p = jittered(Duration::from_millis(100));
            assert!(p >= Duration::from_millis(50) && p <= Duration::from_millis(100));
        }
    }
}
