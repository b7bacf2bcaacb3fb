//! [`Plan`]: a waiter's view of the line ahead of it, and what it does next — hold, wait for a
//! deletion, check one key, or read the line afresh. Pure logic, no I/O.
//!
//! The rules (the same as every backend's): an exclusive contender holds when fewer than
//! `limit` keys are ahead of it and none of them is shared; a shared contender holds when no
//! exclusive key is ahead of it. So a waiter watches only the keys that can make it a holder:
//! an exclusive one the last `limit` keys ahead (its predecessor, for a plain lock), a shared one
//! the last exclusive key ahead. A deletion therefore wakes at most `limit` waiters, or the run of
//! readers behind a writer, never the whole line.
//!
//! When a watched key is deleted the waiter learns, from the deleted value's [`Hints`], which key
//! was ahead of it; it checks that key still exists (after watching it) and watches it instead, or
//! reads the line when the hint is unknown or stale. Keys never join the line ahead of a waiter,
//! which is what makes every hint "true as long as the key it names exists", and "nothing ahead"
//! final.

use super::record::{Hints, Link};
use crate::backend::Mode;

/// A key ahead of this waiter, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ahead {
    /// Its id (the lease id in hex).
    pub id: String,
    pub mode: Mode,
    pub hints: Hints,
}

/// What the waiter does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// It is a holder.
    Hold,
    /// Sleep until a watched key is deleted.
    Wait,
    /// Watch this key, then check that it exists: it would be the next one to watch.
    Check(String),
    /// Read the line ahead afresh.
    Look,
}

/// One waiter's view of the line ahead of it.
#[derive(Clone, Debug)]
pub struct Plan {
    mode: Mode,
    limit: usize,
    /// The keys it watches, nearest first: the last `limit` keys ahead (exclusive), or the last
    /// exclusive key ahead (shared).
    watched: Vec<Ahead>,
    /// Exclusive: what is just ahead of the farthest watched key (of the waiter itself when none
    /// is watched). Shared, when nothing is watched: the last exclusive key ahead.
    beyond: Link,
    /// The key just ahead when it joined: a shared waiter's `prev` hint.
    joined_behind: Link,
}

impl Plan {
    /// A waiter that knows nothing yet of the line ahead of it.
    pub fn new(mode: Mode, limit: u32) -> Self {
        Plan {
            mode,
            limit: usize::try_from(limit.max(1)).unwrap_or(usize::MAX),
            watched: Vec::new(),
            beyond: Link::Unknown,
            joined_behind: Link::Unknown,
        }
    }

    /// How many keys ahead a read must return for [`Plan::looked`] to settle the view in one go:
    /// `limit + 1` for an exclusive waiter; `None` (all of them) for a shared one.
    pub fn depth(&self) -> Option<usize> {
        match self.mode {
            Mode::Exclusive => Some(self.limit.saturating_add(1)),
            Mode::Shared => None,
        }
    }

    /// A read of the keys ahead, nearest first; `more` when the read stopped before the head.
    pub fn looked(&mut self, ahead: Vec<Ahead>, more: bool) {
        if self.joined_behind == Link::Unknown {
            self.joined_behind = match ahead.first() {
                Some(a) => Link::Key(a.id.clone()),
                None if !more => Link::Nothing,
                None => Link::Unknown,
            };
        }
        match self.mode {
            Mode::Exclusive => {
                let mut ahead = ahead;
                self.beyond = match ahead.get(self.limit) {
                    Some(next) => Link::Key(next.id.clone()),
                    None if more => Link::Unknown,
                    None => Link::Nothing,
                };
                ahead.truncate(self.limit);
                self.watched = ahead;
            }
            Mode::Shared => {
                let farthest_writer_hint = ahead.last().map(|a| a.hints.writer.clone());
                match ahead.into_iter().find(|a| a.mode == Mode::Exclusive) {
                    Some(writer) => {
                        self.watched = vec![writer];
                        self.beyond = Link::Unknown;
                    }
                    None => {
                        self.watched.clear();
                        self.beyond = match (more, farthest_writer_hint) {
                            (false, _) => Link::Nothing,
                            // Only readers between here and the farthest key read: the last
                            // writer ahead of it is the last one ahead of this waiter.
                            (true, Some(hint)) => hint,
                            (true, None) => Link::Unknown,
                        };
                    }
                }
            }
        }
    }

    pub fn next(&self) -> Next {
        let after_watched = match self.mode {
            Mode::Exclusive if self.watched.len() >= self.limit => return Next::Wait,
            Mode::Exclusive => {
                if self.watched.iter().any(|a| a.mode == Mode::Shared) {
                    // A shared holder ahead keeps an exclusive one out, however few are ahead.
                    return Next::Wait;
                }
                Next::Hold
            }
            Mode::Shared if !self.watched.is_empty() => return Next::Wait,
            Mode::Shared => Next::Hold,
        };
        match &self.beyond {
            Link::Nothing => after_watched,
            Link::Key(id) => Next::Check(id.clone()),
            Link::Unknown => Next::Look,
        }
    }

