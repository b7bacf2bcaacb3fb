//! The drill's measurements of the backend itself: the round-trip time of a status read and,
//! where the backend has a clock, how far it is from the local wall clock.

use std::time::{Duration, SystemTime};

use crate::backend::{Backend, BackendError};
use crate::clock::BootInstant;
use crate::name::LockName;

/// Status reads timed for the round trip.
const SAMPLES: usize = 5;

/// The median time of a few status reads of `name`, on the boot clock.
pub async fn round_trip(backend: &dyn Backend, name: &LockName) -> Result<Duration, BackendError> {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let sent = BootInstant::now();
        backend.inspect().status(name).await?;
        samples.push(BootInstant::now() - sent);
    }
    samples.sort();
    Ok(samples[SAMPLES / 2])
}

/// Server clock minus local clock in milliseconds, the local reading taken half-way through the
/// request; `None` when the backend has no clock.
pub async fn skew_ms(backend: &dyn Backend) -> Result<Option<f64>, BackendError> {
    let before = SystemTime::now();
    let sent = BootInstant::now();
    let Some(server) = backend.inspect().server_time().await? else {
        return Ok(None);
    };
    let local = before + (BootInstant::now() - sent) / 2;
    let skew = match server.duration_since(local) {
        Ok(ahead) => ahead.as_secs_f64(),
        Err(behind) => -behind.duration().as_secs_f64(),
    };
    // `+ 0.0` turns a negative zero into zero.
    Ok(Some((skew * 10_000.0).round() / 10.0 + 0.0))
}
