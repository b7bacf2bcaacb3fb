//! Running the drill against the user's backend, step by step, recording a [`Timeline`]:
//!
//! 1. holder A (a real lockrun) acquires NAME; its command writes through the probe store, says
//!    it is running, and waits for a go file;
//! 2. A's lockrun and A's command are stopped together (SIGSTOP to both process groups), as a
//!    paused VM would be;
//! 3. holder B asks for NAME and, once it gets it, writes through the store and exits — or, on a
//!    kernel lock that cannot expire under a live holder, gives up after twice the TTL;
//! 4. the go file is created and A is continued: its lockrun must stop its command at once (the
//!    lease is gone) and exit 76, and any write A's command still makes must be rejected;
//! 5. a write with A's token, as if it had been on its way when A was paused, must be rejected too.
//!
//! Before that, the backend's round trip and clock skew are measured. A step that cannot happen
//! leaves its part of the timeline empty, and the verdict says which promise that breaks.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::holders::{self, Holder, Plan, Workdir, tick};
use super::probe;
use super::report;
use super::timeline::{A_AFTER, A_BEFORE, A_DELAYED, B_WRITE, HolderA, HolderB, Timeline, Write};
use super::verdict::{self, STOP_SLACK};
use crate::backend::BackendSpec;
use crate::clock::BootInstant;
use crate::exit::{DRILL_FAILED, Error};
use crate::name::LockName;
use crate::supervisor::{self, unless_signalled};
use crate::timing::Timing;

/// Extra time, beyond a holder's own `--wait`, before the drill stops waiting for it.
const SLACK: Duration = Duration::from_secs(10);
/// Longest wait for a stopped process to show as stopped.
const STOP_CONFIRM: Duration = Duration::from_secs(2);
/// How much longer than one lease A stays paused at least.
const PAUSE_MARGIN: Duration = Duration::from_millis(20);
/// Waiting allowance for A, on top of three TTLs: the name was free a moment ago.
const A_WAIT_MIN: Duration = Duration::from_secs(10);

/// Runs the drill and prints its report; exits 0 only if every check passed.
pub async fn drill(
    spec: &BackendSpec,
    name: &LockName,
    timing: Timing,
    json: bool,
) -> Result<u8, Error> {
    // Every signal a run forwards ends the drill with its cleanup (holders killed, directory and
    // the backend URL in it removed), through the same stream a run listens to.
    let mut signals =
        supervisor::listen().map_err(|e| Error::os("cannot install signal handlers", &e))?;
    let backend = spec.open().await?;
    let status = backend.inspect().status(name).await?;
    if status.held || status.waiters > 0 {
        return Err(Error::Busy {
            message: format!(
                "{name} is in use: the drill needs a name of its own (pick another --name)"
            ),
            code: crate::exit::BUSY,
        });
    }
    let kernel_lock = !backend.expires();
    let round_trip = super::measure::round_trip(&*backend, name).await?;
    let skew_ms = super::measure::skew_ms(&*backend)
        .await
        .unwrap_or_else(|e| {
            crate::warn!("cannot read the server's clock: {e}");
            None
        });
    drop(backend);

    let exe =
        std::env::current_exe().map_err(|e| Error::os("cannot find the lockrun binary", &e))?;
    let workdir =
        Workdir::create().map_err(|e| Error::os("cannot create a directory for the drill", &e))?;
    let backend_file = workdir
        .write_private("backend", spec.settings().url().as_bytes())
        .map_err(|e| Error::os("cannot write the drill's backend file", &e))?;
    let plan = Plan {
        exe: &exe,
        workdir: &workdir,
        backend_file: &backend_file,
        name: name.as_str(),
        ttl: timing.ttl,
    };
    let mut timeline = Timeline {
        backend: spec.shown().to_owned(),
        name: name.to_string(),
        kernel_lock,
        requested_ttl: timing.ttl,
        granted_ttl: None,
        kill_after: timing.kill_after,
        round_trip: Some(round_trip),
        skew_ms,
        a: HolderA::default(),
        b: HolderB::default(),
        writes: Vec::new(),
    };
    let start = BootInstant::now();
    unless_signalled(stages(&plan, &mut timeline, start), &mut signals)
        .await
        .map_err(interrupted)??;
    timeline.writes = probe::journal(&workdir.join("store"))
        .map_err(|e| Error::os("cannot read the probe store", &e))?
        .into_iter()
        .map(|entry| Write {
            at: entry.at.saturating_since(start),
            token: entry.token,
            value: entry.value,
            accepted: entry.accepted,
        })
        .collect();

    let checks = verdict::judge(&timeline);
    let text = if json {
        report::json(&timeline, &checks)?
    } else {
        report::text(&timeline, &checks)
    };
    crate::inspect::print(&text)?;
    Ok(if verdict::failures(&checks).is_empty() {
        0
    } else {
        DRILL_FAILED
    })
}

