//! [`FileBackend`]: acquire by `flock` on a lock file, in turn when others wait (the name's line,
//! see `line`); wait woken by inotify (see `wakeup`). What it answers from outside (`status`,
//! `list`, …) is in `inspect`.

use std::collections::HashSet;
use std::fs::{File, TryLockError};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::lease::{FileLease, HolderRecord, RecordPlace};
use super::line::{self, Line, Place, Verdict};
use super::modes::{Marked, ModeMark};
use super::probe::Wanted;
use super::retry::{self, Patience, Stopped};
use super::state_dir::StateDir;
use super::wakeup::Wakeup;
use super::{fence, paths};
use crate::backend::{
    AcquireRequest, Acquired, Backend, BackendError, Cancel, Grant, HolderInfo, Inspect, MAX_LIMIT,
    Mode,
};
use crate::clock::{BootInstant, BootTimer};
use crate::name::LockName;

/// How often a waiter looks again without being woken, in case a change went unreported (a lock
/// released by a process that had its file open read-only).
const SAFETY_RECHECK: Duration = Duration::from_secs(1);
/// After a wake on a lock file that finds the lock still held, the waiter tries again this soon,
/// doubling, a few times: the holder may be letting go at that very moment. (A waiter that has
/// just come to the front needs no such haste: it watches the lock files before its try, so a
/// holder letting go after the try wakes it.)
const RETRY_FIRST: Duration = Duration::from_millis(1);
const RETRIES: u32 = 6;
/// A waiter that nothing wakes (no inotify instance, and more to watch than it may probe: see
/// `wakeup`) looks this often per turn still ahead of it (at most every [`SAFETY_RECHECK`]):
/// often when it is about to be served, seldom far back.
const POLL_PER_TURN_AHEAD: Duration = Duration::from_millis(10);
/// How often a joiner that finds the ticket counter held by another process tries again.
const JOIN_RETRY: Duration = Duration::from_millis(5);
/// How often a new holder that finds the token counter held by another holder tries again.
const TOKEN_RETRY: Duration = Duration::from_millis(1);

/// The `file://` backend.
pub struct FileBackend {
    pub(super) dir: Arc<StateDir>,
}

/// A slot's lock file, just locked by this process, with the holder's mark (see `modes`).
struct SlotLock {
    slot: u32,
    name: String,
    file: File,
    mark: Option<ModeMark>,
}

/// What a try for the lock came to, a lease still as this backend's own (so that a waiter can
/// hand it what to leave for after the command's start).
enum Took {
    Held(FileLease),
    Not(Acquired),
}

impl From<Took> for Acquired {
    fn from(took: Took) -> Acquired {
        match took {
            Took::Held(lease) => Acquired::Held(Box::new(lease)),
            Took::Not(acquired) => acquired,
        }
    }
}

/// A waiter's place in line and its wake-up watches, once it holds the lock: left, and retired,
/// only after its command has started (see [`FileLease::keep_until_started`]). Leaving unlinks
/// the ticket, which wakes the waiter behind, and retiring watches queues kernel work; either,
/// done before the start, could hand the CPU to another process between the lock and the command.
struct Leftovers {
    line: Line,
    place: Option<Place>,
    _wakeup: Wakeup,
}

impl Drop for Leftovers {
    /// The ticket goes first, then the watches (the fields, after this).
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            self.line.leave(place);
        }
    }
}

impl FileBackend {
    /// Opens (creating if needed) the state directory at `path`.
    pub fn open(path: &Path) -> Result<Self, BackendError> {
        Ok(FileBackend {
            dir: Arc::new(StateDir::open(path)?),
        })
    }

    pub(super) fn failed(&self, e: &io::Error) -> BackendError {
        BackendError::io(self.describe(), e)
    }

