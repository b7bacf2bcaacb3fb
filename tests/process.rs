//! The command's life under lockrun, through the real binary: exit statuses, signal forwarding,
//! the parent-death signal, and descriptors that must not leak to the command's descendants.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::asserts::{assert_gone_within, assert_one_line, assert_said};
use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{BIN, Proc, output, scrub};
use crate::support::redis_server::RedisServer;
use crate::support::scene::Scene;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::support::seccomp::{Clones, refuse_clones};
use crate::support::server_process::children_of;
use crate::support::tools::{self, chmod};
use crate::support::wait::{SOON, alive, code, number_in, text, wait_for_file, wait_until};

#[test]
fn the_commands_own_exit_status_is_passed_on() {
    let env = Scene::file();
    for status in [0, 1, 3, 42, 255] {
        let out = env.run(["--name", "x", "--", "sh", "-c", &format!("exit {status}")]);
        assert_eq!(code(&out), status);
    }
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_n() {
    let env = Scene::file();
    let out = env.run(["--name", "x", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code(&out), 128 + 15);
    let out = env.run(["--name", "x", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(code(&out), 128 + 9);
}

#[test]
fn a_missing_command_exits_127_and_a_non_executable_one_or_a_directory_126() {
    let env = Scene::file();
    let out = env.run(["--name", "x", "--", "/no/such/program"]);
    assert_eq!(code(&out), 127, "{}", text(&out.stderr));
    assert_said(&out, "no such file");
    let out = env.run(["--name", "x", "--", "no-such-program-anywhere"]);
    assert_eq!(code(&out), 127, "{}", text(&out.stderr));
    assert_said(&out, "not found");

    let script = env.path("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    chmod(&script, 0o644);
    let out = env.run(["--name", "x", "--", script.to_str().unwrap()]);
    assert_eq!(code(&out), 126, "{}", text(&out.stderr));

    assert_said(&out, "permission denied");
    let out = env.run(["--name", "x", "--", env.dir().to_str().unwrap()]);
    assert_eq!(code(&out), 126, "{}", text(&out.stderr));
    assert_said(&out, "it is a directory");

    // Either way the lock was given back.
    assert_eq!(env.status("x")["held"], false);
    assert_eq!(
        code(&env.run(["--name", "x", "--no-wait", "--", "true"])),
        0
    );
}

/// The command starts as from a shell: nothing blocked, nothing caught, and SIGPIPE not ignored
/// (lockrun itself ignores it, catches its forwarded signals, and blocks every signal while it
/// starts the command; none of that may reach the command).
#[test]
fn the_command_starts_with_no_signal_blocked_caught_or_pipe_ignored() {
    let env = Scene::file();
    let out = env.run(["--name", "x", "--", "cat", "/proc/self/status"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let status = text(&out.stdout);
    let mask = |field: &str| {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{status}");
    assert_eq!(mask("SigCgt:"), 0, "{status}");
    let ignored_by_lockrun = (1 << (libc::SIGPIPE - 1)) | (1 << (libc::SIGXFSZ - 1));
    assert_eq!(mask("SigIgn:") & ignored_by_lockrun, 0, "{status}");
}

/// SIGPIPE and SIGXFSZ, which lockrun ignores for itself, reach the command as lockrun found
/// them: ignored when its parent ignored them (as across any exec), default otherwise. And a
/// file-size limit that leaves lockrun no room to write its state ends it with one line, not a
/// silent death by SIGXFSZ.
#[test]
fn signals_lockrun_ignores_for_itself_reach_the_command_as_it_found_them() {
    let env = Scene::file();
    let ignored_in = |prelude: &str| {
        let out = output(
            Command::new("sh")
                .current_dir(env.dir())
                .arg("-c")
                .arg(format!(
                    "{prelude} exec {BIN} -b {} --name sig -- grep SigIgn /proc/self/status",
                    env.url()
                )),
        );
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let mask = text(&out.stdout)
            .trim()
            .trim_start_matches("SigIgn:")
            .trim()
            .to_owned();
        u64::from_str_radix(&mask, 16).unwrap()
    };
    let (pipe, xfsz) = (1 << (libc::SIGPIPE - 1), 1 << (libc::SIGXFSZ - 1));
    assert_eq!(ignored_in("") & (pipe | xfsz), 0);
    assert_eq!(
        ignored_in("trap '' PIPE XFSZ;") & (pipe | xfsz),
        pipe | xfsz
    );
    assert_eq!(ignored_in("trap '' PIPE;") & (pipe | xfsz), pipe);

    let fresh = Scene::file();
    let out = output(Command::new("sh").arg("-c").arg(format!(
        "ulimit -f 0; exec {BIN} -b {} --name big -- touch {}",
        fresh.url(),
        fresh.path("ran").display()
    )));
    assert_one_line(&out, 69, "file too large");
    assert!(!fresh.path("ran").exists(), "the command ran");
}

/// Started with stdin, stdout and stderr closed (by a daemon, or a crontab line ending in
/// `>&- 2>&-`), lockrun opens them on /dev/null: no lock file or connection becomes its stdout,
/// and the command reads and writes as it would anywhere.
#[test]
fn closed_standard_descriptors_are_opened_on_dev_null() {
    use std::os::unix::process::CommandExt;
    let env = Scene::file();
    let script = "cat >/dev/null && echo out && echo err >&2";
    let mut cmd = env.cmd(["--name", "x", "--", "sh", "-c", script]);
    // SAFETY: closes descriptors in the forked child before exec; nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            for fd in 0..=2 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let status = cmd.status().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(env.status("x")["held"], false);
}

/// Output to a reader that went away (`lockrun list | head -1`) is an error lockrun handles, not a
/// SIGPIPE that kills it, even when it was started with SIGPIPE at its default.
#[test]
fn a_reader_that_went_away_does_not_kill_lockrun() {
    let env = Scene::file();
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let status = env
        .cmd(["status", "x", "--json"])
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.code().is_some(), "killed: {status:?}");
}

/// A stderr nobody reads (a full pipe whose reader is alive) never holds up what lockrun must
/// do: the message that the command's time ran out cannot be written, yet the command is
/// stopped and the lock freed at once, as they would be with a stderr that reads.
#[test]
fn a_stderr_nobody_reads_never_holds_up_stopping_the_command() {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    // The smallest pipe, full: every write to it would block.
    nix::fcntl::fcntl(&writer, nix::fcntl::FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
    fill(&writer);
    stops_on_time_despite(writer);
    drop(reader);
}

/// The same with stderr a Unix socket nobody reads, as under systemd (the journal's stream): a
/// socket is written to in its own way (without blocking, though it is shared with the
/// command), and a full one must not hold lockrun up either.
#[test]
fn a_stderr_socket_nobody_reads_never_holds_up_stopping_the_command() {
    let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let writer = std::os::fd::OwnedFd::from(writer);
    fill(&writer);
    stops_on_time_despite(writer);
    drop(reader);
}

/// Under systemd lockrun's messages reach the journal through a socket: they arrive whole.
#[test]
fn messages_reach_a_stderr_that_is_a_socket() {
    let env = Scene::file();
    let (mut reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let status = env
        .cmd(["-v", "--name", "journal", "--", "true"])
        .stderr(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            writer,
        )))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut reader, &mut said).unwrap();
    assert!(said.contains("lockrun: acquired journal"), "{said}");
    assert!(said.ends_with("lockrun: released\n"), "{said}");
}

/// Guards the backlog of a stderr nobody reads: past 64 KiB, messages are dropped rather than
/// kept without bound, and once the reader is back it gets what was kept, whole lines only, then
/// one line saying how many were dropped, then the run's last message.
#[test]
fn messages_past_the_backlog_are_dropped_and_counted() {
    let env = Scene::file();
    let note = "n".repeat(1000);
    let mut holder = env.hold("talky", "h", &["--note", &note]);
    let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let writer = std::os::fd::OwnedFd::from(writer);
    fill(&writer);
    // About 10 KiB of progress lines a second (each names the holder's note): the backlog is
    // full after some 7 s of a 10 s wait.
    let mut waiter = KilledOnDrop(
        env.cmd(["--name", "talky", "--progress", "100ms", "--wait", "10s"])
            .args(["--", "true"])
            .stderr(std::process::Stdio::from(writer))
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(9500));
    let drained = std::thread::spawn(move || {
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut &reader, &mut all).unwrap();
        all
    });
    assert_eq!(waiter.0.wait().unwrap().code(), Some(75));
    let all = drained.join().unwrap();
    assert_eq!(code(&holder.finish()), 0);
    let said = String::from_utf8_lossy(&all);
    // What `fill` wrote comes first, then lockrun's lines.
    let said = said.trim_start_matches('x');
    assert!(said.ends_with('\n'), "a cut line at the end");
    let lines: Vec<&str> = said.lines().collect();
    assert!(
        lines.iter().all(|l| l.starts_with("lockrun: ")),
        "a cut line: {:?}",
        lines.iter().find(|l| !l.starts_with("lockrun: "))
    );
    let dropped = lines
        .iter()
        .position(|l| l.contains("message(s) dropped: stderr was not being read"))
        .unwrap_or_else(|| panic!("no count of dropped messages in {} lines", lines.len()));
    let kept: usize = lines[..dropped].iter().map(|l| l.len() + 1).sum();
    assert!(kept <= 64 * 1024, "{kept} bytes kept back");
    assert!(
        lines
            .last()
            .unwrap()
            .contains("talky is busy after waiting 10s"),
        "{:?}",
        lines.last()
    );
}

/// Fills `writer` (a pipe or a socket) until a write would block, and leaves it blocking.
fn fill(writer: &std::os::fd::OwnedFd) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(writer, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    while nix::unistd::write(writer, &[b'x'; 512]).is_ok() {}
    fcntl(writer, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
}

/// A run with `stderr` (full, never read) as its stderr and a `--timeout`: the command is stopped
/// on time, the name freed at once, and lockrun exits 124 after giving stderr a while.
fn stops_on_time_despite(stderr: std::os::fd::OwnedFd) {
    let env = Scene::file();
    let mut run = KilledOnDrop(
        env.cmd(["--name", "deaf", "--timeout", "300ms", "--", "sh", "-c"])
            .arg("echo $$ > pid; exec sleep 30")
            .stderr(std::process::Stdio::from(stderr))
            .spawn()
            .unwrap(),
    );
    wait_for_file(&env.path("pid"), SOON);
    let command = number_in(&env.path("pid")) as i32;
    assert_gone_within(
        Duration::from_secs(5),
        "the command",
        command,
        "its --timeout",
    );
    let free = wait_until(Duration::from_secs(5), || {
        code(&env.run(["--name", "deaf", "-n", "--", "true"])) == 0
    });
    assert!(free, "the name stayed held while stderr was full");
    // lockrun gives the full stderr a while to take its messages, then exits with 124.
    let exited = wait_until(Duration::from_secs(10), || {
        run.0.try_wait().unwrap().is_some()
    });
    assert!(exited, "lockrun never exited with its stderr full");
    assert_eq!(run.0.wait().unwrap().code(), Some(124));
}

/// A lockrun that a failing test must not leave behind (blocked on a full stderr, it would keep
/// the test's output open).
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn lockrun_writes_nothing_to_stdout_and_leaves_stdin_to_the_command() {
    let env = Scene::file();
    let out = env.run(["-vv", "--name", "x", "--ttl", "300ms", "--", "sleep", "0.4"]);
    assert_eq!(code(&out), 0);
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.lines().all(|l| l.starts_with("lockrun: ")),
        "{stderr}"
    );
    assert!(
        stderr.contains("acquired") && stderr.contains("renewed"),
        "{stderr}"
    );

    let mut cat = Proc::spawn(
        env.cmd(["--name", "x", "--", "cat"])
            .stdin(std::process::Stdio::piped()),
    );
    let mut stdin = cat.take_stdin().expect("a pipe to cat");
    stdin.write_all(b"through\n").unwrap();
    drop(stdin);
    assert_eq!(text(&cat.wait(SOON).stdout), "through\n");
}

/// Guards against `-q` hiding nothing (or everything): renewals that go unanswered while a link is
/// silent for 800 ms make lockrun warn, which `-q` silences; an error still shows.
#[test]
fn quiet_silences_warnings_but_not_errors() {
    let server = RedisServer::start();
    let s = Scene::new(server.url());
    for (tag, quiet) in [("loud", false), ("quiet", true)] {
        let (proxy, url) = server.proxied().expect("a proxy");
        let verbosity: &[&str] = if quiet { &["-q"] } else { &[] };
        let options = [verbosity, &["--ttl", "3s", "--renew", "300ms"]].concat();
        let mut holder = s.hold_via(&url, tag, tag, &options);
        proxy.blackhole();
        std::thread::sleep(Duration::from_millis(800));
        proxy.heal();
        let out = holder.finish();
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 0, "{tag}: {stderr}");
        match quiet {
            false => assert!(
                stderr.contains("lockrun: renewal not"),
                "no warning: {stderr}"
            ),
            true => assert!(stderr.is_empty(), "-q let a warning through: {stderr}"),
        }
    }
    let out = s.run(["-q", "--name", "x", "--", "/no/such/program"]);
    assert_eq!(code(&out), 127);
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn signals_are_forwarded_to_the_commands_process_group() {
    let env = Scene::file();
    for (signal, number) in [
        (Signal::SIGTERM, 15),
        (Signal::SIGINT, 2),
        (Signal::SIGHUP, 1),
        (Signal::SIGQUIT, 3),
        (Signal::SIGUSR1, 10),
        (Signal::SIGUSR2, 12),
    ] {
        let ready = env.path(&format!("ready-{number}"));
        let grandchild = env.path(&format!("grandchild-{number}"));
        // The command traps the signal and exits with its number; a grandchild in the same group
        // records that it was reached too. (sh starts background jobs with INT and QUIT ignored,
        // and an ignored signal cannot be trapped, so the grandchild only checks the others.)
        let reaches_background = !matches!(signal, Signal::SIGINT | Signal::SIGQUIT);
        // The command says it is ready only once the grandchild has set its trap.
        let background = if reaches_background {
            format!(
                "sh -c 'trap \"echo got > {g}; exit 0\" {number}; echo > {g}.trap; \
                 while :; do sleep 0.05; done' & \
                 while [ ! -e {g}.trap ]; do sleep 0.01; done",
                g = grandchild.display()
            )
        } else {
            String::new()
        };
        let script = format!(
            "{background}\ntrap 'exit {number}' {number}; echo up > {r}; while :; do sleep 0.05; done",
            r = ready.display()
        );
        let mut run = env.spawn(["--name", "sig", "--", "sh", "-c", &script]);
        wait_for_file(&ready, Duration::from_secs(10));
        run.signal(signal);
        let out = run.wait(Duration::from_secs(10));
        assert_eq!(code(&out), number, "{signal}: {}", text(&out.stderr));
        if reaches_background {
            assert_eq!(
                wait_for_file(&grandchild, Duration::from_secs(5)).trim(),
                "got",
                "{signal}"
            );
        }
    }
}

/// A command that is stopped (it stopped itself, or was stopped from outside) still ends when
/// lockrun is told to end, or its --timeout runs out: lockrun continues it after the TERM, as
/// `timeout` and shells do, so its trap runs; otherwise the TERM stayed pending and lockrun
/// waited, holding the lock, for as long as the command stayed stopped.
#[test]
fn a_stopped_command_still_ends_on_a_forwarded_term_or_its_timeout() {
    let env = Scene::file();
    let script = "trap 'echo trapped > trapped; exit 9' TERM; echo up > ready; kill -STOP $$; \
                  while :; do sleep 0.05; done";
    let mut run = env.spawn(["--name", "stopped", "--", "sh", "-c", script]);
    wait_for_file(&env.path("ready"), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(100));
    run.signal(Signal::SIGTERM);
    let out = run.wait(Duration::from_secs(10));
    assert_eq!(code(&out), 9, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(env.path("trapped")).unwrap().trim(),
        "trapped"
    );

    std::fs::remove_file(env.path("trapped")).unwrap();
    let out = env.run([
        "--name",
        "stopped",
        "--timeout",
        "300ms",
        "--ttl",
        "60s",
        "--kill-after",
        "10s",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code(&out), 124, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(env.path("trapped")).unwrap().trim(),
        "trapped"
    );
}

#[test]
fn a_signal_while_waiting_for_the_lock_ends_the_wait_without_running_anything() {
    let env = Scene::file();
    let _holder = env.hold("w", "h", &[]);
    let marker = env.path("ran");
    let mut waiter = env.spawn(["--name", "w", "--", "touch", marker.to_str().unwrap()]);
    env.wait_waiters("w", 1);
    waiter.signal(Signal::SIGTERM);
    let out = waiter.wait(Duration::from_secs(5));
    assert_eq!(code(&out), 128 + 15, "{}", text(&out.stderr));
    assert_said(&out, "interrupted");
    assert!(!marker.exists());
}

#[test]
fn sigkill_of_lockrun_kills_the_command() {
    let env = Scene::file();
    let script = "echo $$ > child.pid; exec sleep 30";
    let mut run = env.spawn(["--name", "die", "--", "sh", "-c", script]);
    let child = number_in(&env.path("child.pid")) as i32;
    assert!(alive(child));
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    assert_gone_within(Duration::from_secs(5), "the command", child, "lockrun");
    // And the lock is free at once.
    assert_eq!(
        code(&env.run(["--name", "die", "--no-wait", "--", "true"])),
        0
    );
}

#[test]
fn the_parent_death_signal_survives_lockrun_idling_for_longer_than_a_worker_thread_lives() {
    // PR_SET_PDEATHSIG fires when the thread that spawned the command exits. An async runtime's
    // blocking-pool threads exit after 10 s idle; the command must not be killed by that.
    let env = Scene::file();
    let script = "sleep 11; echo finished";
    let out = env.run(["--name", "long", "--", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "finished\n");
}

#[test]
fn a_background_grandchild_does_not_keep_the_lock() {
    let env = Scene::file();
    let pid_file = env.path("grandchild.pid");
    // The grandchild keeps every inherited descriptor open and outlives the command.
    // Its output goes elsewhere, so the test does not wait for it to close our pipes.
    let script = format!(
        "sleep 30 >/dev/null 2>&1 & echo $! > {}",
        pid_file.display()
    );
    let out = env.run(["--name", "bg", "--", "sh", "-c", &script]);
    assert_eq!(code(&out), 0);
    let grandchild = number_in(&pid_file) as i32;
    assert!(alive(grandchild));
    let out = env.run(["--name", "bg", "--no-wait", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the grandchild kept the lock: {}",
        text(&out.stderr)
    );
    let fds = std::fs::read_dir(format!("/proc/{grandchild}/fd")).unwrap();
    for fd in fds {
        let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert!(
            !target.to_string_lossy().contains("/state/"),
            "leaked {}",
            target.display()
        );
    }
    kill(Pid::from_raw(grandchild), Signal::SIGKILL).unwrap();
}

#[test]
fn an_interactive_command_can_read_the_terminal() {
    // In the foreground of a terminal, the command's own process group must be handed the
    // terminal, or its first read would stop it (SIGTTIN) and the run would hang.
    let env = Scene::file();
    let inner = format!(
        "{} --backend {} --name tty -- sh -c 'read line; echo got $line'",
        BIN,
        env.url()
    );
    let mut script = std::process::Command::new("script");
    scrub(&mut script);
    script
        .args(["-qec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::piped());
    let mut run = Proc::spawn(&mut script);
    let mut stdin = run.take_stdin().expect("a pipe to script(1)");
    stdin.write_all(b"typed\n").unwrap();
    let out = run.wait(Duration::from_secs(10));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("got typed"),
        "{}",
        text(&out.stdout)
    );
}

/// Starts a holder of NAME whose command runs `script`, which leaves a descendant that writes
/// its pid to `NAME.pid`; then breaks the lease by removing the lock file. lockrun must exit 76;
/// returns the descendant's pid.
fn lose_lease_while(env: &Scene, name: &str, script: &str) -> i32 {
    let mut run = env.spawn([
        "--name",
        name,
        "--ttl",
        "900ms",
        "--kill-after",
        "200ms",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let descendant = number_in(&env.path(&format!("{name}.pid"))) as i32;
    std::fs::remove_file(env.state().join(format!("{name}.lock"))).unwrap();
    let out = run.wait(Duration::from_secs(10));
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    descendant
}

#[test]
fn a_lost_lease_stops_descendants_that_left_the_process_group() {
    let env = Scene::file();
    // A daemon in a session of its own, deaf to TERM: only lockrun's subreaper sweep reaches it.
    let script = "setsid sh -c 'trap \"\" TERM; echo $$ > daemon.pid; \
                  while :; do sleep 0.05; done' >/dev/null 2>&1 &
                  while :; do sleep 0.05; done";
    let daemon = lose_lease_while(&env, "daemon", script);
    assert_gone_within(
        Duration::from_secs(5),
        "the daemon",
        daemon,
        "the lost lease",
    );
}

#[test]
fn a_lost_lease_kills_group_members_that_ignore_term_after_the_leader_exits() {
    let env = Scene::file();
    // The leader dies of TERM at once; its background sibling ignores TERM.
    let script = "sh -c 'trap \"\" TERM; echo $$ > stubborn.pid; \
                  while :; do sleep 0.05; done' >/dev/null 2>&1 &
                  exec sleep 30";
    let stubborn = lose_lease_while(&env, "stubborn", script);
    assert!(
        !alive(stubborn),
        "a group member outlived lockrun after a lost lease"
    );
}

#[test]
fn after_a_normal_exit_background_descendants_keep_running_without_the_lock() {
    let env = Scene::file();
    let pid_file = env.path("daemon.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {p}; exec sleep 30' >/dev/null 2>&1 & \
         while [ ! -s {p} ]; do sleep 0.01; done",
        p = pid_file.display()
    );
    let out = env.run(["--name", "leave", "--", "sh", "-c", &script]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let daemon = number_in(&pid_file) as i32;
    assert!(
        alive(daemon),
        "a normal exit must not kill what the command left running"
    );
    assert_eq!(
        code(&env.run(["--name", "leave", "--no-wait", "--", "true"])),
        0
    );
    kill(Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
}

/// Guards against start-up failures that blame the wrong thing: a script whose `#!` interpreter
/// is missing names the interpreter; a shell builtin or a whole command line in one word points
/// at `sh -c`. Each exits 127 with one line, and the lock is given back.
#[test]
fn a_command_that_cannot_start_says_why() {
    let env = Scene::file();
    let script = env.path("orphan.sh");
    std::fs::write(&script, "#!/usr/bin/no-such-interpreter\necho hi\n").unwrap();
    chmod(&script, 0o755);
    for (command, needle) in [
        (script.to_str().unwrap(), "/usr/bin/no-such-interpreter"),
        ("cd", "sh -c"),
        ("echo hi", "sh -c"),
    ] {
        assert_one_line(&env.run(["--name", "x", "--", command]), 127, needle);
    }
    assert_eq!(env.status("x")["held"], false);
}

/// Guards against what the parent-death signal cannot cover (invariant 8): a command that
/// exec'd a setuid program (the kernel clears the signal then) and a descendant that left the
/// command's group, both under a lockrun that is SIGKILLed — here as a user who cannot make a
/// cgroup, so the watchdog must work from what lockrun told it.
#[test]
fn a_killed_lockrun_takes_setuid_commands_and_escapees_with_it() {
    let Some(dir) = tools::dir_for_another_user(0o777) else {
        return;
    };
    let suid_sleep = dir.path().join("suid-sleep");
    std::fs::copy("/bin/sleep", &suid_sleep).unwrap();
    chmod(&suid_sleep, 0o4755);
    let script = format!(
        "{} 60 & echo $! > setuid.pid; setsid sleep 61 & echo $! > escapee.pid; \
         echo $$ > command.pid; wait",
        suid_sleep.display()
    );
    let mut cmd = tools::as_user(tools::NOBODY);
    cmd.arg(BIN)
        .arg("--backend")
        .arg(format!("file://{}/state", dir.path().display()))
        .args(["--name", "w", "--", "sh", "-c", &script])
        .current_dir(dir.path());
    scrub(&mut cmd);
    let mut run = Proc::spawn(&mut cmd);
    let read = |file: &str| -> i32 {
        wait_for_file(&dir.path().join(file), SOON)
            .trim()
            .parse()
            .unwrap()
    };
    let (setuid, escapee, command) = (read("setuid.pid"), read("escapee.pid"), read("command.pid"));
    // The setuid program really runs as root, so the kernel did clear its parent-death signal.
    assert!(
        wait_until(SOON, || {
            std::fs::read_to_string(format!("/proc/{setuid}/status")).is_ok_and(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
            })
        }),
        "the setuid copy of sleep does not run as root (a nosuid mount?)"
    );
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    for (what, pid) in [
        ("the command", command),
        ("the setuid program", setuid),
        ("the escapee", escapee),
    ] {
        assert_gone_within(Duration::from_secs(2), what, pid, "the killed lockrun");
    }
}

/// Guards the fallback for a watchdog that cannot start (invariant 8): when the kernel refuses
/// the watchdog's fork, lockrun says so, runs the command anyway, and gives it a parent-death
/// signal instead, so a SIGKILL of lockrun still ends the command. The refusal is real: a seccomp
/// filter on lockrun fails every `clone` that does not share memory (the watchdog's fork) with
/// EAGAIN, while the command's own start (`CLONE_VM`) and threads (`clone3`) go through.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn a_lockrun_whose_watchdog_cannot_start_still_takes_the_command_with_it() {
    refused_watchdog(false);
}

/// The same for a lockrun that waited: the fork refused while it waits in line is tried again
/// when the command starts, and the warning comes once.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn a_waiter_whose_watchdog_cannot_start_still_takes_the_command_with_it() {
    refused_watchdog(true);
}

/// A lockrun refused forks runs a command, after waiting behind a holder if `waits`;
/// then it is SIGKILLed, and the command must go with it.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn refused_watchdog(waits: bool) {
    use std::os::unix::process::CommandExt;
    let env = Scene::file();
    let mut holder = waits.then(|| env.hold("nw", "h", &[]));
    // The command must not fork either, under the same filter: `echo` is built in, `exec` replaces.
    let script = "echo $$ > command.pid; exec sleep 30";
    let mut cmd = env.cmd(["--name", "nw", "--wait", "60s", "--", "sh", "-c", script]);
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe { cmd.pre_exec(|| refuse_clones(Clones::Forks)) };
    let mut run = Proc::spawn(&mut cmd);
    if let Some(holder) = &mut holder {
        env.wait_waiters("nw", 1);
        assert_eq!(code(&holder.finish()), 0);
    }
    let command = number_in(&env.path("command.pid")) as i32;
    let _guard = scopeguard(command);
    assert!(
        wait_until(SOON, || run
            .stderr_so_far()
            .contains("cannot start the watchdog")),
        "the refused watchdog went unsaid: {}",
        run.stderr_so_far()
    );
    let said = run.stderr_so_far();
    assert_eq!(
        said.matches("cannot start the watchdog").count(),
        1,
        "{said}"
    );
    assert!(alive(command));
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    assert_gone_within(Duration::from_secs(5), "the command", command, "lockrun");
}

/// Guards against a command left running on a lease nobody renews (issue 10 item 5): without the
/// terminal, SIGTSTP to lockrun stops the command while lockrun keeps renewing (here for longer
/// than the lease), and SIGCONT continues it; the run ends normally.
#[test]
fn job_control_without_a_terminal_pauses_the_command_and_keeps_the_lease() {
    let fx = RedisServer::start();
    let s = Scene::new(fx.url());
    let script = "echo $$ > command.pid; i=0; while [ $i -lt 30 ]; do i=$((i+1)); \
                  echo tick >> ticks; sleep 0.1; done";
    let mut run = s.spawn([
        "-v", "--name", "tstp", "--ttl", "1s", "--", "sh", "-c", script,
    ]);
    let command = number_in(&s.path("command.pid")) as i32;
    assert!(wait_until(SOON, || s.path("ticks").exists()));
    run.signal(Signal::SIGTSTP);
    assert!(
        wait_until(SOON, || group_stopped(command)),
        "the command was not stopped; lockrun said: {}",
        run.stderr_so_far()
    );
    let ticks = || {
        std::fs::read_to_string(s.path("ticks"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let stopped_at = ticks();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(proc_state(run.pid()) != Some('T'), "lockrun stopped itself");
    assert!(ticks() <= stopped_at + 1, "the command ran while stopped");
    run.signal(Signal::SIGCONT);
    let out = run.wait(Duration::from_secs(10));
    assert_eq!(
        code(&out),
        0,
        "the lease was not kept: {}",
        text(&out.stderr)
    );
    assert_eq!(ticks(), 30);
}

/// Guards against zombies piling up under lockrun while a long command runs: a process the
/// command left behind is reparented to lockrun (its subreaper), and when it exits lockrun hears
/// SIGCHLD and reaps it at once, not when the command ends.
#[test]
fn an_orphan_that_exits_while_the_command_runs_is_reaped_at_once() {
    let s = Scene::file();
    let script = "(sleep 1 & echo $! > orphan.pid); sleep 30";
    let mut run = s.spawn(["--name", "orphans", "--", "sh", "-c", script]);
    let orphan: i32 = wait_for_file(&s.path("orphan.pid"), SOON)
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(SOON, || children_of(run.pid()).contains(&orphan)),
        "the orphan was not reparented to lockrun"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !children_of(run.pid())
            .contains(&orphan)),
        "the orphan stayed lockrun's child (state {:?})",
        proc_state(orphan)
    );
    assert!(alive(run.pid()), "lockrun ended early");
    run.signal(Signal::SIGTERM);
    run.wait(Duration::from_secs(10));
}

/// Whether the process group `group` is stopped: something in it is stopped (`T`) and nothing
/// in it can run. A shell caught in `vfork` waits in `D` for its stopped child, with every signal
/// blocked until the child execs — stopped in effect, though its own state is not `T`.
fn group_stopped(group: i32) -> bool {
    let states: Vec<char> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let fields = stat_fields(&entry.path().join("stat"))?;
            let state = fields.first()?.chars().next()?;
            let pgrp: i32 = fields.get(2)?.parse().ok()?;
            (pgrp == group).then_some(state)
        })
        .collect();
    states.contains(&'T') && states.iter().all(|state| matches!(state, 'T' | 'D'))
}

/// A process's state letter, from `/proc/PID/stat`.
fn proc_state(pid: i32) -> Option<char> {
    stat_fields(Path::new(&format!("/proc/{pid}/stat")))?
        .first()?
        .chars()
        .next()
}

/// The fields of a `/proc/PID/stat` file after the command's name (which may hold spaces and
/// parentheses): the state, field 3, first.
fn stat_fields(stat_file: &Path) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(stat_file).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// Whether lockrun's `-vv` says this system gives the command no cgroup (no cgroup v2, no
/// permission), which the cgroup tests then cannot check.
fn no_cgroup_here(stderr: &str) -> bool {
    stderr.contains("no cgroup for the command")
}

/// The cgroup of the command's own, as lockrun's `-vv` reports it.
fn adopted_into(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("the command runs in the cgroup ")
                .map(|(_, d)| d)
        })
        .map(|dir| dir.trim().to_owned())
}

fn cgroup_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .unwrap_or_default()
}

/// Guards the cgroup a long command runs in (invariant 8): a command still running after half a
/// second is moved, with what it started, into a cgroup of its own that what it forks later
/// inherits; a short one never pays for the move. After a normal end the cgroup is gone and what
/// the command left running is back where lockrun runs, still running.
#[test]
fn a_long_command_runs_in_a_cgroup_of_its_own_that_goes_with_it() {
    let env = Scene::file();
    let short = env.run(["-vv", "--name", "c", "--", "true"]);
    assert_eq!(code(&short), 0);
    assert!(
        adopted_into(&text(&short.stderr)).is_none(),
        "a short command was moved: {}",
        text(&short.stderr)
    );
    let script = "setsid sleep 30 >/dev/null 2>&1 & echo $! > bg; sleep 1.2; \
                  cat /proc/self/cgroup > later; cat /proc/$(cat bg)/cgroup > escapee";
    let out = env.run(["-vv", "--name", "c", "--", "sh", "-c", script]);
    let background: i32 = number_in(&env.path("bg")) as i32;
    let guard = scopeguard(background);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    if no_cgroup_here(&text(&out.stderr)) {
        eprintln!("no cgroup on this system; skipped");
        return;
    }
    let dir = adopted_into(&text(&out.stderr)).expect("the long command was not moved");
    let name = std::path::Path::new(&dir)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for file in ["later", "escapee"] {
        let seen = std::fs::read_to_string(env.path(file)).unwrap();
        assert!(
            seen.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&name)),
            "{file} was not in {name}: {seen}"
        );
    }
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} was left behind"
    );
    assert!(
        alive(background),
        "the background process did not keep running"
    );
    assert!(
        !cgroup_of(background).ends_with(&name),
        "the background process stayed in the removed cgroup"
    );
    drop(guard);
}

/// Kills the left-running background process of a test when the test ends, however it ends.
fn scopeguard(pid: i32) -> impl Drop {
    struct Killer(i32);
    impl Drop for Killer {
        fn drop(&mut self) {
            let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
    Killer(pid)
}

/// Guards the gap a look at the process tree leaves (invariant 8): a descendant of a long command
/// that forks a new session the very moment lockrun is SIGKILLed — too late for any look — dies
/// with the rest, because the command's cgroup is killed as a whole.
#[test]
fn what_a_long_command_forks_as_lockrun_dies_dies_too() {
    let env = Scene::file();
    let script = "sleep 1.2; setsid sh -c 'while kill -0 $0 2>/dev/null; do :; done; \
                  setsid sleep 62 >/dev/null 2>&1 & echo $! > late; sleep 63' $PPID \
                  >/dev/null 2>&1 & echo $! > spinner; echo ready > ready; wait";
    let mut run = env.spawn(["-vv", "--name", "k", "--", "sh", "-c", script]);
    wait_for_file(&env.path("ready"), SOON);
    let spinner = number_in(&env.path("spinner")) as i32;
    let _guard = scopeguard(spinner);
    if no_cgroup_here(&run.stderr_so_far()) {
        run.signal(Signal::SIGTERM);
        run.wait(SOON);
        eprintln!("no cgroup on this system; skipped");
        return;
    }
    assert!(
        adopted_into(&run.stderr_so_far()).is_some(),
        "the long command was not moved: {}",
        run.stderr_so_far()
    );
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    assert_gone_within(Duration::from_secs(2), "the spinner", spinner, "lockrun");
    if let Ok(late) = std::fs::read_to_string(env.path("late")) {
        let late: i32 = late.trim().parse().unwrap();
        let _late_guard = scopeguard(late);
        let what = "what the spinner forked as lockrun died";
        assert_gone_within(Duration::from_secs(2), what, late, "lockrun");
    }
}

/// Guards the watchdog against the usual way a job runner ends a job (invariant 8): SIGKILL to
/// lockrun's whole process group, which is not the command's. The watchdog lives in a session of
/// its own, so it survives and stops the command, its child and a descendant that left its group
/// at once — which a parent-death signal alone could not.
#[test]
fn killing_lockruns_process_group_stops_the_command_tree_too() {
    use std::os::unix::process::CommandExt;
    let env = Scene::file();
    let script = "sleep 60 & echo $! > child; setsid sleep 61 >/dev/null 2>&1 & echo $! > escapee; \
                  echo $$ > command.pid; wait";
    let mut cmd = env.cmd(["--name", "g", "--", "sh", "-c", script]);
    cmd.process_group(0);
    let mut run = Proc::spawn(&mut cmd);
    let pids: Vec<(&str, i32)> = ["command.pid", "child", "escapee"]
        .into_iter()
        .map(|file| (file, number_in(&env.path(file)) as i32))
        .collect();
    let guards: Vec<_> = pids.iter().map(|(_, pid)| scopeguard(*pid)).collect();
    kill(Pid::from_raw(-run.pid()), Signal::SIGKILL).unwrap();
    run.wait(SOON);
    for (what, pid) in &pids {
        assert!(
            wait_until(Duration::from_secs(2), || !alive(*pid)),
            "{what} (pid {pid}) outlived the killed process group"
        );
    }
    drop(guards);
}

/// The watchdog lockrun forks while it waits in line (so that the fork is not between the lock
/// being won and the command starting): it is already there during the wait, keeps no file of
/// the state directory (a copy of the lock file's descriptor would keep the lock past lockrun)
/// but the waiter's inotify instance, and, once the lock is won, stops the command's whole tree when lockrun is SIGKILLed (invariant
/// 8).
#[test]
fn a_watchdog_forked_while_waiting_takes_the_command_tree_when_lockrun_dies() {
    let env = Scene::file();
    let mut holder = env.hold("early", "h", &[]);
    let script = "sleep 60 & echo $! > background.pid; echo $$ > command.pid; wait";
    let mut run = env.waiter("early", &[], script);
    env.wait_waiters("early", 1);
    let watchdog = watchdog_under(run.pid());
    let state = std::fs::canonicalize(env.state()).unwrap();
    let mut inotify = false;
    for fd in std::fs::read_dir(format!("/proc/{watchdog}/fd")).unwrap() {
        let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert!(
            !target.starts_with(&state),
            "the watchdog keeps {} open",
            target.display()
        );
        inotify |= target.as_os_str() == "anon_inode:inotify";
    }
    // The waiter's inotify instance, whose last close (a kernel grace period of 10-20 ms) is the
    // watchdog's to make, not lockrun's as it exits.
    assert!(
        inotify,
        "the watchdog does not keep the waiter's inotify instance"
    );
    holder.finish();
    let command = number_in(&env.path("command.pid")) as i32;
    let background = number_in(&env.path("background.pid")) as i32;
    let guard = (scopeguard(command), scopeguard(background));
    assert_eq!(
        watchdog_of(run.pid()),
        Some(watchdog),
        "the command got another watchdog than the one forked while waiting"
    );
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    for (what, pid) in [("the command", command), ("its child", background)] {
        assert_gone_within(Duration::from_secs(2), what, pid, "the killed lockrun");
    }
    drop(guard);
}

/// A waiter's watchdog has nothing to stop: when the wait ends without the lock (`--wait` ran
/// out, or the waiter is SIGKILLed) it goes too, and the holder's command runs on untouched.
#[test]
fn a_waiters_watchdog_goes_with_the_wait_and_touches_nothing() {
    let env = Scene::file();
    let mut holder = env.hold("stand", "h", &[]);
    let mut given_up = env.spawn(["--name", "stand", "--wait", "1s", "--", "true"]);
    let killed = env.waiter("stand", &[], "true");
    env.wait_waiters("stand", 2);
    let (given_up_watchdog, killed_watchdog) =
        (watchdog_under(given_up.pid()), watchdog_under(killed.pid()));
    killed.signal(Signal::SIGKILL);
    assert_gone_within(
        Duration::from_secs(2),
        "the killed waiter's watchdog",
        killed_watchdog,
        "its lockrun",
    );
    let out = given_up.wait(Duration::from_secs(10));
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert_gone_within(
        Duration::from_secs(2),
        "the watchdog of the waiter that gave up",
        given_up_watchdog,
        "its lockrun",
    );
    assert!(holder.command_alive(), "a waiter's watchdog hit the holder");
    assert_eq!(code(&holder.finish()), 0);
}

/// The watchdog is batch-scheduled: woken by a message (the disarm, right after a release), it
/// never preempts the process that wrote it, so its exit never stands between the release and the
/// next holder.
#[test]
fn the_watchdog_never_preempts_the_process_that_wakes_it() {
    const SCHED_BATCH: u32 = 3;
    let env = Scene::file();
    let mut run = env.spawn(["--name", "batch", "--", "sleep", "60"]);
    let watchdog = watchdog_under(run.pid());
    // Field 41 of /proc/PID/stat, the scheduling policy.
    let policy = || {
        stat_fields(Path::new(&format!("/proc/{watchdog}/stat")))?
            .get(41 - 3)?
            .parse::<u32>()
            .ok()
    };
    assert!(
        wait_until(SOON, || policy() == Some(SCHED_BATCH)),
        "the watchdog's scheduling policy is {:?}, not batch",
        policy()
    );
    run.signal(Signal::SIGTERM);
    assert_eq!(code(&run.wait(SOON)), 143);
}

/// The watchdog under `lockrun`, if it has one.
fn watchdog_of(lockrun: i32) -> Option<i32> {
    children_of(lockrun).into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|name| name.trim_end() == "lockrun-watch")
    })
}