/// The drill's steps; each fills in its part of `t`, and a step that cannot happen ends them.
async fn stages(plan: &Plan<'_>, t: &mut Timeline, start: BootInstant) -> Result<(), Error> {
    let since = |at: BootInstant| at.saturating_since(start);
    let store = plan.workdir.join("store");

    // 1. A acquires and writes.
    t.a.spawned = since(BootInstant::now());
    let a_wait = (plan.ttl * 3).max(A_WAIT_MIN);
    let mut a = Holder::spawn(plan, "a", a_wait, &script_a()).map_err(spawn_error)?;
    let marker = plan.workdir.join("a.started");
    let deadline = BootInstant::now() + a_wait + SLACK;
    let started = loop {
        if let Some(text) = holders::read_marker(&marker) {
            break Some(text);
        }
        if poll(&mut a, &mut t.a.exited, &mut t.a.exit_code, start)? || past(deadline) {
            break None;
        }
        tick().await;
    };
    let Some((command_pid, token, granted_ms)) = started.as_deref().and_then(parse_marker) else {
        t.a.diagnostic = a.last_message();
        return Ok(());
    };
    t.a.started = Some(since(BootInstant::now()));
    t.a.token = Some(token);
    let granted = Duration::from_millis(granted_ms);
    t.granted_ttl = Some(granted);
    if let Ok(granted_timing) = Timing::new(granted, None, None) {
        t.kill_after = granted_timing.kill_after;
    }

    // 2. A is paused: its lockrun and its command.
    a.set_command_group(command_pid);
    a.signal_all(Signal::SIGSTOP);
    let deadline = BootInstant::now() + STOP_CONFIRM;
    while !(holders::stopped(a.pid()) && holders::stopped(command_pid)) {
        if past(deadline) {
            return Err(Error::internal(format!(
                "cannot pause holder A: it did not stop (lockrun {}: {:?}, command {command_pid}: {:?})",
                a.pid(),
                holders::state(a.pid()),
                holders::state(command_pid)
            )));
        }
        tick().await;
    }
    t.a.paused = Some(since(BootInstant::now()));

    // 3. B asks for the lease while A is paused.
    let b_wait = if t.kernel_lock {
        plan.ttl * 2
    } else {
        granted * 3 + Duration::from_secs(2)
    };
    t.b.spawned = Some(since(BootInstant::now()));
    let mut b = Holder::spawn(plan, "b", b_wait, &script_b()).map_err(spawn_error)?;
    let deadline = BootInstant::now() + b_wait + SLACK;
    while !poll(&mut b, &mut t.b.exited, &mut t.b.exit_code, start)? && !past(deadline) {
        tick().await;
    }
    t.b.diagnostic = b.last_message();
    drop(b);

    // 4. A is resumed, and given the go to write again: never before a whole lease has passed
    //    since the pause, so its lease has expired whatever its last renewal was.
    let paused_until = start + t.a.paused.unwrap_or_default() + t.ttl() + PAUSE_MARGIN;
    while !past(paused_until) {
        tick().await;
    }
    std::fs::write(plan.workdir.join("go"), b"")
        .map_err(|e| Error::os("cannot write the drill's go file", &e))?;
    let resumed = BootInstant::now();
    t.a.resumed = Some(since(resumed));
    a.signal_all(Signal::SIGCONT);
    let deadline = resumed + t.ttl() + t.kill_after + STOP_SLACK + SLACK;
    loop {
        if t.a.command_ended.is_none() && !holders::alive(command_pid) {
            t.a.command_ended = Some(since(BootInstant::now()));
        }
        let exited = poll(&mut a, &mut t.a.exited, &mut t.a.exit_code, start)?;
        if (exited && t.a.command_ended.is_some()) || past(deadline) {
            break;
        }
        tick().await;
    }
    t.a.diagnostic = a.last_message();
    drop(a);

    // 5. A write of A's that was already on its way.
    if !t.kernel_lock {
        probe::write(&store, token, A_DELAYED)
            .map_err(|e| Error::os("cannot write the probe store", &e))?;
    }
    Ok(())
}