    /// One try for the lock, without waiting for it: a free slot (exclusive), or a share of slot
    /// 0 — then `Held`; `Busy` when there is none, or when readers and an exclusive holder past
    /// slot 0 would meet (see `modes`); `Cancelled` if `cancel` resolved while the slot taken
    /// waited for its token. Slot files are opened one at a time, so a large `--limit` needs few
    /// descriptors.
    async fn try_take(
        &self,
        request: &AcquireRequest,
        cancel: &mut Cancel<'_>,
    ) -> io::Result<Took> {
        let sent_at = BootInstant::now();
        let slots = match request.mode {
            Mode::Exclusive => request.limit,
            Mode::Shared => 1,
        };
        for slot in 0..slots {
            let name = paths::slot_file(&request.name, slot);
            let file = self.dir.open_read(&name)?;
            let locked = match request.mode {
                Mode::Exclusive => file.try_lock(),
                Mode::Shared => file.try_lock_shared(),
            };
            match locked {
                Ok(()) => {
                    let marked = ModeMark::take(&self.dir, &request.name, request.mode, slot);
                    let mark = match marked.await? {
                        Marked::Alone(mark) => mark,
                        // Every slot left is past slot 0 too.
                        Marked::OtherSideHolds => return Ok(Took::Not(Acquired::Busy)),
                    };
                    let lock = SlotLock {
                        slot,
                        name,
                        file,
                        mark,
                    };
                    let held = self.hold(request, lock, sent_at, cancel).await?;
                    return Ok(held.map_or(Took::Not(Acquired::Cancelled), Took::Held));
                }
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => return Err(self.dir.named(&name, e)),
            }
        }
        Ok(Took::Not(Acquired::Busy))
    }

    /// Issues the token and records the holder on a lock this process has just taken (its mark,
    /// if any, kept for as long as the lease); `None` if `cancel` resolved first. Another holder
    /// of the name (with `--limit` or `--shared`) holds the token counter for an instant as it
    /// takes its own token, or for as long as it was paused there: the token is then tried again
    /// every [`TOKEN_RETRY`], without blocking the runtime's thread.
    async fn hold(
        &self,
        request: &AcquireRequest,
        lock: SlotLock,
        sent_at: BootInstant,
        cancel: &mut Cancel<'_>,
    ) -> io::Result<Option<FileLease>> {
        let SlotLock {
            slot,
            name: lock_name,
            file: lock,
            mark,
        } = lock;
        let fence_file = paths::fence_file(&request.name);
        let patience = Patience {
            every: TOKEN_RETRY,
            expired: &|| false,
            cancel: Some(cancel),
        };
        let taken = retry::until_free(
            patience,
            || fence::next_token(&self.dir, &fence_file),
            || {
                crate::debug!(
                    "another holder of {} is taking its token; trying again",
                    request.name
                )
            },
        );
        let Ok(token) = taken.await? else {
            return Ok(None);
        };
        let grant = Grant {
            token,
            slot,
            ttl: None,
            sent_at,
        };
        let record = HolderRecord {
            token,
            slot,
            limit: request.limit,
            ttl_ms: request.ttl.as_millis().try_into().unwrap_or(u64::MAX),
            holder: request.holder.stamped(),
        };
        let place = match request.mode {
            Mode::Exclusive => RecordPlace::LockFile,
            Mode::Shared => RecordPlace::Line {
                dir: Line::open(&self.dir, &request.name)?.dir,
                name: line::holder_file(token),
            },
        };
        let dir = Arc::clone(&self.dir);
        FileLease::new(dir, lock_name, lock, mark, place, grant, &record).map(Some)
    }

