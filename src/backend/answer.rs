//! The one deadline for an answer from a server (a request, a connection), counted while lockrun
//! runs: time that lockrun itself stood still (stopped with SIGSTOP, a frozen VM, a starved
//! machine) is not the server's silence.
//!
//! A process stopped while a request is on the wire finds, when continued, its timer long expired
//! and the answer waiting unread in its socket — and sees the timer first, because a stop ends
//! its wait for events with nothing read (EINTR). Taking that for a silent server would make a
//! waiter's first try look like an unreachable backend (exit 69) although the server answered.
//! So a deadline that is found to have passed long before it was noticed gives the server its
//! time once more, counted from then: the answer already there is read at once, and a server
//! really silent is still given up on, one deadline later.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;

/// How late a deadline may be noticed before lockrun counts itself as having stood still: far
/// above a timer's usual lateness on a loaded machine (milliseconds), far below a stop.
const STOOD_STILL: Duration = Duration::from_millis(250);

/// No answer came within the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoAnswer;

/// `work` within `limit` of lockrun's running time (see the module's header).
pub async fn within<F: Future>(limit: Duration, work: F) -> Result<F::Output, NoAnswer> {
    let started = Instant::now();
    let mut work = pin!(work);
    if let Ok(done) = tokio::time::timeout(limit, &mut work).await {
        return Ok(done);
    }
    if started.elapsed() < limit + STOOD_STILL {
        return Err(NoAnswer);
    }
    crate::debug!(
        "the deadline passed while lockrun stood still; giving the server its time again"
    );
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| NoAnswer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn an_answer_within_the_limit_is_returned() {
        let got = runtime().block_on(within(Duration::from_secs(1), async { 7 }));
        assert_eq!(got, Ok(7));
    }

    /// Silence noticed on time is given up on then, not a deadline later.
    #[test]
    fn silence_noticed_on_time_is_no_answer() {
        let limit = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let got = runtime().block_on(within(limit, std::future::pending::<()>()));
        assert_eq!(got, Err(NoAnswer));
        assert!(
            started.elapsed() < limit * 2,
            "waited {:?}",
            started.elapsed()
        );
    }

    /// The runtime's thread blocked past the deadline stands for lockrun stopped: the answer
    /// that came meanwhile, seen only after the expired timer, is still taken.
    #[test]
    fn a_deadline_noticed_late_gives_the_server_its_time_again() {
        let got = runtime().block_on(async {
            let (answer, answered) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = answer.send("answer");
            });
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                std::thread::sleep(STOOD_STILL * 2);
            });
            within(Duration::from_millis(50), answered).await
        });
        assert_eq!(got, Ok(Ok("answer")));
    }
}
