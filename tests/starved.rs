//! lockrun on a starved system: whichever step the kernel refuses for want of descriptors or
//! processes, lockrun says so in one line and either runs the command to its end or never
//! starts it, and leaves nothing of itself on the backend (invariants 6 and 10).

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use crate::support::etcd_cluster::Etcd;
use crate::support::fixture::{Fixture, Reachable};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::support::seccomp::{Clones, refuse_clones};
use crate::support::wait::{code, text};

/// Descriptor limits from one to spare (stdin, stdout and stderr take three; with none, the
/// dynamic loader cannot load lockrun's libraries) to a few more than a run needs: every step
/// that opens one is refused at one of them.
const LIMITS: std::ops::RangeInclusive<u64> = 4..=28;

/// Runs `cmd` with at most `limit` open descriptors.
fn limited(mut cmd: Command, limit: u64) -> Output {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    cmd.output().expect("run lockrun")
}

/// The run ended whole or with nothing run: `ran` on stdout exactly when lockrun exits 0 (or
/// `waited`, when a wait ran out), a refusal's status otherwise, and every message one line of
/// lockrun's own.
fn assert_whole_or_nothing(out: &Output, limit: u64, waited: i32) {
    let stderr = text(&out.stderr);
    let ran = text(&out.stdout).contains("ran");
    let status = code(out);
    let context = format!("at {limit} descriptors: status {status}, stderr {stderr:?}");
    assert!(!stderr.contains("panicked"), "{context}");
    for line in stderr.lines() {
        let said = line
            .strip_prefix("lockrun: ")
            .unwrap_or_else(|| panic!("{context}"));
        assert!(
            !said.starts_with(char::is_uppercase),
            "not lockrun's own form: {context}"
        );
    }
    match status {
        0 => assert!(ran, "exit 0 without the command: {context}"),
        69 | 70 => assert!(!ran, "refused after the command started: {context}"),
        other => {
            assert_eq!(other, waited, "{context}");
            assert!(!ran, "{context}");
        }
    }
}

#[test]
fn a_low_descriptor_limit_runs_the_command_whole_or_not_at_all_on_file() {
    let env = Scene::file();
    for limit in LIMITS {
        let out = limited(
            env.cmd(["--name", "fd", "--", "sh", "-c", "echo ran"]),
            limit,
        );
        assert_whole_or_nothing(&out, limit, 0);
        // No server failed: running out of descriptors is the system refusing lockrun (70),
        // never "backend failing" (69), which a script may retry on.
        assert_ne!(code(&out), 69, "at {limit}: {}", text(&out.stderr));
    }
}

/// On a networked backend the refusals come after the lease or a place in line was taken too:
/// both must be given back before lockrun exits, for the next run not to wait on them. A waiter
/// that got as far as waiting waits its turn (here until `--wait` runs out) even when the
/// system refuses it a timer of its own: the only timer lockrun may fail for is its own clock,
/// made before anything else (exit 70).
fn low_descriptor_limit_leaves_nothing_behind<F: Fixture>() {
    let fx = F::start();
    let env = Scene::new(fx.url());
    for limit in LIMITS {
        let out = limited(
            env.cmd(["--name", "free", "--", "sh", "-c", "echo ran"]),
            limit,
        );
        assert_whole_or_nothing(&out, limit, 0);
        let status = env.status("free");
        assert_eq!(status["held"], false, "at {limit} descriptors: {status}");
    }
    let mut holder = env.hold("taken", "h", &[]);
    env.wait_held("taken", 1);
    for limit in LIMITS {
        let waiter = env.cmd([
            "--name", "taken", "--wait", "300ms", "--", "sh", "-c", "echo ran",
        ]);
        let out = limited(waiter, limit);
        assert_whole_or_nothing(&out, limit, 75);
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("cannot create a timer") || code(&out) == 70,
            "at {limit} descriptors, a waiter failed for want of a timer: {stderr}"
        );
        let status = env.status("taken");
        assert_eq!(status["waiters"], 0, "at {limit} descriptors: {status}");
    }
    assert_eq!(code(&holder.finish()), 0);
}

#[test]
fn a_low_descriptor_limit_leaves_no_lease_and_no_place_in_line_on_redis() {
    low_descriptor_limit_leaves_nothing_behind::<RedisServer>();
}

#[test]
fn a_low_descriptor_limit_leaves_no_lease_and_no_place_in_line_on_etcd() {
    low_descriptor_limit_leaves_nothing_behind::<Etcd<1>>();
}

/// A system out of processes refuses the command's start: that is lockrun's failure (70), not a
/// command that "cannot execute" (126), and the lease is given back.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn a_command_the_system_has_no_process_for_is_lockruns_failure() {
    let fx = RedisServer::start();
    let env = Scene::new(fx.url());
    let mut cmd = env.cmd(["--name", "np", "--", "true"]);
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe { cmd.pre_exec(|| refuse_clones(Clones::All)) };
    let out = cmd.output().expect("run lockrun");
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 70, "{stderr}");
    assert!(
        stderr.contains("cannot start \"true\": resource temporarily unavailable"),
        "{stderr}"
    );
    assert_eq!(env.status("np")["held"], false);
}