    /// Waits in line for the lock: until it is held, the deadline passes, a newer `--supersede`
    /// waiter replaces this one, or `cancel` resolves. The place in line is left in every case.
    async fn wait_in_line(
        &self,
        request: &AcquireRequest,
        cancel: &mut Cancel<'_>,
    ) -> io::Result<Acquired> {
        let line = Line::open(&self.dir, &request.name)?;
        let mut place = match self.join_patiently(request, &line, cancel).await? {
            Ok(place) => Some(place),
            Err(ended) => return Ok(ended),
        };
        let slots = match request.mode {
            Mode::Exclusive => request.limit,
            // Exclusive holders of any slot keep a reader out (see `modes`).
            Mode::Shared => self.slots_in_use(&request.name)?,
        };
        let slot_names: HashSet<String> = (0..slots)
            .map(|k| paths::slot_file(&request.name, k))
            .collect();
        let slot_wanted = match request.mode {
            Mode::Exclusive => Wanted::Free,
            Mode::Shared => Wanted::NotExclusive,
        };
        let mut wakeup = Wakeup::new(slot_names, slot_wanted)?;
        let took = self
            .take_turn(request, &line, &mut place, &mut wakeup, cancel)
            .await;
        let leftovers = Leftovers {
            line,
            place,
            _wakeup: wakeup,
        };
        match took? {
            Took::Held(mut lease) => {
                lease.keep_until_started(Box::new(leftovers));
                Ok(Acquired::Held(Box::new(lease)))
            }
            Took::Not(acquired) => Ok(acquired),
        }
    }

    /// Whether a live waiter stands before a run that does not join the line: any waiter, for
    /// an exclusive run; an exclusive one, for a shared run.
    fn waiter_in_the_way(&self, request: &AcquireRequest) -> io::Result<bool> {
        match Line::existing(&self.dir, &request.name)? {
            Some(line) => line.waiter_in_the_way(request.mode),
            None => Ok(false),
        }
    }

    /// How many of `name`'s slots have a lock file: every exclusive run that took slot K opened
    /// slots 0 to K first, and lock files are never removed.
    fn slots_in_use(&self, name: &LockName) -> io::Result<u32> {
        let mut slots = 1;
        while slots < MAX_LIMIT && self.dir.file_id(&paths::slot_file(name, slots))?.is_some() {
            slots += 1;
        }
        Ok(slots)
    }

    /// Joins `line`, trying again every [`JOIN_RETRY`] while another process holds the ticket
    /// counter (for an instant as it joins, or for as long as it was paused there): the deadline
    /// and `cancel` end the try as they end the wait, and the runtime's thread never blocks.
    async fn join_patiently(
        &self,
        request: &AcquireRequest,
        line: &Line,
        cancel: &mut Cancel<'_>,
    ) -> io::Result<Result<Place, Acquired>> {
        let patience = Patience {
            every: JOIN_RETRY,
            expired: &|| request.expired(),
            cancel: Some(cancel),
        };
        let joined = retry::until_free(
            patience,
            || self.join(request, line),
            || {
                crate::debug!(
                    "another process is joining the line of {}; trying again",
                    request.name
                )
            },
        );
        Ok(joined.await?.map_err(|stopped| match stopped {
            Stopped::Expired => Acquired::Busy,
            Stopped::Cancelled => Acquired::Cancelled,
        }))
    }

    /// Joins `line` (`None` while another process holds the ticket counter); a `--supersede`
    /// waiter wakes the older ones, which then give up.
    fn join(&self, request: &AcquireRequest, line: &Line) -> io::Result<Option<Place>> {
        let Some(place) = line.join(
            &self.dir,
            &request.name,
            request.mode,
            request.supersede,
            &request.holder,
        )?
        else {
            return Ok(None);
        };
        if request.supersede {
            for older in line.entries()? {
                if older.supersede && older.ticket < place.entry.ticket {
                    line.poke(&older);
                }
            }
        }
        Ok(Some(place))
    }