/// The watchdog under `lockrun`, once there is one; fails the test if none comes.
fn watchdog_under(lockrun: i32) -> i32 {
    let mut watchdog = None;
    let found = wait_until(SOON, || {
        watchdog = watchdog_of(lockrun);
        watchdog.is_some()
    });
    assert!(found, "no watchdog under lockrun (pid {lockrun})");
    watchdog.unwrap()
}

/// Guards the watchdog against stray signals (invariant 8): it keeps every signal blocked, so
/// signals whose default is to end or stop a process (which a forked watchdog that only ignored a
/// list of them died of: SIGALRM, SIGXCPU, SIGPROF) leave it watching, and a SIGKILL of lockrun
/// afterwards still stops the command.
#[test]
fn stray_signals_leave_the_watchdog_watching() {
    let env = Scene::file();
    let mut run = env.spawn([
        "--name",
        "stray",
        "--",
        "sh",
        "-c",
        "echo $$ > command.pid; exec sleep 60",
    ]);
    let command = number_in(&env.path("command.pid")) as i32;
    let guard = scopeguard(command);
    let watchdog = Pid::from_raw(watchdog_under(run.pid()));
    for signal in [
        Signal::SIGALRM,
        Signal::SIGXCPU,
        Signal::SIGPROF,
        Signal::SIGVTALRM,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGTSTP,
    ] {
        kill(watchdog, signal).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        alive(watchdog.as_raw()),
        "a stray signal ended the watchdog"
    );
    run.signal(Signal::SIGKILL);
    run.wait(SOON);
    assert_gone_within(
        Duration::from_secs(2),
        "the command",
        command,
        "the killed lockrun",
    );
    drop(guard);
}

