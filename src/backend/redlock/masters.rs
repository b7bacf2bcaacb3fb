//! [`Masters`]: the N independent Redis masters of a `redlock://` URL, each reached through the
//! Redis backend's [`Link`], and [`Round`]: one request sent to every master at once.
//!
//! Every request of a round runs in a task of its own, with its own deadline, counted from when it
//! was sent; the caller reads the answers as they come and stops as soon as it can decide (a quorum
//! agreed, or can no longer agree). A request the caller no longer waits for still runs to its end
//! in its task, so a slow master's connection is never dropped half-way (which would throw it
//! away), and its answer lands before anything sent to that master later on the same connection.
//! Nothing connects before the first round; a master that is down is tried again by every round.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ::redis::FromRedisValue;
use tokio::sync::mpsc;

use super::scripts::Call;
use crate::backend::BackendError;
use crate::backend::redis::{self, connect::Link};

/// How long a round that has its quorum still waits for the other masters' answers: reads, so
/// that they show every master that answers, and releases and retreats, so that a run leaves no
/// hold behind on a master that is up (the process may exit right after).
pub const STRAGGLERS: Duration = Duration::from_millis(250);

/// The masters, in the order the URL names them.
pub struct Masters {
    links: Vec<Arc<Link>>,
}

/// The answers to one request sent to every master, as they arrive: `(master, answer)`.
pub struct Round<T> {
    answers: mpsc::UnboundedReceiver<(usize, Result<T, BackendError>)>,
    outstanding: usize,
}

impl<T> Round<T> {
    /// The next answer; `None` once every master has answered (or its request ran out of time).
    pub async fn next(&mut self) -> Option<(usize, Result<T, BackendError>)> {
        if self.outstanding == 0 {
            return None;
        }
        let answer = self.answers.recv().await;
        self.outstanding = match answer {
            Some(_) => self.outstanding - 1,
            None => 0,
        };
        answer
    }

    /// The next answer if it comes within `grace`: for answers worth having that the caller
    /// does not need to wait long for.
    pub async fn next_within(
        &mut self,
        grace: Duration,
    ) -> Option<(usize, Result<T, BackendError>)> {
        tokio::time::timeout(grace, self.next())
            .await
            .ok()
            .flatten()
    }

    /// How many masters have not answered yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }
}

/// The masters that let a round's grace run out, by index, for the later rounds of the same look
/// (see [`Masters::most_of_noting`]).
#[derive(Default)]
pub struct Stragglers(std::sync::Mutex<Vec<usize>>);

impl Stragglers {
    fn includes(&self, master: usize) -> bool {
        self.0.lock().is_ok_and(|known| known.contains(&master))
    }

    fn add(&self, master: usize) {
        if let Ok(mut known) = self.0.lock()
            && !known.contains(&master)
        {
            known.push(master);
        }
    }
}

impl Masters {
    /// The masters `settings` name, not connected yet: the first round connects to every master
    /// at once, and is what finds a quorum unreachable (a PING first would cost every run one
    /// more round trip). A master that is down is tried again by every round.
    pub fn new(settings: &[redis::Settings]) -> Result<Self, BackendError> {
        let links = settings
            .iter()
            .map(|s| Link::new(s).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Masters { links })
    }

    /// How many masters there are.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// A majority: N/2 + 1. Two quorums always share a master.
    pub fn quorum(&self) -> usize {
        self.links.len() / 2 + 1
    }

    /// Each master's link, in the URL's order.
    pub fn links(&self) -> &[Arc<Link>] {
        &self.links
    }

    /// `host:port` of master `i`.
    pub fn endpoint(&self, i: usize) -> &str {
        self.links[i].endpoint()
    }

