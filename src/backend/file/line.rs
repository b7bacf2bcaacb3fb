//! The line of one name on the file backend: first come, first served across modes, so a waiting
//! exclusive holder is never starved by shared holders that came after it, and `--supersede`
//! waiters can see who came after them.
//!
//! The line is the directory `NAME.line`. A waiter's place is a ticket file in it, named
//! `T<ticket>-<mode>` (`x` exclusive, `s` shared, then `s` again for `--supersede`), holding a
//! heartbeat line (the boot clock, in milliseconds, when the waiter last looked) and the waiter's
//! record; the waiter keeps an exclusive `flock` on it for as long as it stands in line. A waiter
//! that died is seen at once (its lock is gone), one that is frozen (stopped) once its heartbeat
//! is [`STALE`] old, as on the networked backends; either's ticket is cleared by the next one to
//! look, and a frozen waiter that thaws joins again at the back. A ticket file appears complete
//! and locked: it is written under a temporary name and renamed into place. Tickets come from the
//! counter file `NAME.tickets`, under its lock.
//!
//! The rules: an exclusive waiter may try for a slot when no live waiter is ahead of it; a shared
//! waiter when no live exclusive waiter is ahead of it. The networked backends let an exclusive
//! waiter try while fewer than `--limit` are ahead, as their server takes a slot only when fewer
//! waiters are ahead than slots are free; kernel locks cannot count the free slots in the same
//! step, so waiters allowed to try together raced for one freed slot, and a later one could win
//! it. Here the slots a release frees go to the waiters one after another: each leaves the line
//! once its command has started, which lets the next one try. A waiter that may not try yet
//! watches only the ticket that stands in its way (the last one ahead, or the last exclusive one
//! ahead), so one leaving wakes only its follower, never the whole line. A run that may not wait
//! (`--no-wait`) does not join: it tries when no live waiter in line would stand in its way, so
//! its ticket, there for an instant, never turns away another such run that could hold.
//!
//! A joining waiter keeps the counter's lock until its ticket file is in place, so a ticket file
//! never appears behind one with a higher ticket. The tickets ahead of a waiter can therefore
//! only go, never come: it reads the directory once, when it joins, and each later look checks
//! only the tickets nearest to it in that list, dropping those that went. The line's *floor*
//! (the file `floor`, a ticket below which every ticket is gone, raised by each exclusive
//! waiter that finds nobody left ahead of it) lets a look drop at once the tickets that went
//! since the last, so a look costs the same in a line of ten and of a thousand.
//!
//! Shared holders keep their records here too, as `H<token>` files they hold locked.

use std::fs::{File, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use super::paths;
use super::state_dir::StateDir;
use crate::backend::{HolderInfo, Mode};
use crate::clock::BootInstant;
use crate::name::LockName;

/// Prefix of a waiter's ticket file.
const TICKET: &str = "T";
/// A waiter that has not looked at the line for this long is taken to be gone (it looks at least
/// every second while it waits).
pub const STALE: std::time::Duration = std::time::Duration::from_secs(3);
/// Width of the heartbeat line, so that rewriting it never touches the record after it.
const BEAT_WIDTH: usize = 20;
/// Prefix of a shared holder's record file.
const HOLDER: &str = "H";
/// The file that holds the line's floor (see the module).
const FLOOR: &str = "floor";

/// One waiter in line, as its ticket file names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub ticket: u64,
    pub mode: Mode,
    pub supersede: bool,
}

impl Entry {
    /// The ticket file's name.
    pub fn file_name(&self) -> String {
        let mode = match self.mode {
            Mode::Exclusive => "x",
            Mode::Shared => "s",
        };
        let supersede = if self.supersede { "s" } else { "" };
        format!("{TICKET}{:020}-{mode}{supersede}", self.ticket)
    }

    /// The entry a file name stands for, or `None` for any other file.
    pub fn parse(file_name: &str) -> Option<Entry> {
        let rest = file_name.strip_prefix(TICKET)?;
        let (ticket, flags) = rest.split_once('-')?;
        let (mode, supersede) = match flags {
            "x" => (Mode::Exclusive, false),
            "s" => (Mode::Shared, false),
            "xs" => (Mode::Exclusive, true),
            "ss" => (Mode::Shared, true),
            _ => return None,
        };
        Some(Entry {
            ticket: ticket.parse().ok()?,
            mode,
            supersede,
        })
    }
}

