//! The line of one name, as its contenders' znode names show it: ordered by sequence number, and
//! the rule that says who holds — the same as every backend's, first come first served:
//! - an exclusive contender holds when every contender ahead of it is exclusive and fewer than its
//!   `--limit` are ahead;
//! - a shared contender holds when no exclusive contender is ahead of it (so a waiting writer is
//!   never starved by readers that came after it).
//!
//! Nobody joins ahead of anyone (a new znode gets a higher sequence number), so once a contender
//! holds it keeps holding until it leaves, and every holder joined before every waiter that holds
//! after it: tokens (create zxids) rise in the order the lease is taken.
//!
//! What a waiter watches is only what can make it a holder ([`Line::blockers`]): an exclusive
//! waiter the `limit` contenders right ahead of it (when fewer than `limit` remain ahead, one of
//! them is gone), a shared waiter the last exclusive contender ahead of it. A release wakes the
//! waiters it may let in and no others: no herd, whatever the length of the line.

use super::paths::Contender;
use crate::backend::Mode;

/// One name's contenders, first in line first.
#[derive(Clone, Debug, Default)]
pub struct Line {
    pub contenders: Vec<Contender>,
}

impl Line {
    /// The line among a name's children (slots and other nodes are left out).
    pub fn of(children: &[String]) -> Line {
        let mut contenders: Vec<Contender> = children
            .iter()
            .filter_map(|c| Contender::parse(c))
            .collect();
        contenders.sort_by_key(|c| c.sequence);
        Line { contenders }
    }

    /// The place of `owner`'s contender, if it is in line.
    pub fn position(&self, owner: &str) -> Option<usize> {
        self.contenders.iter().position(|c| c.owner == owner)
    }

    /// Whether the contender at `at` holds, counting by `limit` when it is exclusive.
    pub fn holds(&self, at: usize, limit: u32) -> bool {
        let ahead = &self.contenders[..at];
        match self.contenders[at].mode {
            Mode::Exclusive => {
                ahead.len() < limit.max(1) as usize
                    && ahead.iter().all(|c| c.mode == Mode::Exclusive)
            }
            Mode::Shared => ahead.iter().all(|c| c.mode == Mode::Shared),
        }
    }

    /// What the waiter at `at` must see leave before it may hold.
    pub fn blockers(&self, at: usize, limit: u32) -> &[Contender] {
        match self.contenders[at].mode {
            Mode::Exclusive => &self.contenders[at.saturating_sub(limit.max(1) as usize)..at],
            Mode::Shared => match self.contenders[..at]
                .iter()
                .rposition(|c| c.mode == Mode::Exclusive)
            {
                Some(writer) => &self.contenders[writer..=writer],
                None => &[],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line from a pattern such as "xxsx", the first in line first.
    fn line(pattern: &str) -> Line {
        let mut children: Vec<String> = pattern
            .chars()
            .enumerate()
            .map(|(i, m)| format!("{m}-o{i}-{i:010}"))
            .collect();
        children.reverse();
        Line::of(&children)
    }

    fn holding(line: &Line, limit: u32) -> String {
        (0..line.contenders.len())
            .map(|i| if line.holds(i, limit) { 'H' } else { '.' })
            .collect()
    }

    #[test]
    fn the_line_is_ordered_by_sequence_and_ignores_other_children() {
        let line = Line::of(&[
            "x-b-0000000002".into(),
            "slot-0".into(),
            "s-a-0000000001".into(),
            "run".into(),
        ]);
        let owners: Vec<&str> = line.contenders.iter().map(|c| c.owner.as_str()).collect();
        assert_eq!(owners, ["a", "b"]);
        assert_eq!(line.position("b"), Some(1));
        assert_eq!(line.position("c"), None);
    }

    #[test]
    fn first_come_first_served_across_modes() {
        let cases = [
            ("xxx", 1, "H.."),
            ("xxx", 2, "HH."),
            ("ssxs", 1, "HH.."),
            ("xss", 1, "H.."),
            ("sssx", 1, "HHH."),
            ("xxsx", 3, "HH.."),
        ];
        for (pattern, limit, expected) in cases {
            let seen = holding(&line(pattern), limit);
            assert_eq!(seen, expected, "{pattern} with limit {limit}");
        }
    }

    #[test]
    fn waiters_watch_only_what_can_let_them_in() {
        let blockers = |pattern: &str, at: usize, limit: u32| -> String {
            let line = line(pattern);
            line.blockers(at, limit)
                .iter()
                .map(|c| c.owner.clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        // An exclusive waiter: its predecessor, or the `limit` right ahead of it.
        assert_eq!(blockers("xxxx", 3, 1), "o2");
        assert_eq!(blockers("xxxx", 3, 2), "o1,o2");
        assert_eq!(blockers("ssx", 2, 1), "o1");
        // A shared waiter: the last writer ahead of it, never the readers.
        assert_eq!(blockers("xsxss", 4, 1), "o2");
        assert_eq!(blockers("sss", 2, 1), "");
    }
}