    /// The ids of the watched keys.
    pub fn watched(&self) -> impl Iterator<Item = &str> {
        self.watched.iter().map(|a| a.id.as_str())
    }

    /// Watched key `id` is gone; `hints` are what it last knew (`None` when its value is
    /// unknown). Returns whether it was watched.
    pub fn deleted(&mut self, id: &str, hints: Option<Hints>) -> bool {
        let Some(position) = self.watched.iter().position(|a| a.id == id) else {
            return false;
        };
        let farthest = position + 1 == self.watched.len();
        self.watched.remove(position);
        let hints = hints.unwrap_or_default();
        match self.mode {
            Mode::Exclusive if farthest => {
                // What was beyond the deleted key is now beyond the new farthest one.
                if hints.prev == Link::Nothing || self.beyond == Link::Unknown {
                    self.beyond = hints.prev;
                }
            }
            // The watched keys stay a run of neighbours: what lies beyond them is unchanged.
            Mode::Exclusive => {}
            // Only readers between it and this waiter: its last writer is now this waiter's.
            Mode::Shared => self.beyond = hints.writer,
        }
        true
    }

    /// The outcome of [`Next::Check`] for key `id`: what was read after watching it, or `None`
    /// when it is gone.
    pub fn checked(&mut self, id: &str, found: Option<Ahead>) {
        if self.beyond != Link::Key(id.to_owned()) {
            return;
        }
        let Some(found) = found else {
            self.beyond = Link::Unknown;
            return;
        };
        match self.mode {
            Mode::Exclusive => {
                self.beyond = found.hints.prev.clone();
                self.watched.push(found);
            }
            Mode::Shared if found.mode == Mode::Exclusive => {
                self.beyond = Link::Unknown;
                self.watched = vec![found];
            }
            // A "last writer" that is not one says nothing: read the line.
            Mode::Shared => self.beyond = Link::Unknown,
        }
    }

