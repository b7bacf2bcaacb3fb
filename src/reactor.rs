//! Registering owned kernel objects (timerfd, inotify) with tokio's reactor.
//!
//! nix's wrappers own their descriptors and expose them through `AsFd`; tokio's `AsyncFd` wants
//! `AsRawFd`. [`Pollable`] bridges the two, and [`register`] is the one place that vouches for the
//! descriptor's lifetime.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// An owned descriptor-holding value, seen through `AsRawFd`.
pub struct Pollable<T>(T);

impl<T> Pollable<T> {
    /// The wrapped value.
    pub fn inner(&self) -> &T {
        &self.0
    }
}

impl<T: AsFd> AsRawFd for Pollable<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Registers `value` for readiness to read. Needs a running tokio runtime.
pub fn register<T: AsFd>(value: T) -> io::Result<AsyncFd<Pollable<T>>> {
    // SAFETY: `value` owns its descriptor (timerfd, inotify) and moves into the AsyncFd, so the
    // descriptor stays open and the same for exactly as long as the registration lives.
    unsafe { AsyncFd::register_with_interest(Pollable(value), Interest::READABLE) }
        .map_err(io::Error::from)
}
