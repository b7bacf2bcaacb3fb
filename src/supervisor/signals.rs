//! Signals lockrun receives, as a stream of typed events.
//!
//! Handlers are installed once, before the command starts (and before waiting for the lock), and
//! do nothing but wake the runtime; the supervisor loop decides what each signal means. Tests feed
//! the same loop from a channel instead.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// The signals lockrun forwards to the command's process group.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The arrivals of the signals lockrun handles, in order.
pub type Signals = mpsc::UnboundedReceiver<Signal>;

/// Installs handlers for [`FORWARDED`] and returns the stream of their arrivals. Needs a running
/// tokio runtime.
pub fn listen() -> std::io::Result<Signals> {
    let (sender, receiver) = mpsc::unbounded_channel();
    for sig in FORWARDED {
        let mut stream = signal(SignalKind::from_raw(sig as i32))?;
        let sender = sender.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if sender.send(sig).is_err() {
                    break;
                }
            }
        });
    }
    Ok(receiver)
}

/// `work`'s outcome, or the signal that came first (`work` is then dropped, unfinished).
pub async fn unless_signalled<T>(
    work: impl Future<Output = T>,
    signals: &mut Signals,
) -> Result<T, Signal> {
    tokio::select! {
        done = work => Ok(done),
        Some(signal) = signals.recv() => Err(signal),
    }
}
