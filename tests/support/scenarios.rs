//! Scenarios every networked backend must pass in the same way, written once over
//! [`World<S>`](super::world::World): each backend's suite calls them with the TTL its tests use
//! (etcd raises leases below 2 s, so its suite passes 3 s).

use std::time::{Duration, Instant};

use super::world::{SOON, Server, World};
use crate::support::common::{Drive, code, text, wait_exit};

/// `--no-wait` on a held name exits 75 (or the chosen code, quietly), runs nothing and leaves no
/// waiter behind.
pub fn busy_with_no_wait_exits_75_or_the_chosen_code<S: Server>(ttl: &str) {
    let w = World::<S>::new();
    let _holder = w.hold("busy", "h", &["--ttl", ttl]);
    let out = w.run(["--name", "busy", "--no-wait", "--", "touch", "ran"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("busy"), "{}", text(&out.stderr));
    let quiet = [
        "--name",
        "busy",
        "--no-wait",
        "--busy-exit-code",
        "0",
        "--",
        "touch",
        "ran",
    ];
    let out = w.run(quiet);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(
        !w.path("ran").exists(),
        "the command ran while the lock was busy"
    );
    assert_eq!(w.status("busy")["waiters"], 0, "a try left a waiter behind");
}

/// `--wait` runs out with 75, nothing ran, and the waiter left the line.
pub fn wait_runs_out_and_leaves_the_line<S: Server>(ttl: &str, wait: Duration) {
    let w = World::<S>::new();
    let _holder = w.hold("slow", "h", &["--ttl", ttl]);
    let started = Instant::now();
    let wait_arg = format!("{}ms", wait.as_millis());
    let out = w.run(["--name", "slow", "--wait", &wait_arg, "--", "touch", "ran"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(started.elapsed() >= wait);
    assert!(!w.path("ran").exists());
    assert_eq!(
        w.status("slow")["waiters"],
        0,
        "a waiter that gave up stayed in line"
    );
}

/// `release --force` breaks the holder within about a renewal (exit 76), and the token counter
/// survives it.
pub fn force_release_breaks_the_holder_within_a_renewal<S: Server>(ttl: &str) {
    let w = World::<S>::new();
    let mut holder = w.hold("brk", "h", &["--ttl", "3s", "--renew", "500ms"]);
    let released_at = Instant::now();
    let out = w.run(["release", "brk", "--force"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = wait_exit(&mut holder.process, SOON);
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(
        released_at.elapsed() < Duration::from_secs(3),
        "noticed only after {:?}",
        released_at.elapsed()
    );
    let next = w.hold("brk", "n", &["--ttl", ttl]);
    assert!(next.token > holder.token);
}

/// Five waiters, each queued after the previous one shows in `status`, run in that order.
pub fn waiters_are_served_in_arrival_order<S: Server>(ttl: &str) {
    let w = World::<S>::new();
    let mut holder = w.hold("line", "h", &["--ttl", ttl]);
    let mut waiters = Vec::new();
    for i in 0..5 {
        let script = format!("echo {i} >> order");
        waiters.push(w.spawn([
            "--name", "line", "--ttl", ttl, "--wait", "30s", "--", "sh", "-c", &script,
        ]));
        w.wait_waiters("line", i + 1);
    }
    assert_eq!(code(&holder.finish()), 0);
    for waiter in &mut waiters {
        let out = wait_exit(waiter, Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let order = std::fs::read_to_string(w.path("order")).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["0", "1", "2", "3", "4"]
    );
}
