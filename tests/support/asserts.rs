//! Assertions several test modules make in the same words: a command stopped before its lease
//! could expire, a process that does not outlive what it must not, a one-line message that names
//! what it should and hides what it must.

use std::process::Output;
use std::time::{Duration, Instant};

use super::holder::Holder;
use super::proxy::Proxy;
use super::scene::Scene;
use super::timing::LeaseTiming;
use super::wait::{alive, code, text, wait_before, wait_until};

/// The holder, whose traffic went through `proxy`, lost its backend: its command must be dead by
/// its stop point, counted from the last renewal the server side confirmed (the latest request a
/// reply followed), and lockrun must exit 76. A lockrun that overstays its lease, or that spends
/// its stop-early budget (the TERM grace and the margin), fails here.
pub fn assert_stopped_before_expiry(holder: &mut Holder, proxy: &Proxy) {
    assert_stopped_by_stop_point(holder, |_| {
        assert!(
            proxy.accepted() > 0,
            "the holder's traffic never went through the proxy"
        );
        proxy
            .confirmed()
            .expect("no request of the holder's was ever answered")
    });
}

/// [`assert_stopped_before_expiry`] for a holder run with `-vv`, counting from the last renewal
/// lockrun itself reported: for faults where the server still answers, with errors.
pub fn assert_stopped_after_its_last_renewal(holder: &mut Holder) {
    assert_stopped_by_stop_point(holder, |holder| {
        holder
            .last_renewal_sent()
            .expect("lockrun reported no renewal (is it run with -vv?)")
    });
}

/// The command must be dead by the stop point of a lease last confirmed by a request sent no
/// later than `confirmed` (asked once the command died), and lockrun must exit 76.
pub fn assert_stopped_by_stop_point(
    holder: &mut Holder,
    confirmed: impl FnOnce(&Holder) -> Instant,
) -> Output {
    let timing = LeaseTiming::defaults(holder.ttl());
    let pid = holder.child_pid();
    let dead = wait_until(timing.ttl * 2, || !alive(pid));
    let seen_dead = Instant::now();
    assert!(
        dead,
        "the command was never stopped; lockrun said:\n{}",
        holder.process.stderr_so_far()
    );
    let confirmed = confirmed(holder);
    let bound = timing.seen_dead_by(confirmed);
    assert!(
        seen_dead <= bound,
        "the command ran {:?} past its stop point: it died {:?} after the last confirmed \
         renewal ({timing:?}); lockrun said:\n{}",
        seen_dead - bound,
        seen_dead - confirmed,
        holder.process.stderr_so_far()
    );
    let out = holder.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    // Nor does lockrun wait long past that for a release nobody answers: its caller waits for
    // the 76.
    let exited = Instant::now();
    let lease_end = confirmed + timing.ttl;
    assert!(
        exited <= lease_end + Duration::from_secs(1),
        "lockrun exited {:?} after its lease could have expired; it said:\n{}",
        exited - lease_end,
        text(&out.stderr)
    );
    out
}

/// The holder rode through a fault: its command still runs at `until` (past the lease the fault
/// would have ended), then it ends normally and lockrun exits 0.
pub fn assert_rode_through(holder: &mut Holder, until: Instant) {
    let stopped = wait_before(until, || !holder.command_alive());
    assert!(
        !stopped,
        "the command was stopped; lockrun said:\n{}",
        holder.process.stderr_so_far()
    );
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// The process `pid` is gone within `bound`; otherwise the test fails saying that `what` (the
/// command, a daemon it left) outlived `outlived` (lockrun, the lost lease).
pub fn assert_gone_within(bound: Duration, what: &str, pid: i32, outlived: &str) {
    assert!(
        wait_until(bound, || !alive(pid)),
        "{what} (pid {pid}) outlived {outlived}: {}",
        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default()
    );
}

/// lockrun failed with `status`, printing one `lockrun: ` line on stderr that contains `needle`
/// and nothing on stdout. Returns the line.
pub fn assert_one_line(out: &Output, status: i32, needle: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(code(out), status, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.starts_with("lockrun: "), "{stderr}");
    assert!(
        stderr.contains(needle),
        "{stderr:?} does not name {needle:?}"
    );
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    stderr
}

/// lockrun's stderr contains `needle`.
pub fn assert_said(out: &Output, needle: &str) {
    let stderr = text(&out.stderr);
    assert!(stderr.contains(needle), "{needle:?} is not in: {stderr}");
}

/// None of `secrets` shows in `seen`.
pub fn assert_hidden(seen: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!seen.contains(secret), "{secret:?} leaked: {seen}");
    }
}

/// `out` is a run that exited `status`, saying `says`, without running its command (which would
/// have made the file `ran` in `scene`).
pub fn assert_ended_without_running(scene: &Scene, out: &Output, status: i32, says: &str) {
    assert_eq!(code(out), status, "{}", text(&out.stderr));
    assert_said(out, says);
    assert!(!scene.path("ran").exists(), "the command ran");
}