    /// What this waiter knows now of the line ahead of it, for its own record.
    pub fn hints(&self) -> Hints {
        let nearest = self.watched.first();
        match self.mode {
            Mode::Exclusive => Hints {
                prev: match nearest {
                    Some(a) => Link::Key(a.id.clone()),
                    None => self.beyond.clone(),
                },
                writer: match nearest {
                    Some(a) if a.mode == Mode::Exclusive => Link::Key(a.id.clone()),
                    Some(a) => a.hints.writer.clone(),
                    None if self.beyond == Link::Nothing => Link::Nothing,
                    None => Link::Unknown,
                },
            },
            Mode::Shared => Hints {
                prev: self.joined_behind.clone(),
                writer: match nearest {
                    Some(a) => Link::Key(a.id.clone()),
                    None => self.beyond.clone(),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, mode: Mode, prev: Link, writer: Link) -> Ahead {
        Ahead {
            id: id.into(),
            mode,
            hints: Hints { prev, writer },
        }
    }

    fn writer(id: &str) -> Ahead {
        key(id, Mode::Exclusive, Link::Unknown, Link::Unknown)
    }

    fn reader(id: &str, last_writer: Link) -> Ahead {
        key(id, Mode::Shared, Link::Unknown, last_writer)
    }

    fn k(id: &str) -> Link {
        Link::Key(id.into())
    }

    fn hints(prev: Link, writer: Link) -> Option<Hints> {
        Some(Hints { prev, writer })
    }

    #[test]
    fn a_writer_watches_only_its_predecessor_and_holds_when_it_was_the_head() {
        let mut plan = Plan::new(Mode::Exclusive, 1);
        assert_eq!(plan.next(), Next::Look);
        plan.looked(vec![writer("c"), writer("b")], true);
        assert_eq!(plan.watched().collect::<Vec<_>>(), ["c"]);
        assert_eq!(plan.next(), Next::Wait);
        assert_eq!(plan.hints().prev, k("c"));
        // Its predecessor held (nothing ahead of it) and released.
        assert!(plan.deleted("c", hints(Link::Nothing, Link::Nothing)));
        assert_eq!(plan.next(), Next::Hold);
        assert_eq!(
            plan.hints(),
            Hints {
                prev: Link::Nothing,
                writer: Link::Nothing
            }
        );
    }

    #[test]
    fn a_writer_follows_a_departed_predecessor_to_the_key_before_it() {
        let mut plan = Plan::new(Mode::Exclusive, 1);
        plan.looked(vec![writer("c")], true);
        assert_eq!(plan.next(), Next::Wait);
        assert!(!plan.deleted("x", None), "an unwatched key changes nothing");
        assert!(plan.deleted("c", hints(k("b"), k("b"))));
        assert_eq!(plan.next(), Next::Check("b".into()));
        plan.checked("b", Some(key("b", Mode::Exclusive, k("a"), k("a"))));
        assert_eq!(plan.next(), Next::Wait);
        assert_eq!(plan.watched().collect::<Vec<_>>(), ["b"]);
        // The named key vanished too: only a fresh read can tell.
        assert!(plan.deleted("b", hints(k("a"), k("a"))));
        plan.checked("a", None);
        assert_eq!(plan.next(), Next::Look);
        // A predecessor whose value is unknown says nothing either.
        plan.looked(vec![writer("z")], false);
        assert!(plan.deleted("z", None));
        assert_eq!(
            plan.next(),
            Next::Hold,
            "the read said nothing lay beyond it"
        );
    }

    #[test]
    fn a_semaphore_waiter_watches_the_last_limit_keys_and_holds_below_limit() {
        let mut plan = Plan::new(Mode::Exclusive, 3);
        assert_eq!(plan.depth(), Some(4));
        plan.looked(
            vec![writer("d"), writer("c"), writer("b"), writer("a")],
            false,
        );
        assert_eq!(plan.watched().collect::<Vec<_>>(), ["d", "c", "b"]);
        assert_eq!(plan.next(), Next::Wait);
        // A middle key leaves: the farthest is still the farthest, "a" still beyond it.
        assert!(plan.deleted("c", None));
        assert_eq!(plan.next(), Next::Check("a".into()));
        plan.checked(
            "a",
            Some(key("a", Mode::Exclusive, Link::Nothing, Link::Nothing)),
        );
        assert_eq!(plan.watched().collect::<Vec<_>>(), ["d", "b", "a"]);
        assert_eq!(plan.next(), Next::Wait);
        assert!(plan.deleted("a", hints(Link::Nothing, Link::Nothing)));
        assert_eq!(plan.next(), Next::Hold, "two ahead of a limit of three");
    }

    #[test]
    fn a_semaphore_waiter_with_fewer_keys_ahead_than_the_limit_holds_at_once() {
        let mut plan = Plan::new(Mode::Exclusive, 3);
        plan.looked(vec![writer("b"), writer("a")], false);
        assert_eq!(plan.next(), Next::Hold);
        let mut plan = Plan::new(Mode::Exclusive, 3);
        plan.looked(vec![reader("b", Link::Nothing)], false);
        assert_eq!(
            plan.next(),
            Next::Wait,
            "a shared holder ahead keeps it out"
        );
    }

    #[test]
    fn a_reader_waits_only_for_the_last_writer_ahead() {
        let mut plan = Plan::new(Mode::Shared, 1);
        assert_eq!(plan.depth(), None);
        plan.looked(
            vec![reader("c", k("b")), writer("b"), reader("a", Link::Nothing)],
            false,
        );
        assert_eq!(plan.watched().collect::<Vec<_>>(), ["b"]);
        assert_eq!(plan.next(), Next::Wait);
        assert_eq!(
            plan.hints(),
            Hints {
                prev: k("c"),
                writer: k("b")
            }
        );
        // Readers ahead leaving change nothing for it.
        assert!(!plan.deleted("c", None));
        assert!(plan.deleted("b", hints(k("a"), Link::Nothing)));
        assert_eq!(plan.next(), Next::Hold);
    }

    #[test]
    fn a_reader_behind_readers_follows_their_writer_hint() {
        let mut plan = Plan::new(Mode::Shared, 1);
        plan.looked(vec![reader("c", k("w"))], true);
        assert_eq!(plan.next(), Next::Check("w".into()));
        plan.checked("w", Some(writer("w")));
        assert_eq!(plan.next(), Next::Wait);
        // A reader whose writer hint is unknown: read everything ahead.
        let mut plan = Plan::new(Mode::Shared, 1);
        plan.looked(vec![reader("c", Link::Unknown)], true);
        assert_eq!(plan.next(), Next::Look);
        plan.looked(
            vec![reader("c", Link::Unknown), reader("b", Link::Unknown)],
            false,
        );
        assert_eq!(plan.next(), Next::Hold);
    }

    #[test]
    fn a_writer_behind_readers_waits_for_every_one_of_them() {
        let mut plan = Plan::new(Mode::Exclusive, 1);
        plan.looked(
            vec![reader("r2", Link::Nothing), reader("r1", Link::Nothing)],
            false,
        );
        assert_eq!(plan.next(), Next::Wait);
        assert_eq!(plan.hints().writer, Link::Nothing);
        assert!(plan.deleted("r2", hints(k("r1"), Link::Nothing)));
        assert_eq!(plan.next(), Next::Check("r1".into()));
        plan.checked(
            "r1",
            Some(key("r1", Mode::Shared, Link::Nothing, Link::Nothing)),
        );
        assert_eq!(plan.next(), Next::Wait);
        assert!(plan.deleted("r1", hints(Link::Nothing, Link::Nothing)));
        assert_eq!(plan.next(), Next::Hold);
    }

    #[test]
    fn nothing_ahead_is_final_whatever_an_older_read_said() {
        let mut plan = Plan::new(Mode::Exclusive, 1);
        plan.looked(vec![writer("b"), writer("a")], false);
        assert!(plan.deleted("b", hints(Link::Nothing, Link::Nothing)));
        assert_eq!(plan.next(), Next::Hold);
    }
}