/// Guards `nohup lockrun ...` (and `trap '' TERM`, and a script's background job): a forwarded
/// signal that lockrun was started with ignored stays ignored, by lockrun and by the command, as
/// across any exec. Before, lockrun caught it, forwarded it, and the command, reset to the
/// default, died of it.
#[test]
fn a_signal_ignored_on_entry_stays_ignored_for_lockrun_and_the_command() {
    use std::os::unix::process::CommandExt;
    let env = Scene::file();
    let script = "grep SigIgn /proc/self/status > ignored; echo $$ > command.pid; sleep 1";
    let mut cmd = env.cmd(["--name", "nohup", "--", "sh", "-c", script]);
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            Ok(())
        })
    };
    let mut run = Proc::spawn(&mut cmd);
    wait_for_file(&env.path("command.pid"), SOON);
    run.signal(Signal::SIGHUP);
    run.signal(Signal::SIGTERM);
    let out = run.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let mask = text(&std::fs::read(env.path("ignored")).unwrap());
    let bits = u64::from_str_radix(mask.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    for signal in [libc::SIGHUP, libc::SIGTERM] {
        assert!(
            bits & (1 << (signal - 1)) != 0,
            "signal {signal} not ignored: {mask}"
        );
    }
}

/// Guards against a lockrun made deaf by its parent: signals blocked in the inherited mask are
/// unblocked, so a TERM still ends a waiter (invariant 10) and reaches a holder's command.
#[test]
fn a_blocked_signal_mask_on_entry_does_not_make_lockrun_deaf() {
    use std::os::unix::process::CommandExt;
    let env = Scene::file();
    let block_all = || {
        let mut all = nix::sys::signal::SigSet::all();
        all.remove(Signal::SIGKILL);
        all.remove(Signal::SIGSTOP);
        all.thread_block().map_err(std::io::Error::from)
    };
    let mut holder = env.cmd([
        "--name",
        "deaf",
        "--",
        "sh",
        "-c",
        "echo $$ > command.pid; sleep 30",
    ]);
    // SAFETY: sigprocmask is async-signal-safe.
    unsafe { holder.pre_exec(block_all) };
    let mut holding = Proc::spawn(&mut holder);
    wait_for_file(&env.path("command.pid"), SOON);
    let mut waiter = env.cmd(["--name", "deaf", "--", "touch", "waiter-ran"]);
    // SAFETY: as above.
    unsafe { waiter.pre_exec(block_all) };
    let mut waiting = Proc::spawn(&mut waiter);
    env.wait_waiters("deaf", 1);
    waiting.signal(Signal::SIGTERM);
    let out = waiting.wait(SOON);
    assert_eq!(code(&out), 128 + 15, "{}", text(&out.stderr));
    holding.signal(Signal::SIGTERM);
    let out = holding.wait(SOON);
    assert_eq!(code(&out), 128 + 15, "{}", text(&out.stderr));
    assert!(!env.path("waiter-ran").exists());
}
