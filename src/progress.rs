//! What a waiter says while it waits (`--progress`): who holds NAME — host, pid, for how long,
//! note — and its own place in line, once after a second and then every DURATION, read from the
//! backend's `status` so that every backend says it the same way.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use crate::backend::{AcquireRequest, Backend, HolderStatus, LockStatus};
use crate::messages::{duration, printable};

/// When the first line comes: a wait that ends sooner says nothing.
const FIRST_AFTER: Duration = Duration::from_secs(1);
/// How long one status read may take before that line is skipped.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Prints a progress line after [`FIRST_AFTER`] and then every `every`; never returns (the caller
/// drops it when the wait ends).
pub async fn report(
    backend: &dyn Backend,
    request: &AcquireRequest,
    every: Duration,
) -> Infallible {
    tokio::time::sleep(FIRST_AFTER).await;
    loop {
        match tokio::time::timeout(READ_TIMEOUT, backend.inspect().status(&request.name)).await {
            Ok(Ok(status)) => crate::warn!("{}", line(&status, request)),
            Ok(Err(e)) => crate::debug!("cannot read who holds {}: {e}", request.name),
            Err(_) => crate::debug!("reading who holds {} took too long", request.name),
        }
        tokio::time::sleep(every).await;
    }
}

/// `waiting for NAME (held by HOST pid N for 3m12s, note …; 2 ahead of you)`.
fn line(status: &LockStatus, request: &AcquireRequest) -> String {
    let holders = holders(status).map_or_else(
        || "not held right now".to_owned(),
        |h| format!("held by {h}"),
    );
    let me = &request.holder;
    let place = status
        .queue
        .iter()
        .position(|w| w.pid == me.pid && w.host == me.host);
    let line = match (place, status.waiters) {
        (Some(0), _) => "next in line".to_owned(),
        (Some(ahead), _) => format!("{ahead} ahead of you"),
        (None, 0) => "nobody else waiting".to_owned(),
        (None, n) => format!("{n} waiting"),
    };
    format!("waiting for {} ({holders}; {line})", status.name)
}

/// The holders of a status in a few words, `None` when nobody holds it.
fn holders(status: &LockStatus) -> Option<String> {
    let first = status.holders.first()?;
    let mut text = holder(first);
    match status.holders.len() {
        1 => {}
        2 => text.push_str(" and 1 other"),
        n => text.push_str(&format!(" and {} others", n - 1)),
    }
    Some(text)
}

/// One holder: `HOST pid N for 3m12s, note …`; a lock held by something that is not a lockrun
/// (a plain `flock` on the file backend) says so.
fn holder(h: &HolderStatus) -> String {
    if h.token == 0 && h.host.is_empty() {
        return format!("pid {} (not a lockrun: no token)", h.pid);
    }
    let mut text = format!("{} pid {}", printable(&h.host), h.pid);
    if let Some(held) = held_for(&h.acquired_at) {
        text.push_str(&format!(" for {}", duration(held)));
    }
    if let Some(note) = &h.note {
        text.push_str(&format!(", note {}", printable(note)));
    }
    text
}

/// How long ago an RFC 3339 time was, by the wall clock (display only), to the second.
fn held_for(acquired_at: &str) -> Option<Duration> {
    let since = humantime::parse_rfc3339(acquired_at).ok()?;
    let held = SystemTime::now().duration_since(since).ok()?;
    Some(Duration::from_secs(held.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{HolderInfo, Mode, WaiterStatus};
    use crate::name::LockName;

    fn info(pid: u32, host: &str, note: Option<&str>) -> HolderInfo {
        HolderInfo {
            pid,
            host: host.into(),
            user: "u".into(),
            note: note.map(str::to_owned),
            acquired_at: humantime::format_rfc3339_seconds(
                SystemTime::now() - Duration::from_secs(192),
            )
            .to_string(),
            mode: Mode::Exclusive,
        }
    }

    #[test]
    fn names_the_holder_and_the_place_in_line() {
        let name = LockName::parse("deploy/prod").unwrap();
        let me = info(7, "ci-2", None);
        let request = AcquireRequest {
            name: name.clone(),
            limit: 1,
            mode: Mode::Exclusive,
            ttl: Duration::from_secs(15),
            deadline: None,
            holder: me.clone(),
            supersede: false,
            answered: false,
        };
        let status = LockStatus::new(
            &name,
            1,
            vec![HolderStatus::new(
                info(4242, "runner-7", Some("https://ci/runs/123")),
                9,
                0,
                Duration::from_secs(10),
            )],
            vec![
                WaiterStatus::new(info(1, "a", None)),
                WaiterStatus::new(info(2, "b", None)),
                WaiterStatus::new(me),
            ],
        );
        let text = line(&status, &request);
        assert!(
            text.starts_with("waiting for deploy/prod (held by runner-7 pid 4242 for 3m 1"),
            "{text}"
        );
        assert!(
            text.ends_with(", note https://ci/runs/123; 2 ahead of you)"),
            "{text}"
        );
    }

    #[test]
    fn an_outside_flock_is_not_a_lockrun() {
        let mut status = LockStatus::free(&LockName::parse("x").unwrap());
        status.holders.push(HolderStatus::new(
            HolderInfo {
                pid: 99,
                ..HolderInfo::unknown()
            },
            0,
            0,
            Duration::ZERO,
        ));
        assert_eq!(
            holders(&status).unwrap(),
            "pid 99 (not a lockrun: no token)"
        );
    }
}
