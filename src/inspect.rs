//! `status`, `list` and `release --force`: reading and breaking leases from the outside.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use crate::backend::{BackendSpec, LockStatus, Mode};
use crate::exit::Error;
use crate::messages::{duration, printable};
use crate::name::LockName;

/// Exit status of `status --quiet` when NAME is free.
const FREE: u8 = 1;

/// Prints who holds `name`; with `quiet`, prints nothing and exits 0 when it is held, 1 when free.
pub async fn status(
    spec: &BackendSpec,
    name: &LockName,
    json: bool,
    quiet: bool,
) -> Result<u8, Error> {
    let status = match spec.open_to_look().await? {
        Some(backend) => backend.inspect().status(name).await?,
        None => LockStatus::free(name),
    };
    if quiet {
        return Ok(if status.held { 0 } else { FREE });
    }
    let text = if json {
        to_json(&status)?
    } else {
        describe(&status)
    };
    print(&text)
}

/// Prints the held names that start with `prefix`.
pub async fn list(spec: &BackendSpec, prefix: &str, json: bool) -> Result<u8, Error> {
    let held = match spec.open_to_look().await? {
        Some(backend) => backend.inspect().list(prefix).await?,
        None => Vec::new(),
    };
    let text = if json {
        to_json(&held)?
    } else {
        held.iter().map(describe).collect::<String>()
    };
    print(&text)
}

/// Drops every holder of `name` on a backend that can.
pub async fn force_release(spec: &BackendSpec, name: &LockName) -> Result<u8, Error> {
    let dropped = match spec.open_to_look().await? {
        Some(backend) => backend.inspect().force_release(name).await?,
        None => 0,
    };
    match dropped {
        0 => crate::warn!("{name} is not held; nothing to release"),
        n => crate::warn!(
            "released {n} holder(s) of {name}; each is told to stop its command (one that cannot be reached stops when its next renewal fails)"
        ),
    }
    Ok(0)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    let mut text = serde_json::to_string(value).map_err(Error::internal)?;
    text.push('\n');
    Ok(text)
}

/// One line for the name, one per holder, one per waiter in line order.
fn describe(status: &LockStatus) -> String {
    let mut text = String::new();
    let held = status.holders.len();
    let shared = status.holders.iter().any(|h| h.mode == Mode::Shared);
    let _ = match (status.held, status.limit) {
        (false, _) => write!(text, "{}: free", status.name),
        (true, _) if shared => write!(text, "{}: shared by {held}", status.name),
        (true, 1) => write!(text, "{}: held", status.name),
        (true, limit) => write!(text, "{}: held by {held} of {limit}", status.name),
    };
    if status.waiters > 0 {
        let _ = write!(text, ", {} waiting", status.waiters);
    }
    text.push('\n');
    for h in &status.holders {
        let left = duration(Duration::from_millis(h.expires_in_ms));
        let _ = write!(
            text,
            "  token {} slot {}: pid {} on {} as {}, since {}, lease {} left",
            h.token,
            h.slot,
            h.pid,
            printable(&h.host),
            printable(&h.user),
            printable(&h.acquired_at),
            left
        );
        if h.mode == Mode::Shared {
            text.push_str(", shared");
        }
        if let Some(note) = &h.note {
            let _ = write!(text, ", note: {}", printable(note));
        }
        text.push('\n');
    }
    for (place, w) in status.queue.iter().enumerate() {
        let _ = write!(
            text,
            "  waiting {}: pid {} on {} as {}, since {}",
            place + 1,
            w.pid,
            printable(&w.host),
            printable(&w.user),
            printable(&w.since)
        );
        if w.mode == Mode::Shared {
            text.push_str(", shared");
        }
        if let Some(note) = &w.note {
            let _ = write!(text, ", note: {}", printable(note));
        }
        text.push('\n');
    }
    text
}

/// Writes a subcommand's report to stdout (exit 0); a disk that is full is an error.
pub fn print(text: &str) -> Result<u8, Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        // A closed pipe (`lockrun list | head -1`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(Error::os("cannot write to stdout", &e)),
    }
}
