//! The file backend's waits for a lock that another process holds only for an instant — the
//! ticket counter as a waiter joins the line, the token reservation as a holder takes its token,
//! the `--min-interval` record as a run is recorded — or for as long as that process is paused
//! there. A blocking `flock` would stop the runtime's only thread, and with it lockrun's signals,
//! its deadline and its cancellation; so each lock is tried without waiting and tried again a
//! moment later, until it is free, the wait's deadline has passed, or the wait is cancelled.

use std::io;
use std::time::Duration;

use crate::backend::Cancel;

/// Why the tries ended without the lock.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The wait's deadline passed.
    Expired,
    /// The wait was cancelled (a signal).
    Cancelled,
}

/// When to try again, and when to stop.
pub struct Patience<'a, 'c> {
    /// The pause between tries.
    pub every: Duration,
    /// Whether the wait's deadline has passed; looked at after each try that found the lock held.
    pub expired: &'a (dyn Fn() -> bool + Sync),
    /// Ends the tries at once when it resolves.
    pub cancel: Option<&'a mut Cancel<'c>>,
}

impl Patience<'_, '_> {
    /// Tries until the lock is free, however long that takes: for a step that has no deadline or
    /// cancellation of its own (its caller races it against lockrun's signals).
    pub fn unbounded(every: Duration) -> Patience<'static, 'static> {
        Patience {
            every,
            expired: &|| false,
            cancel: None,
        }
    }
}

/// Runs `attempt` (one try without waiting: `None` while the lock is held elsewhere) until it
/// gives a value, as `patience` says; `waiting` is called once, when the first try finds the lock
/// held (to say so with `-vv`).
pub async fn until_free<T>(
    patience: Patience<'_, '_>,
    mut attempt: impl FnMut() -> io::Result<Option<T>>,
    waiting: impl FnOnce(),
) -> io::Result<Result<T, Stopped>> {
    let Patience {
        every,
        expired,
        mut cancel,
    } = patience;
    let mut waiting = Some(waiting);
    loop {
        if let Some(value) = attempt()? {
            return Ok(Ok(value));
        }
        if let Some(say) = waiting.take() {
            say();
        }
        if expired() {
            return Ok(Err(Stopped::Expired));
        }
        let pause = tokio::time::sleep(every);
        match cancel.as_mut() {
            Some(cancel) => tokio::select! {
                () = pause => {}
                () = cancel.as_mut() => return Ok(Err(Stopped::Cancelled)),
            },
            None => pause.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const EVERY: Duration = Duration::from_millis(1);
    /// Far longer than any of these tries may take.
    const BOUND: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn tries_until_free_and_says_once_that_it_waits() {
        let (tries, said) = (Cell::new(0), Cell::new(0));
        let attempt = || {
            tries.set(tries.get() + 1);
            Ok((tries.get() == 4).then_some("held"))
        };
        let got = until_free(Patience::unbounded(EVERY), attempt, || {
            said.set(said.get() + 1)
        });
        assert_eq!(got.await.unwrap(), Ok("held"));
        assert_eq!((tries.get(), said.get()), (4, 1));
    }

    #[tokio::test]
    async fn a_free_lock_is_taken_without_a_word() {
        let said = Cell::new(false);
        let got = until_free(
            Patience::unbounded(EVERY),
            || Ok(Some(1)),
            || said.set(true),
        );
        assert_eq!(got.await.unwrap(), Ok(1));
        assert!(!said.get());
    }

    #[tokio::test]
    async fn the_deadline_and_the_cancellation_end_the_tries() {
        let never = || Ok(None::<()>);
        let expired = Patience {
            every: EVERY,
            expired: &|| true,
            cancel: None,
        };
        let got = tokio::time::timeout(BOUND, until_free(expired, never, || {})).await;
        assert_eq!(got.expect("still trying").unwrap(), Err(Stopped::Expired));

        let mut cancelled = std::pin::pin!(async {});
        let mut cancel: Cancel<'_> = cancelled.as_mut();
        let patience = Patience {
            every: Duration::from_secs(60),
            expired: &|| false,
            cancel: Some(&mut cancel),
        };
        let got = tokio::time::timeout(BOUND, until_free(patience, never, || {})).await;
        assert_eq!(got.expect("still trying").unwrap(), Err(Stopped::Cancelled));
    }

    #[tokio::test]
    async fn an_error_ends_the_tries() {
        let broken = || Err::<Option<()>, _>(io::Error::other("broken"));
        let got = until_free(Patience::unbounded(EVERY), broken, || {}).await;
        assert!(got.is_err());
    }
}