    async fn take_turn(
        &self,
        request: &AcquireRequest,
        line: &Line,
        slot: &mut Option<Place>,
        wakeup: &mut Wakeup,
        cancel: &mut Cancel<'_>,
    ) -> io::Result<Took> {
        let mut timer = BootTimer::for_waiting();
        let mut retries = RETRIES;
        let outcome = loop {
            let mut place = slot.take().expect("a place in line");
            // A waiter that was stopped past its heartbeat lost its place: it joins at the back.
            if place.stale() || !line.holds(&place)? {
                crate::info!(
                    "this waiter was stopped too long to keep its place; joining the line again"
                );
                line.leave(place);
                place = match self.join_patiently(request, line, cancel).await? {
                    Ok(place) => place,
                    Err(ended) => break Took::Not(ended),
                };
            }
            place.beat()?;
            let place = slot.insert(place);
            let own_ticket = line.dir.path().join(place.entry.file_name());
            // A newer --supersede waiter pokes this ticket.
            let own = place.entry.supersede.then_some(own_ticket.as_path());
            let mut watched: Vec<std::path::PathBuf> = Vec::new();
            let pause = match line.look(place)? {
                Verdict::Superseded(newer) => {
                    let by = line.waiter(&newer).unwrap_or_else(HolderInfo::unknown);
                    break Took::Not(Acquired::Superseded(by));
                }
                Verdict::Turn => {
                    wakeup.watch_slots(self.dir.path())?;
                    match self.try_take(request, cancel).await? {
                        Took::Not(Acquired::Busy) => {}
                        taken => break taken,
                    }
                    wakeup.probe_slots();
                    if retries < RETRIES {
                        retries += 1;
                        RETRY_FIRST * (1 << (retries - 1))
                    } else {
                        SAFETY_RECHECK
                    }
                }
                Verdict::Behind(files) => {
                    watched.extend(files.iter().map(|f| line.dir.path().join(f)));
                    SAFETY_RECHECK
                }
            };
            let at_front = watched.is_empty();
            if request.expired() {
                break Took::Not(Acquired::Busy);
            }
            if !wakeup.watch_files(&watched, own)? {
                continue;
            }
            // Without wake-ups, the waiters about to be served look often; the rest, seldom.
            let pause = match wakeup.has_events() {
                true => pause,
                false => {
                    let turns = place.tickets_ahead() / request.limit.max(1) as usize + 1;
                    let turns = u32::try_from(turns).unwrap_or(u32::MAX);
                    pause.min(POLL_PER_TURN_AHEAD.saturating_mul(turns))
                }
            };
            let wake_at = BootInstant::now() + pause;
            let wake_at = request.deadline.map_or(wake_at, |d| d.min(wake_at));
            tokio::select! {
                woken = wakeup.woken() => {
                    woken?;
                    // At the front, what woke it is a lock file let go; behind, a ticket ahead.
                    retries = if at_front { 0 } else { RETRIES };
                }
                slept = timer.sleep_until(Some(wake_at)) => slept?,
                () = cancel.as_mut() => break Took::Not(Acquired::Cancelled),
            }
        };
        Ok(outcome)
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn describe(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn expires(&self) -> bool {
        false
    }

    async fn acquire(
        &self,
        request: &AcquireRequest,
        mut cancel: Cancel<'_>,
    ) -> Result<Acquired, BackendError> {
        let acquired = async {
            // A run that may not wait (`--no-wait`) only looks at the line: a ticket of its own,
            // there for an instant, would stand in the way of another such run that could hold.
            // Any other run tries at once when nobody is in line, as an uncontended lock should
            // cost nothing more.
            let may_not_wait = request.expired();
            let try_now = match may_not_wait {
                true => !self.waiter_in_the_way(request)?,
                false => Line::is_empty(&self.dir, &request.name)?,
            };
            if try_now {
                match self.try_take(request, &mut cancel).await? {
                    Took::Not(Acquired::Busy) => {}
                    taken => return Ok(taken.into()),
                }
            }
            if may_not_wait {
                return Ok(Acquired::Busy);
            }
            self.wait_in_line(request, &mut cancel).await
        };
        acquired.await.map_err(|e| self.failed(&e))
    }

    fn inspect(&self) -> &dyn Inspect {
        self
    }
}
