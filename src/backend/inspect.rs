//! What a backend answers about names without holding them: who holds a name and who waits
//! (`status`), the held names under a prefix (`list`), breaking a name's holds (`release --force`),
//! the fleet-wide run interval (`--min-interval`: looked at before waiting, claimed once held) and
//! the server's clock (`lockrun drill`).
//!
//! Each backend implements [`Inspect`] once, on whatever has its connection; [`Backend`] and the
//! waiting engine's `Line` hand it out, so no backend forwards these calls by hand. [`held`] is the
//! part of `list` that is the same everywhere: the statuses of the names found, the held ones only.
//!
//! [`Backend`]: super::Backend

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use super::{BackendError, IntervalClaim, LockStatus};
use crate::name::LockName;

/// The questions a backend answers about names it need not hold.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// Who holds `name` now, and who waits.
    async fn status(&self, name: &LockName) -> Result<LockStatus, BackendError>;

    /// Every held name that starts with `prefix`, sorted by name.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, BackendError>;

    /// Drops every holder of `name` and tells each at once (see [`super::Lease::revoked`]);
    /// returns how many there were. Tokens are never reset.
    async fn force_release(&self, name: &LockName) -> Result<usize, BackendError>;

    /// `--min-interval`: atomically, by the backend's clock where it has one, records that NAME is
    /// run now unless it was last recorded less than `interval` ago.
    async fn claim_interval(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<IntervalClaim, BackendError>;

    /// `--min-interval`, before waiting for NAME: how long ago NAME last ran, when a claim made
    /// now would find that too soon (by the same clock and rule as [`Inspect::claim_interval`]);
    /// records nothing. `None` is no verdict: the claim made once NAME is held decides.
    async fn ran_within(
        &self,
        name: &LockName,
        interval: Duration,
    ) -> Result<Option<Duration>, BackendError>;

    /// The backend server's wall clock, for the skew that `lockrun drill` reports; `None` for a
    /// backend without a clock of its own. No lease decision ever uses it.
    async fn server_time(&self) -> Result<Option<std::time::SystemTime>, BackendError> {
        Ok(None)
    }
}

/// A look's verdict (see [`Inspect::ran_within`]) from how long ago NAME last ran, `ago_us`
/// microseconds by the server's clock: that age, when it is less than `interval`. A negative age
/// (the server's clock went back) is too soon, as it is for every claim.
pub fn ran_within_micros(ago_us: i64, interval: Duration) -> Option<Duration> {
    let ago = Duration::from_micros(u64::try_from(ago_us).unwrap_or(0));
    (ago < interval).then_some(ago)
}

/// The statuses of those of `names` that are held, in the order given, each read by `status` one
/// after the other: what `list` returns once a backend has found the names under its prefix.
pub async fn held<Read>(
    names: impl IntoIterator<Item = LockName>,
    status: impl Fn(LockName) -> Read,
) -> Result<Vec<LockStatus>, BackendError>
where
    Read: Future<Output = Result<LockStatus, BackendError>>,
{
    let mut held = Vec::new();
    for name in names {
        let status = status(name).await?;
        if status.held {
            held.push(status);
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_is_too_soon_within_the_interval_and_when_the_clock_went_back() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            ran_within_micros(59_000_000, minute),
            Some(Duration::from_secs(59))
        );
        assert_eq!(ran_within_micros(60_000_000, minute), None);
        assert_eq!(ran_within_micros(-5, minute), Some(Duration::ZERO));
    }
}