/// Records the holder's exit once; returns whether it has exited.
fn poll(
    holder: &mut Holder,
    exited: &mut Option<Duration>,
    code: &mut Option<u8>,
    start: BootInstant,
) -> Result<bool, Error> {
    let ended = holder
        .poll_exit()
        .map_err(|e| Error::os("cannot wait for a drill holder", &e))?;
    if let Some((at, status)) = ended {
        *exited = Some(at.saturating_since(start));
        *code = Some(status);
    }
    Ok(ended.is_some())
}

fn past(deadline: BootInstant) -> bool {
    BootInstant::now() >= deadline
}

/// A's command: write, say it runs (pid, token, granted TTL), wait for the go file, write again.
fn script_a() -> String {
    format!(
        "\"$DRILL_EXE\" drill-probe \"$DRILL_DIR/store\" \"$FENCING_TOKEN\" {A_BEFORE} || exit
printf '%s %s %s\\n' \"$$\" \"$FENCING_TOKEN\" \"$LOCKRUN_TTL_MS\" > \"$DRILL_DIR/a.tmp\"
mv \"$DRILL_DIR/a.tmp\" \"$DRILL_DIR/a.started\"
while [ ! -e \"$DRILL_DIR/go\" ]; do sleep 0.01; done
exec \"$DRILL_EXE\" drill-probe \"$DRILL_DIR/store\" \"$FENCING_TOKEN\" {A_AFTER}"
    )
}

/// B's command: one write.
fn script_b() -> String {
    format!("exec \"$DRILL_EXE\" drill-probe \"$DRILL_DIR/store\" \"$FENCING_TOKEN\" {B_WRITE}")
}

/// `PID TOKEN TTL_MS` from A's marker.
fn parse_marker(text: &str) -> Option<(i32, u64, u64)> {
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let token = words.next()?.parse().ok()?;
    let ttl = words.next()?.parse().ok()?;
    Some((pid, token, ttl))
}

fn interrupted(signal: Signal) -> Error {
    Error::Interrupted {
        signal,
        during: "during the drill; its holders were killed".into(),
    }
}

fn spawn_error(e: std::io::Error) -> Error {
    Error::os("cannot start a drill holder", &e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_read_strictly() {
        assert_eq!(parse_marker("123 45 2000\n"), Some((123, 45, 2000)));
        assert_eq!(parse_marker("123 45"), None);
        assert_eq!(parse_marker("x 45 2000"), None);
    }

    #[test]
    fn the_holders_get_the_whole_url() {
        let spec = BackendSpec::parse("redis://:pw@127.0.0.1:1/0").unwrap();
        assert_eq!(spec.settings().url(), "redis://:pw@127.0.0.1:1/0");
        let spec = BackendSpec::parse("file:///tmp/x").unwrap();
        assert_eq!(spec.settings().url(), "file:///tmp/x");
    }
}