/// The name of a shared holder's record file.
pub fn holder_file(token: u64) -> String {
    format!("{HOLDER}{token:020}")
}

/// Whether a file of the line is a shared holder's record.
pub fn is_holder_file(file_name: &str) -> bool {
    file_name
        .strip_prefix(HOLDER)
        .is_some_and(|t| t.parse::<u64>().is_ok())
}

/// A place in line, held: the ticket file, locked.
pub struct Place {
    pub entry: Entry,
    file: File,
    /// When the heartbeat was last written.
    beat: BootInstant,
    /// The tickets that were ahead when this place was taken, oldest first, less those since
    /// seen gone: no ticket ahead can appear later (see the module).
    ahead: Vec<Entry>,
}

impl Place {
    /// Whether this place has gone stale (its waiter was stopped for longer than [`STALE`]):
    /// others no longer count it, and it must join the line again.
    pub fn stale(&self) -> bool {
        BootInstant::now().saturating_since(self.beat) >= STALE
    }

    /// How many tickets may still be ahead of this place: those ahead when it was taken, less
    /// those its looks found gone.
    pub fn tickets_ahead(&self) -> usize {
        self.ahead.len()
    }

    /// Writes the heartbeat: this waiter is still here.
    pub fn beat(&mut self) -> io::Result<()> {
        let now = BootInstant::now();
        self.file.write_all_at(beat_line(now).as_bytes(), 0)?;
        self.beat = now;
        Ok(())
    }
}

/// The heartbeat line for `at`.
fn beat_line(at: BootInstant) -> String {
    format!("{:0BEAT_WIDTH$}\n", at.since_boot().as_millis())
}

/// The heartbeat in a ticket file's first bytes, if it holds one.
fn read_beat(file: &File) -> Option<BootInstant> {
    let mut buf = [0u8; BEAT_WIDTH];
    file.read_exact_at(&mut buf, 0).ok()?;
    let ms: u64 = std::str::from_utf8(&buf).ok()?.parse().ok()?;
    Some(BootInstant::from_since_boot(
        std::time::Duration::from_millis(ms),
    ))
}

/// What a look at the line found for one place.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It is this waiter's turn to try for the lock.
    Turn,
    /// Not yet: these ticket files stand in the way (watch them).
    Behind(Vec<String>),
    /// A newer `--supersede` waiter joined: its ticket file.
    Superseded(String),
}

/// One name's line.
pub struct Line {
    pub dir: StateDir,
}

impl Line {
    /// The line of `name`, its directory created if missing.
    pub fn open(state: &StateDir, name: &LockName) -> io::Result<Line> {
        Ok(Line {
            dir: state.subdir(&paths::line_dir(name))?,
        })
    }

    /// The line of `name` if its directory exists.
    pub fn existing(state: &StateDir, name: &LockName) -> io::Result<Option<Line>> {
        Ok(state
            .existing_subdir(&paths::line_dir(name))?
            .map(|dir| Line { dir }))
    }

    /// Whether nobody may be waiting for `name` (no ticket at all; a dead waiter's ticket counts
    /// until someone who joins clears it).
    pub fn is_empty(state: &StateDir, name: &LockName) -> io::Result<bool> {
        match Self::existing(state, name)? {
            None => Ok(true),
            Some(line) => Ok(line.entries()?.is_empty()),
        }
    }

    /// Joins the line with a new ticket holding `record`; `None` while another process holds the
    /// ticket counter (for an instant, as it joins), to be tried again.
    pub fn join(
        &self,
        state: &StateDir,
        name: &LockName,
        mode: Mode,
        supersede: bool,
        record: &HolderInfo,
    ) -> io::Result<Option<Place>> {
        let Some(counter) = TicketCounter::try_lock(state, &paths::ticket_counter(name))? else {
            return Ok(None);
        };
        let entry = Entry {
            ticket: counter.next()?,
            mode,
            supersede,
        };
        let temporary = format!(".joining-{}-{}", std::process::id(), entry.ticket);
        let mut file = self.dir.create_new(&temporary)?;
        file.lock().map_err(|e| self.dir.named(&temporary, e))?;
        let beat = BootInstant::now();
        file.write_all(beat_line(beat).as_bytes())?;
        file.write_all(record.encode().as_bytes())?;
        self.dir.rename(&temporary, &entry.file_name())?;
        // Every lower ticket's file is in place by now (each joiner held the counter until its
        // own was), and no later one can be lower.
        drop(counter);
        let ahead = self
            .entries()?
            .into_iter()
            .filter(|e| e.ticket < entry.ticket)
            .collect();
        Ok(Some(Place {
            entry,
            file,
            beat,
            ahead,
        }))
    }