    /// Runs `call` on every master at once, each giving up after `limit`.
    pub fn call<T>(&self, call: &Call, limit: Duration) -> Round<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.call_on_each(call, limit, false)
    }

    /// [`Masters::call`] for a script that may run twice on a master (owner-checked renewals and
    /// releases): a master whose kept connection broke gets it again over a new one.
    pub fn call_repeatable<T>(&self, call: &Call, limit: Duration) -> Round<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.call_on_each(call, limit, true)
    }

    /// [`Masters::call`], or [`Masters::call_repeatable`] when `repeatable`.
    fn call_on_each<T>(&self, call: &Call, limit: Duration, repeatable: bool) -> Round<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        let call = Arc::new(call.clone());
        self.send(move |link| {
            let call = Arc::clone(&call);
            async move {
                match repeatable {
                    true => call.run_repeatable(&link, limit).await,
                    false => call.run(&link, limit).await,
                }
            }
        })
    }

    /// Sends `request` to every master at once, each in a task of its own (the request carries
    /// its own deadline).
    pub fn send<T, F, Fut>(&self, request: F) -> Round<T>
    where
        F: Fn(Arc<Link>) -> Fut,
        Fut: Future<Output = Result<T, BackendError>> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, answers) = mpsc::unbounded_channel();
        for (i, link) in self.links.iter().enumerate() {
            let asked = request(Arc::clone(link));
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send((i, asked.await));
            });
        }
        Round {
            answers,
            outstanding: self.links.len(),
        }
    }

    /// Waits until a quorum of `round`'s masters has answered (or until that cannot happen), and
    /// then for the answers of the others that come within `grace` (a master that is down or
    /// frozen costs no more than the grace); returns the answers in the masters' order, and fails
    /// when fewer than a quorum came.
    pub async fn most_of<T>(
        &self,
        round: Round<T>,
        grace: Duration,
    ) -> Result<Vec<(usize, T)>, BackendError> {
        self.most_of_noting(round, grace, &Stragglers::default())
            .await
    }

    /// [`Masters::most_of`] for one round of several that look at the masters together (`list`
    /// reads every name's status): a master that let an earlier round's grace run out is not
    /// waited for again once a quorum answered, and one that lets this round's run out is noted
    /// in `stragglers`. A frozen master then costs such a look one grace, not one per round.
    pub async fn most_of_noting<T>(
        &self,
        mut round: Round<T>,
        grace: Duration,
        stragglers: &Stragglers,
    ) -> Result<Vec<(usize, T)>, BackendError> {
        let (mut answers, mut failures) = (Vec::new(), Vec::new());
        let mut heard = vec![false; self.len()];
        loop {
            let next = if answers.len() >= self.quorum() {
                let unheard = || (0..heard.len()).filter(|&i| !heard[i]);
                if unheard().all(|i| stragglers.includes(i)) {
                    break;
                }
                let next = round.next_within(grace).await;
                if next.is_none() && round.outstanding() > 0 {
                    unheard().for_each(|i| stragglers.add(i));
                }
                next
            } else {
                round.next().await
            };
            match next {
                Some((i, Ok(value))) => {
                    heard[i] = true;
                    answers.push((i, value));
                }
                Some((i, Err(e))) => {
                    heard[i] = true;
                    failures.push((i, e));
                }
                None => break,
            }
        }
        answers.sort_by_key(|(i, _)| *i);
        self.at_least_a_quorum(answers, failures)
    }

    fn at_least_a_quorum<T>(
        &self,
        answers: Vec<(usize, T)>,
        failures: Vec<(usize, BackendError)>,
    ) -> Result<Vec<(usize, T)>, BackendError> {
        if answers.len() < self.quorum() {
            return Err(self.no_quorum(failures));
        }
        for (_, e) in &failures {
            crate::debug!("{e}");
        }
        Ok(answers)
    }

    /// The error when fewer than a quorum of masters answered: every failure, each naming its
    /// master; "cannot reach" when none of them was an answer from a server.
    pub fn no_quorum(&self, mut failures: Vec<(usize, BackendError)>) -> BackendError {
        failures.sort_by_key(|(i, _)| *i);
        let unreachable = failures
            .iter()
            .all(|(_, e)| matches!(e, BackendError::Unreachable { .. }));
        let reasons = match failures.is_empty() {
            true => "no answer in time".to_owned(),
            false => failures
                .iter()
                .map(|(_, e)| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        };
        let endpoints: Vec<&str> = self.links.iter().map(|l| l.endpoint()).collect();
        let what = format!(
            "a quorum ({} of {}) of the redlock masters {}",
            self.quorum(),
            self.len(),
            endpoints.join(", ")
        );
        match unreachable {
            true => BackendError::Unreachable {
                endpoint: what,
                reason: reasons,
            },
            false => BackendError::Failed {
                endpoint: format!("{what} did not answer"),
                reason: reasons,
            },
        }
    }
}
