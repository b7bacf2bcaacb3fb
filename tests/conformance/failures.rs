//! When something breaks under a holder: the holder crashes, the server dies, freezes or falls
//! silent, the link drops out briefly, the holder itself is frozen (briefly, or past its lease),
//! or an operator breaks the lock. Networked holders go through the fault proxy, which tells when
//! their lease was last confirmed, so "stopped before expiry" is measured from there (see
//! [`assert_stopped_before_expiry`]).

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::BRIEF_PAUSES_LEASE;
use crate::support::asserts::{
    assert_one_line, assert_rode_through, assert_said, assert_stopped_before_expiry,
};
use crate::support::fixture::Fixture;
use crate::support::holder::Holder;
use crate::support::proxy::Proxy;
use crate::support::scene::Scene;
use crate::support::timing::LeaseTiming;
use crate::support::wait::{SOON, alive, code, number_in, text, wait_before, wait_until};

/// How long after its lease could have ended a waiter may take to notice (its re-check, starting
/// a process on a loaded machine).
const NOTICE: Duration = Duration::from_secs(1);

/// Guards against a crashed holder (SIGKILL: no release is sent) blocking the name for longer than
/// one TTL, or, with kernel locks, at all; and against its command outliving it.
pub fn a_crashed_holder_frees_the_lock_within_a_ttl<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let holder = s.hold("gone", "h", &["--ttl", F::TTL]);
    let mut waiter = s.waiter("gone", &["--ttl", F::TTL], "touch ran");
    s.wait_waiters("gone", 1);
    holder.signal(Signal::SIGKILL);
    let bound = match F::EXPIRES {
        true => holder.ttl() + NOTICE,
        false => NOTICE,
    };
    assert!(
        wait_until(bound, || s.path("ran").exists()),
        "the waiter did not get the lock within {bound:?} of the crash"
    );
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        wait_until(SOON, || !holder.command_alive()),
        "the crashed holder's command still runs"
    );
}

/// Guards against a holder whose backend dies under it (SIGKILL) running past the point where
/// its lease could expire (invariant 2). A state directory that loses its lock files is a lost
/// lease too, noticed at the next renewal.
pub fn server_killed_stops_the_holder_before_expiry<F: Fixture>() {
    let mut fx = F::start();
    let s = Scene::new(fx.url());
    if stops_before_expiry(&mut fx, &s, |fx, _| fx.kill()) {
        return;
    }
    let mut holder = s.hold("crash", "h", &["--ttl", F::TTL]);
    let timing = LeaseTiming::defaults(holder.ttl());
    fx.kill();
    let lost = Instant::now();
    let stopped = wait_before(lost + timing.renew + timing.kill_after / 2, || {
        !holder.command_alive()
    });
    assert!(stopped, "the command was not stopped at the next renewal");
    let out = holder.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert_said(&out, "removed or replaced");
}

/// Guards against a holder whose server freezes (SIGSTOP: connections open, no answers) running
/// past the point where its lease could expire.
pub fn server_paused_stops_the_holder_before_expiry<F: Fixture>() {
    let mut fx = F::start();
    let s = Scene::new(fx.url());
    if !stops_before_expiry(&mut fx, &s, |fx, _| fx.pause()) {
        kernel_lock_outlives_its_ttl(&s);
    }
    fx.resume();
}

/// Guards against a holder whose network goes silent (packets dropped, nothing closed) running
/// past the point where its lease could expire.
pub fn silent_network_stops_the_holder_before_expiry<F: Fixture>() {
    let mut fx = F::start();
    let s = Scene::new(fx.url());
    if !stops_before_expiry(&mut fx, &s, |_, proxy| proxy.blackhole()) {
        kernel_lock_outlives_its_ttl(&s);
    }
}

/// Holds a name through a proxy in front of the server, lets `fault` break the server or the
/// link, and asserts that the holder stops before its lease could expire. False, having done
/// nothing, for a backend without a network.
fn stops_before_expiry<F: Fixture>(
    fx: &mut F,
    s: &Scene,
    fault: impl FnOnce(&mut F, &Proxy),
) -> bool {
    let Some((proxy, url)) = fx.proxied() else {
        return false;
    };
    let mut holder = s.hold_via(&url, "fault", "h", &["--ttl", F::TTL]);
    fault(fx, &proxy);
    assert_stopped_before_expiry(&mut holder, &proxy);
    true
}