    /// Whether `place`'s ticket is still in the line (a waiter that was frozen may find it
    /// cleared).
    pub fn holds(&self, place: &Place) -> io::Result<bool> {
        let here = self.dir.file_id(&place.entry.file_name())?;
        Ok(here.is_some() && here == Some(super::state_dir::FileId::of(&place.file)?))
    }

    /// Leaves the line: the ticket file goes, then its lock.
    pub fn leave(&self, place: Place) {
        if let Err(e) = self.dir.remove(&place.entry.file_name()) {
            crate::debug!("cannot leave the line: {e}");
        }
    }

    /// Wakes `entry`'s owner (a `--supersede` waiter that a newer one replaces): its ticket
    /// file's times change, which it watches (`IN_ATTRIB`). Both times: the kernel reports a
    /// change of the modification time alone as a write (`IN_MODIFY`), which nobody watches, as
    /// every heartbeat is one.
    pub fn poke(&self, entry: &Entry) {
        if let Ok(Some(file)) = self.dir.open_existing(&entry.file_name()) {
            let now = std::time::SystemTime::now();
            let times = std::fs::FileTimes::new()
                .set_accessed(now)
                .set_modified(now);
            let _ = file.set_times(times);
        }
    }

    /// The tickets in line, oldest first (live or not).
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let mut entries: Vec<Entry> = self
            .dir
            .file_names()?
            .iter()
            .filter_map(|n| Entry::parse(n))
            .collect();
        entries.sort_by_key(|e| e.ticket);
        Ok(entries)
    }

    /// Whether `entry`'s waiter is still there; a ticket whose waiter died is removed.
    fn alive(&self, entry: &Entry) -> io::Result<bool> {
        let name = entry.file_name();
        let Some(file) = self.dir.open_existing(&name)? else {
            return Ok(false);
        };
        let gone = match file.try_lock_shared() {
            // Locked: there, unless frozen past its heartbeat.
            Err(TryLockError::WouldBlock) => !fresh(&file),
            // Its waiter is gone (its lock went with it).
            Ok(()) => true,
            Err(TryLockError::Error(e)) => return Err(self.dir.named(&name, e)),
        };
        if gone {
            self.dir.remove(&name)?;
        }
        Ok(!gone)
    }

    /// Whether a live waiter stands before a newcomer in `mode` that does not join (a
    /// `--no-wait` run): any waiter, for an exclusive one; an exclusive waiter, for a shared one.
    /// Tickets below the floor are gone, and dead waiters' tickets are cleared on the way.
    pub fn waiter_in_the_way(&self, mode: Mode) -> io::Result<bool> {
        let floor = self.floor();
        for entry in self.entries()?.iter().filter(|e| e.ticket >= floor) {
            let in_the_way = mode == Mode::Exclusive || entry.mode == Mode::Exclusive;
            if in_the_way && self.alive(entry)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether it is `place`'s turn under the rules (see the module), what stands in its way if
    /// not, and whether a newer `--supersede` waiter replaced it. Looks only at the tickets
    /// nearest to `place` among those ahead of it, forgetting those that went.
    pub fn look(&self, place: &mut Place) -> io::Result<Verdict> {
        let me = place.entry.ticket;
        let floor = self.floor();
        let below_floor = place.ahead.partition_point(|e| e.ticket < floor);
        place.ahead.drain(..below_floor);
        if place.entry.supersede {
            for newer in self
                .entries()?
                .iter()
                .filter(|e| e.ticket > me && e.supersede)
            {
                if self.alive(newer)? {
                    return Ok(Verdict::Superseded(newer.file_name()));
                }
            }
        }
        let stands_in_way = |entry: &Entry| match place.entry.mode {
            Mode::Exclusive => true,
            Mode::Shared => entry.mode == Mode::Exclusive,
        };
        let mut blocking = Vec::new();
        let mut gone = Vec::new();
        for (index, entry) in place.ahead.iter().enumerate().rev() {
            if !stands_in_way(entry) {
                continue;
            }
            if !self.alive(entry)? {
                gone.push(index);
                continue;
            }
            blocking.push(entry.file_name());
            break;
        }
        // `gone` holds indexes from the back, so each removal leaves the others in place.
        for index in gone {
            place.ahead.remove(index);
        }
        if !blocking.is_empty() {
            return Ok(Verdict::Behind(blocking));
        }
        // An exclusive waiter checks every ticket ahead: none left means all below it are gone.
        if place.entry.mode == Mode::Exclusive && blocking.is_empty() && floor < me {
            self.raise_floor(me);
        }
        Ok(Verdict::Turn)
    }

    /// The line's floor: every ticket below it is gone. 0 when unknown (no floor yet, or it is
    /// being written just now).
    fn floor(&self) -> u64 {
        let read = || -> Option<u64> {
            let file = self.dir.open_existing(FLOOR).ok()??;
            file.try_lock_shared().ok()?;
            let mut buf = [0u8; 24];
            let len = file.read_at(&mut buf, 0).ok()?;
            std::str::from_utf8(&buf[..len]).ok()?.trim().parse().ok()
        };
        read().unwrap_or(0)
    }

    /// Raises the line's floor to `ticket` (never lowers it). A hint that saves looks work, so a
    /// floor that cannot be written now is left as it is.
    fn raise_floor(&self, ticket: u64) {
        let raise = || -> io::Result<()> {
            let file = self.dir.open_rw(FLOOR)?;
            if file.try_lock().is_err() {
                return Ok(());
            }
            let mut buf = [0u8; 24];
            let len = file.read_at(&mut buf, 0)?;
            let current: u64 = std::str::from_utf8(&buf[..len])
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            if ticket > current {
                file.write_all_at(format!("{ticket:020}\n").as_bytes(), 0)?;
            }
            Ok(())
        };
        if let Err(e) = raise() {
            crate::debug!("cannot raise the line's floor: {e}");
        }
    }

    /// The record in a waiter's ticket file (after its heartbeat line), if the waiter is still
    /// there (its heartbeat fresh).
    pub fn waiter(&self, file_name: &str) -> Option<HolderInfo> {
        let file = self.dir.open_existing(file_name).ok()??;
        if !fresh(&file) {
            return None;
        }
        let mut buf = vec![0u8; 8192];
        let len = file.read_at(&mut buf, 0).ok()?;
        let record = buf[..len].get(BEAT_WIDTH + 1..)?;
        Some(HolderInfo::decode(record))
    }
}

/// Whether a ticket file's heartbeat is recent.
fn fresh(file: &File) -> bool {
    read_beat(file).is_some_and(|beat| BootInstant::now().saturating_since(beat) < STALE)
}

/// A name's ticket counter, locked until dropped (tickets only order waiters: they need not
/// survive a reboot, so the counter is not flushed).
struct TicketCounter {
    file: File,
}

impl TicketCounter {
    /// The counter, locked; `None` if another process holds it.
    fn try_lock(state: &StateDir, file_name: &str) -> io::Result<Option<TicketCounter>> {
        Ok(state
            .open_locked(file_name)?
            .map(|file| TicketCounter { file }))
    }

    /// Takes the next ticket.
    fn next(&self) -> io::Result<u64> {
        let mut buf = [0u8; 24];
        let len = self.file.read_at(&mut buf, 0)?;
        let last: u64 = std::str::from_utf8(&buf[..len])
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let next = last + 1;
        self.file
            .write_all_at(format!("{next:020}\n").as_bytes(), 0)?;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> HolderInfo {
        HolderInfo::current(None, Mode::Exclusive)
    }

    #[test]
    fn ticket_names_round_trip() {
        for (mode, supersede) in [
            (Mode::Exclusive, false),
            (Mode::Shared, true),
            (Mode::Exclusive, true),
        ] {
            let entry = Entry {
                ticket: 42,
                mode,
                supersede,
            };
            assert_eq!(Entry::parse(&entry.file_name()), Some(entry));
        }
        assert_eq!(Entry::parse("H00000000000000000001"), None);
        assert_eq!(Entry::parse(".joining-1-2"), None);
        assert!(is_holder_file(&holder_file(7)));
    }

    #[test]
    fn writers_wait_for_everyone_ahead_and_readers_only_for_writers() {
        let (_tmp, state) = StateDir::temporary();
        let name = LockName::parse("n").unwrap();
        let line = Line::open(&state, &name).unwrap();
        let join = |mode| {
            line.join(&state, &name, mode, false, &record())
                .unwrap()
                .expect("a free ticket counter")
        };
        let mut r1 = join(Mode::Shared);
        let mut w1 = join(Mode::Exclusive);
        let mut r2 = join(Mode::Shared);
        assert_eq!(line.look(&mut r1).unwrap(), Verdict::Turn);
        assert_eq!(
            line.look(&mut w1).unwrap(),
            Verdict::Behind(vec![r1.entry.file_name()])
        );
        assert_eq!(
            line.look(&mut r2).unwrap(),
            Verdict::Behind(vec![w1.entry.file_name()])
        );
        line.leave(r1);
        assert_eq!(line.look(&mut w1).unwrap(), Verdict::Turn);
        // Whatever the --limit, an exclusive waiter waits for everyone ahead (slots freed one at
        // a time go in turn), watching the last one.
        let mut w2 = join(Mode::Exclusive);
        assert_eq!(
            line.look(&mut w2).unwrap(),
            Verdict::Behind(vec![r2.entry.file_name()])
        );
    }

    #[test]
    fn a_look_checks_only_the_tickets_ahead_at_joining_and_forgets_those_gone() {
        let (_tmp, state) = StateDir::temporary();
        let name = LockName::parse("n").unwrap();
        let line = Line::open(&state, &name).unwrap();
        let join = || {
            line.join(&state, &name, Mode::Exclusive, false, &record())
                .unwrap()
                .expect("a free ticket counter")
        };
        let (a, b, mut c) = (join(), join(), join());
        assert_eq!(c.ahead, [a.entry.clone(), b.entry.clone()]);
        let mut d = join();
        line.leave(b);
        assert_eq!(
            line.look(&mut c).unwrap(),
            Verdict::Behind(vec![a.entry.file_name()])
        );
        assert_eq!(
            c.ahead,
            std::slice::from_ref(&a.entry),
            "the ticket that went is forgotten"
        );
        // The directory is not read again: a ticket file that could not appear there (lower
        // than c's, after c joined) is not seen.
        let impossible = Entry {
            ticket: 0,
            mode: Mode::Exclusive,
            supersede: false,
        };
        let file = line.dir.create_new(&impossible.file_name()).unwrap();
        file.lock().unwrap();
        line.leave(a);
        assert_eq!(line.look(&mut c).unwrap(), Verdict::Turn);
        assert!(c.ahead.is_empty());
        // Nobody is left ahead of c: the floor says so, and d drops a and b without a look.
        assert_eq!(line.floor(), c.entry.ticket);
        assert_eq!(
            line.look(&mut d).unwrap(),
            Verdict::Behind(vec![c.entry.file_name()])
        );
        assert_eq!(d.ahead, std::slice::from_ref(&c.entry));
    }

    #[test]
    fn a_joiner_finds_the_counter_held_and_joins_once_it_is_free() {
        let (_tmp, state) = StateDir::temporary();
        let name = LockName::parse("n").unwrap();
        let line = Line::open(&state, &name).unwrap();
        let counter = state.open_rw(&paths::ticket_counter(&name)).unwrap();
        counter.lock().unwrap();
        let join = || line.join(&state, &name, Mode::Exclusive, false, &record());
        assert!(join().unwrap().is_none(), "joined past a held counter");
        drop(counter);
        assert!(join().unwrap().is_some());
    }

    #[test]
    fn a_dead_waiters_ticket_is_cleared_and_a_newer_superseder_replaces() {
        let (_tmp, state) = StateDir::temporary();
        let name = LockName::parse("n").unwrap();
        let line = Line::open(&state, &name).unwrap();
        let mut old = line
            .join(&state, &name, Mode::Exclusive, true, &record())
            .unwrap()
            .expect("a free ticket counter");
        let dead = line
            .join(&state, &name, Mode::Exclusive, false, &record())
            .unwrap()
            .expect("a free ticket counter");
        let dead_name = dead.entry.file_name();
        drop(dead); // as if its process died: the lock goes, the file stays
        let mut me = line
            .join(&state, &name, Mode::Exclusive, false, &record())
            .unwrap()
            .expect("a free ticket counter");
        assert_eq!(
            line.look(&mut me).unwrap(),
            Verdict::Behind(vec![old.entry.file_name()])
        );
        assert!(
            !line
                .entries()
                .unwrap()
                .iter()
                .any(|e| e.file_name() == dead_name),
            "the dead ticket was cleared"
        );
        let newer = line
            .join(&state, &name, Mode::Exclusive, true, &record())
            .unwrap()
            .expect("a free ticket counter");
        assert_eq!(
            line.look(&mut old).unwrap(),
            Verdict::Superseded(newer.entry.file_name())
        );
    }
}
