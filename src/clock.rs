//! The lease clock: `CLOCK_BOOTTIME` readings and sleeps.
//!
//! Every lease deadline in lockrun is a [`BootInstant`]. `CLOCK_BOOTTIME` is monotonic (a wall-clock
//! step never moves it) and, unlike `CLOCK_MONOTONIC` and therefore `std::time::Instant`, it keeps
//! counting while the machine is suspended — a lease on a server certainly does. Sleeps go through a
//! `timerfd` armed on the same clock with an absolute deadline, so a laptop that wakes from suspend,
//! or a lockrun resumed after SIGSTOP, wakes at once when the deadline has already passed.

use std::io;
use std::ops::{Add, Sub};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClock, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};
use nix::time::{ClockId, clock_gettime};
use tokio::io::unix::AsyncFd;

use crate::reactor::Pollable;

/// A point on `CLOCK_BOOTTIME`, as time since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// Reads the clock.
    pub fn now() -> Self {
        // CLOCK_BOOTTIME exists on every Linux since 2.6.39; failure would be a broken kernel.
        let spec = clock_gettime(ClockId::CLOCK_BOOTTIME).expect("CLOCK_BOOTTIME is readable");
        BootInstant(Duration::new(spec.tv_sec() as u64, spec.tv_nsec() as u32))
    }

    /// The reading as time since boot, to hand to another process (the clock is system-wide).
    pub fn since_boot(self) -> Duration {
        self.0
    }

    /// A reading handed over by another process, from [`BootInstant::since_boot`].
    pub fn from_since_boot(since_boot: Duration) -> Self {
        BootInstant(since_boot)
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// Time left until `self`, zero if it has passed.
    pub fn remaining(self) -> Duration {
        self.saturating_since(BootInstant::now())
    }

    /// `self - d`, clamped at boot.
    pub fn saturating_sub(self, d: Duration) -> Self {
        BootInstant(self.0.saturating_sub(d))
    }

    fn as_timespec(self) -> TimeSpec {
        TimeSpec::from_duration(self.0)
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(d))
    }
}

impl Sub<BootInstant> for BootInstant {
    type Output = Duration;
    fn sub(self, earlier: BootInstant) -> Duration {
        self.saturating_since(earlier)
    }
}

/// A reusable timer on `CLOCK_BOOTTIME`, awaited from the tokio loop.
pub struct BootTimer {
    /// `None` for a waiting timer the system refused a descriptor (see [`BootTimer::for_waiting`]).
    fd: Option<AsyncFd<Pollable<TimerFd>>>,
}

impl BootTimer {
    /// Creates a disarmed timer. Needs a running tokio reactor.
    pub fn new() -> io::Result<Self> {
        let fd = TimerFd::new(
            TimerClock::CLOCK_BOOTTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        Ok(BootTimer {
            fd: Some(crate::reactor::register(fd)?),
        })
    }

    /// A timer for a wait in line: as [`BootTimer::new`], but where the system refuses it one
    /// (no descriptor left), it sleeps on tokio's clock instead, which stops while the machine is
    /// suspended: a sleep then ends late by the time slept, and the wait looks at the boot clock
    /// when it wakes. A waiter is not worth failing for that; a holder's timer is (see `new`).
    pub fn for_waiting() -> Self {
        BootTimer::new().unwrap_or_else(|e| {
            crate::debug!(
                "no boot-clock timer for the wait ({}); sleeping on the monotonic clock",
                crate::messages::io(&e)
            );
            BootTimer { fd: None }
        })
    }

    /// Sleeps until `deadline`; `None` sleeps forever. Returns at once for a deadline in the past.
    pub async fn sleep_until(&mut self, deadline: Option<BootInstant>) -> io::Result<()> {
        let Some(deadline) = deadline else {
            return std::future::pending().await;
        };
        if deadline <= BootInstant::now() {
            return Ok(());
        }
        let Some(fd) = &self.fd else {
            tokio::time::sleep(deadline.remaining()).await;
            return Ok(());
        };
        // An absolute zero would disarm the timer; the check above keeps the deadline positive.
        fd.get_ref().inner().set(
            Expiration::OneShot(deadline.as_timespec()),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        loop {
            let mut guard = fd.readable().await?;
            let mut expirations = [0u8; 8];
            match nix::unistd::read(guard.get_inner().inner(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