/// Guards against a release lost to a connection the server closed: a holder whose backend
/// restarted (keeping its data) since its last renewal releases over a new connection, and the
/// name is free at once, not a lease later.
pub fn a_release_right_after_a_restart_frees_the_name<F: Fixture>() {
    let mut fx = F::start();
    let s = Scene::new(fx.url());
    // A 30 s lease renews every 10 s: none comes between the restart and the release.
    let mut holder = s.hold("after", "h", &["--ttl", "30s"]);
    fx.restart(false);
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    // A renewal tried while the server was down may be reported; the release must not fail.
    assert!(
        !text(&out.stderr).contains("release"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(s.status("after")["holders"], serde_json::json!([]));
}

/// Guards against a holder that gives up on a brief outage it could ride through: right after a
/// renewal (lockrun reports each at `-vv`) the link goes silent until 2/5 of the TTL after that
/// renewal was sent, so the next renewal (due at 1/3) is held in the silence and answered after
/// it, well within its timeout (1/4) and before the stop point; the command runs on past the
/// lease the outage would have ended, and exits 0.
pub fn a_brief_outage_is_ridden_through<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let Some((proxy, url)) = fx.proxied() else {
        return kernel_lock_outlives_its_ttl(&s);
    };
    let mut holder = s.hold_via(&url, "ride", "h", &["-vv", "--ttl", F::TTL]);
    let timing = LeaseTiming::defaults(holder.ttl());
    // A renewal reported with time to spare before the next: a loaded machine may report one
    // late, and then the next is aligned on.
    let mut before = holder.renewals().len();
    let renewed = loop {
        let reported = wait_until(timing.ttl, || holder.renewals().len() > before);
        assert!(reported, "no renewal within a TTL");
        let sent = holder.last_renewal_sent().expect("a renewal was reported");
        before = holder.renewals().len();
        if Instant::now() + timing.renew / 4 < sent + timing.renew {
            break sent;
        }
    };
    proxy.blackhole();
    let silent_at = Instant::now();
    std::thread::sleep((renewed + timing.ttl * 2 / 5).saturating_duration_since(silent_at));
    proxy.heal();
    let silence = silent_at.elapsed();
    let held = wait_until(timing.renew, || holder.renewals().len() > before);
    let renewals = holder.renewals();
    assert!(
        held && renewals[before].1 > Duration::from_millis(50),
        "no renewal was held in the {silence:?} of silence and answered after it: {renewals:?}"
    );
    assert_rode_through(&mut holder, renewed + timing.ttl + timing.renew / 2);
}

/// Without a server or a network, the alternative the file backend documents: a kernel lock does
/// not expire, so a holder keeps it, renewing nothing remote, for longer than its TTL.
fn kernel_lock_outlives_its_ttl(s: &Scene) {
    let mut holder = s.hold("kept", "h", &["--ttl", "500ms"]);
    let out = s.run(["--name", "kept", "--wait", "1500ms", "--", "touch", "ran"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(holder.command_alive(), "the holder lost its kernel lock");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(!s.path("ran").exists());
}

/// Guards against a holder whose lockrun and command were frozen past their lease (a paused VM)
/// running on when they wake, or removing the new holder's lease on the way out (invariants 1, 2
/// and 4). A kernel lock is not taken over while its holder is frozen.
pub fn a_frozen_holder_is_overtaken_and_stopped_when_it_wakes<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let cmd = s.holder_cmd(s.url(), "vm", &["--ttl", F::TTL]);
    let mut stale = Holder::spawn_in_own_group(cmd, s.dir(), "a").started();
    stale.freeze();
    if !F::EXPIRES {
        let wait = format!("{}ms", (stale.ttl() * 2).as_millis());
        let out = s.run(["--name", "vm", "--wait", &wait, "--", "touch", "ran"]);
        assert_eq!(
            code(&out),
            75,
            "taken over while frozen: {}",
            text(&out.stderr)
        );
        stale.thaw();
        assert!(stale.command_alive());
        let out = stale.finish();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        return;
    }
    let mut fresh = s.hold("vm", "b", &["--ttl", F::TTL, "--wait", "30s"]);
    assert!(
        fresh.token() > stale.token(),
        "{} <= {}",
        fresh.token(),
        stale.token()
    );
    stale.thaw();
    let woke = Instant::now();
    let pid = stale.child_pid();
    assert!(
        wait_until(NOTICE, || !alive(pid)),
        "the stale command ran on {:?} after waking",
        woke.elapsed()
    );
    let out = stale.exit();
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    let status = s.status("vm");
    assert_eq!(status["holders"][0]["token"], fresh.token(), "{status}");
    assert_eq!(code(&fresh.finish()), 0);
}

/// Guards against a brief pause being taken for a lost lease (invariant 2 stops only a pause
/// past the lease): a holder whose lockrun and command are frozen for an eighth of the lease (at
/// least [`BRIEF_PAUSES_LEASE`]), three times, landing at different points of the renewal cycle
/// (a renewal may be on the wire), keeps NAME meanwhile and runs its command to the end with its
/// own status, under its first token.
pub fn a_holder_frozen_briefly_keeps_its_lease<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let ttl = F::ttl_at_least(BRIEF_PAUSES_LEASE);
    let cmd = s.holder_cmd(s.url(), "brief", &["--ttl", &ttl]);
    let mut holder = Holder::spawn_in_own_group(cmd, s.dir(), "h").started();
    let pause = holder.ttl() / 8;
    for _ in 0..3 {
        holder.freeze();
        std::thread::sleep(pause);
        holder.thaw();
        std::thread::sleep(holder.ttl() / 5);
    }
    // Taken over meanwhile, it would have lost its lease at its next renewal, and its command.
    assert!(holder.command_alive(), "the command was stopped");
    let out = s.run(["--name", "brief", "--no-wait", "--", "touch", "ran"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert_eq!(s.status("brief")["holders"][0]["token"], holder.token());
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(!s.path("ran").exists());
}

/// Guards against a run whose lockrun (not its command) was frozen past the lease while the
/// command ended being reported as clean: the lease did not cover the command's end, so lockrun
/// exits 76 once it wakes (invariant 2). A kernel lock lasts as long as its lockrun: that run is
/// clean.
pub fn a_command_that_ends_while_lockrun_is_frozen_past_its_lease_is_a_lost_lease<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("late", "h", &["--ttl", F::TTL]);
    let pid = holder.child_pid();
    holder.signal(Signal::SIGSTOP);
    std::fs::write(holder.file("release"), "").unwrap();
    assert!(wait_until(SOON, || !alive(pid)), "the command did not end");
    // The lease runs out while lockrun cannot renew it: its last renewal came before the freeze.
    std::thread::sleep(holder.ttl() + Duration::from_millis(500));
    holder.signal(Signal::SIGCONT);
    let out = holder.exit();
    let said = text(&out.stderr);
    match F::EXPIRES {
        true => {
            assert_eq!(code(&out), 76, "{said}");
            assert!(said.contains("paused or suspended?"), "{said}");
        }
        false => assert_eq!(code(&out), 0, "{said}"),
    }
}

/// Guards against `release --force` leaving a semaphore's holders running until their next
/// renewal (with a 30 s lease, every command must stop within moments, exit 76: DynamoDB, which
/// pushes nothing, once used to wait for the renewal, 10 s away), and against the tokens after it
/// falling back. A kernel lock cannot be broken: the
/// release says so, naming a holder, and both keep the lock.
pub fn forced_release_stops_every_holder_at_once<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let args = ["--limit", "2", "--ttl", "30s", "--wait", "60s"];
    let mut holders = [s.hold("brk", "a", &args), s.hold("brk", "b", &args)];
    let record = "echo $FENCING_TOKEN > w.token";
    let mut waiter = s.waiter("brk", &["--limit", "2", "--ttl", F::TTL], record);
    let status = s.wait_waiters("brk", 1);
    assert_eq!(status["limit"], 2, "{status}");
    assert_eq!(
        status["holders"].as_array().map(Vec::len),
        Some(2),
        "{status}"
    );

    let out = s.run(["release", "brk", "--force"]);
    let released = Instant::now();
    // At once, not at the holder's next renewal, a third of the 30 s lease away.
    let notice = F::REVOCATION_NOTICE;
    if F::FORCE_RELEASE {
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("each is told to stop"),
            "{}",
            text(&out.stderr)
        );
        for holder in &mut holders {
            let pid = holder.child_pid();
            let stopped = wait_before(released + notice, || !alive(pid));
            assert!(
                stopped,
                "a holder's command still ran {notice:?} after release --force"
            );
            let out = holder.exit();
            assert_eq!(code(&out), 76, "{}", text(&out.stderr));
        }
    } else {
        let pids = holders
            .each_ref()
            .map(|h| format!("pid {}", h.process.pid()));
        let line = assert_one_line(&out, code(&out).max(1), "pid ");
        assert!(pids.iter().any(|p| line.contains(p.as_str())), "{line}");
        assert_eq!(s.status("brk")["holders"].as_array().map(Vec::len), Some(2));
        for holder in &mut holders {
            assert_eq!(code(&holder.finish()), 0);
        }
    }
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let next = number_in(&s.path("w.token"));
    assert!(
        holders.iter().all(|h| next > h.token()),
        "the token fell back"
    );
}

/// Guards against a holder whose command ends right after `release --force`, before any
/// renewal or announcement reaches it, passing the command's 0 on as if the lease had covered
/// the whole run: its release finds the lease gone, and that is a lost lease (76). A kernel lock
/// cannot be broken, so there the run ends as its command did.
pub fn a_command_ending_right_after_a_forced_release_is_a_lost_lease<F: Fixture>() {
    let fx = F::start();
    let s = Scene::new(fx.url());
    let mut holder = s.hold("brief", "h", &["--ttl", "30s"]);
    let out = s.run(["release", "brief", "--force"]);
    // The command ends within its 20 ms poll: sooner than lockrun's next renewal (10 s away)
    // or any listener it opens for an announcement.
    let finished = holder.finish();
    let said = text(&finished.stderr);
    match F::FORCE_RELEASE {
        true => {
            assert_eq!(code(&out), 0, "{}", text(&out.stderr));
            assert_eq!(code(&finished), 76, "{said}");
            assert_said(&finished, "gone");
        }
        false => assert_eq!(code(&finished), 0, "{said}"),
    }
    let out = s.run(["--name", "brief", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}
