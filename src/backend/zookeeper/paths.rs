//! Where lockrun's state lives in the ensemble, and how a contender's znode is named.
//!
//! Under the chroot (if any):
//! - `/lockrun` — persistent, the root of every name;
//! - `/lockrun/<name>` — a container node per name (ZooKeeper deletes it once it is empty), the
//!   name written with `/` as `%2F`, so that `a` and `a/b` are siblings: one flat list of names,
//!   and a name's children are only its own;
//! - `/lockrun/<name>/x-<owner>-<sequence>` (exclusive) or `s-<owner>-<sequence>` (shared) — one
//!   ephemeral sequential znode per contender, holding its [`Record`](super::record::Record). The
//!   owner (128 random bits) makes the name *protected*: a create whose reply was lost is found
//!   again by it, instead of leaving a ghost in line for a session timeout. Ordered by sequence
//!   number, the contenders are the line;
//! - `/lockrun/<name>/slot-<K>` — with `--limit` above 1, semaphore slot `K`: ephemeral, created by
//!   the holder that took it, holding that holder's znode name;
//! - `/lockrun/<name>/supersede` — persistent: the newest `--supersede` waiter (its token and
//!   record);
//! - `/lockrun/<name>/run` — persistent: when NAME last ran, for `--min-interval`.
//!
//! Names cannot contain `%`, so the mapping is one to one.

use crate::backend::Mode;
use crate::name::LockName;

const ROOT: &str = "/lockrun";
const SLOT: &str = "slot-";
pub const SUPERSEDE: &str = "supersede";
pub const RUN: &str = "run";

/// The paths of one chroot.
#[derive(Clone, Debug)]
pub struct Paths {
    chroot: String,
}

impl Paths {
    /// Paths under `chroot` (`""` or `/a/b`).
    pub fn new(chroot: &str) -> Self {
        Paths {
            chroot: chroot.to_owned(),
        }
    }

    /// `CHROOT/lockrun`.
    pub fn root(&self) -> String {
        format!("{}{ROOT}", self.chroot)
    }

    /// Every persistent node from the first chroot segment down to the root, in order.
    pub fn ancestors(&self) -> Vec<String> {
        let root = self.root();
        root.match_indices('/')
            .skip(1)
            .map(|(at, _)| root[..at].to_owned())
            .chain(std::iter::once(root.clone()))
            .collect()
    }

    /// The node of `name`, whose children are its contenders.
    pub fn dir(&self, name: &LockName) -> String {
        format!("{}/{}", self.root(), encode(name))
    }

    /// The full path of `child` of `name`'s node.
    pub fn child(&self, name: &LockName, child: &str) -> String {
        format!("{}/{child}", self.dir(name))
    }

    /// The path a contender passes to a sequential create.
    pub fn contender(&self, name: &LockName, mode: Mode, owner: &str) -> String {
        self.child(name, &format!("{}-{owner}-", mode_tag(mode)))
    }

    /// The path of semaphore slot `slot`.
    pub fn slot(&self, name: &LockName, slot: u32) -> String {
        self.child(name, &format!("{SLOT}{slot}"))
    }
}

/// A name as one path component.
pub fn encode(name: &LockName) -> String {
    name.as_str().replace('/', "%2F")
}

/// The name a child of the root stands for; `None` for anything that is not one.
pub fn decode(child: &str) -> Option<LockName> {
    LockName::parse(&child.replace("%2F", "/")).ok()
}

fn mode_tag(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "x",
        Mode::Shared => "s",
    }
}

/// One contender's znode, as its name tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contender {
    /// The child's name (not the full path).
    pub node: String,
    pub mode: Mode,
    pub owner: String,
    pub sequence: i64,
}

impl Contender {
    /// Reads a child of a name's node; `None` for a slot or anything else that is not a contender.
    pub fn parse(child: &str) -> Option<Contender> {
        let (tag, rest) = child.split_once('-')?;
        let mode = match tag {
            "x" => Mode::Exclusive,
            "s" => Mode::Shared,
            _ => return None,
        };
        let (owner, sequence) = rest.rsplit_once('-')?;
        if owner.is_empty() || sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(Contender {
            node: child.to_owned(),
            mode,
            owner: owner.to_owned(),
            sequence: sequence.parse().ok()?,
        })
    }
}

/// The slot a child of a name's node stands for, if it is a slot.
pub fn slot_of(child: &str) -> Option<u32> {
    child.strip_prefix(SLOT)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(raw: &str) -> LockName {
        LockName::parse(raw).unwrap()
    }

    #[test]
    fn names_map_to_one_component_and_back() {
        let paths = Paths::new("/team/a");
        assert_eq!(paths.root(), "/team/a/lockrun");
        assert_eq!(paths.ancestors(), ["/team", "/team/a", "/team/a/lockrun"]);
        assert_eq!(Paths::new("").ancestors(), ["/lockrun"]);
        assert_eq!(paths.dir(&name("ci/deploy")), "/team/a/lockrun/ci%2Fdeploy");
        assert_eq!(decode("ci%2Fdeploy"), Some(name("ci/deploy")));
        assert_eq!(decode("bad%name"), None);
        assert_eq!(
            paths.contender(&name("n"), Mode::Shared, "ab12"),
            "/team/a/lockrun/n/s-ab12-"
        );
    }

    #[test]
    fn contenders_are_told_from_the_other_children() {
        let c = Contender::parse("x-ab12-0000000007").unwrap();
        assert_eq!(
            (c.mode, c.owner.as_str(), c.sequence),
            (Mode::Exclusive, "ab12", 7)
        );
        assert_eq!(
            Contender::parse("s-ab12-0000000010").unwrap().mode,
            Mode::Shared
        );
        for other in [
            "slot-1",
            "supersede",
            "run",
            "x-ab12-",
            "x--0001",
            "q-ab-0001",
        ] {
            assert_eq!(Contender::parse(other), None, "{other}");
        }
        assert_eq!(slot_of("slot-3"), Some(3));
        assert_eq!(slot_of("run"), None);
    }
}
