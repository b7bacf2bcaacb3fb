//! What only the embedded `file://` backend has: its files (the fencing counter's reservation,
//! names turned into file names), and a state directory that must be private to be trusted.
//! Everything it shares with the other backends is in the conformance suite.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::asserts::{assert_ended_without_running, assert_one_line};
use crate::support::holder::Holder;
use crate::support::lockrun::{BIN, Proc, lockrun, output, scrub, stderr_of_exited};
use crate::support::scene::Scene;
use crate::support::tools::{self, chmod};
use crate::support::wait::{SOON, code, numbers_in, text, wait_until};

#[test]
fn the_fencing_counter_survives_a_reboot_and_a_corrupt_one_runs_nothing() {
    let env = Scene::file();
    let token = |env: &Scene| -> u64 {
        let out = env.run(["--name", "c", "--", "sh", "-c", "echo $FENCING_TOKEN"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        text(&out.stdout).trim().parse().unwrap()
    };
    let before = token(&env);
    // The flushed reservation covers every token issued.
    let fence = env.state().join("c.fence");
    let reserved: u64 = std::fs::read_to_string(&fence)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(reserved >= before, "reserved {reserved} < issued {before}");
    // A reboot: the unflushed record of the last token is from another boot, or lost.
    std::fs::remove_file(env.state().join("c.fence-hot")).unwrap();
    let after = token(&env);
    assert!(
        after > reserved,
        "token {after} after a reboot does not exceed {reserved}"
    );

    std::fs::write(&fence, "garbage").unwrap();
    env.refuses(env.url(), "c", 69, "corrupt");
}

#[test]
fn names_stay_inside_the_state_directory() {
    let env = Scene::file();
    assert_eq!(code(&env.run(["--name", "a/b:c", "--", "true"])), 0);
    let mut files: Vec<String> = std::fs::read_dir(env.state())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["a%b:c.fence", "a%b:c.fence-hot", "a%b:c.lock"]);
    let mode = std::fs::metadata(env.state()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the state directory is private");
}

/// `file:///DIR` is a URL: `%20` in it is a space, `%25` a percent sign, and the drill's holders,
/// which get the URL from lockrun, lock in the same directory.
#[test]
fn a_percent_encoded_directory_is_the_decoded_one() {
    let scratch = Scene::file();
    let decoded = scratch.path("a b%");
    let env = Scene::new(format!("file://{}/a%20b%25", scratch.dir().display()));
    assert_eq!(code(&env.run(["--name", "x", "--", "true"])), 0);
    assert!(
        decoded.join("x.lock").exists(),
        "no lock file in {decoded:?}"
    );
    let out = env.run(["drill", "--ttl", "300ms"]);
    assert_eq!(code(&out), 0, "{}{}", text(&out.stdout), text(&out.stderr));
    let entries: Vec<_> = std::fs::read_dir(scratch.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["a b%"], "only the decoded directory was made");
}

#[test]
fn a_state_directory_that_is_a_file_is_refused_saying_so() {
    let env = Scene::file();
    std::fs::write(env.state(), "not a directory").unwrap();
    let said = env.refuses(env.url(), "x", 69, "exists and is not a directory");
    assert!(said.contains(&env.state().display().to_string()), "{said}");
}

/// Guards against a hang: a FIFO planted under a lock file's name blocked lockrun's open until a
/// writer came, and SIGTERM did not end it (the open restarts after the handler).
#[test]
fn a_fifo_planted_as_a_lock_file_is_refused_at_once() {
    let env = Scene::file();
    std::fs::create_dir_all(env.state()).unwrap();
    for file in ["fifo.lock", "fifo.fence"] {
        let path = env.state().join(file);
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        env.refuses(env.url(), "fifo", 69, "not a regular file");
        // The inspections end too (a hang would run out the run's time limit), whatever they make
        // of it.
        for args in [&["status", "fifo"][..], &["list"]] {
            let out = env.run(args);
            let stderr = text(&out.stderr);
            assert!(
                matches!(code(&out), 0 | 69),
                "{args:?} with {file}: {stderr}"
            );
            assert!(
                stderr.lines().count() <= 1,
                "{args:?} with {file}: {stderr}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

/// A lock file removed under its holder (a temp-dir cleaner) lets another run lock a new file of
/// the same name: the holder notices within a moment, not at its next renewal (here 20 s away),
/// and stops its command; a command that ends right after the removal, before any look, still
/// ends its run with 76, as its release finds the file gone.
#[test]
fn a_lock_file_removed_under_its_holder_ends_the_run_as_a_lost_lease() {
    let env = Scene::file();
    let lock_file = env.state().join("tmp.lock");
    let holding = |script: &str| {
        let mut cmd = env.cmd(["--name", "tmp", "--ttl", "60s", "--", "sh", "-c", script]);
        Proc::spawn(&mut cmd)
    };
    let mut run = holding("echo up > ready; sleep 30");
    crate::support::wait::wait_for_file(&env.path("ready"), Duration::from_secs(10));
    let removed = std::time::Instant::now();
    std::fs::remove_file(&lock_file).unwrap();
    let out = run.wait(Duration::from_secs(10));
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(
        removed.elapsed() < Duration::from_secs(5),
        "noticed only after {:?}",
        removed.elapsed()
    );

    let out = holding(&format!("rm {}", lock_file.display())).wait(Duration::from_secs(10));
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
}

#[test]
fn a_symlink_planted_as_a_lock_file_is_refused() {
    let env = Scene::file();
    std::fs::create_dir_all(env.state()).unwrap();
    let target = env.path("victim");
    std::fs::write(&target, "precious").unwrap();
    std::os::unix::fs::symlink(&target, env.state().join("evil.lock")).unwrap();
    let out = env.run(["--name", "evil", "--", "true"]);
    assert_one_line(&out, 69, "evil.lock is a symbolic link");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    // A dangling one is named as a link too, not as a loop of links.
    std::os::unix::fs::symlink(env.path("nowhere"), env.state().join("dangling.lock")).unwrap();
    let out = env.run(["--name", "dangling", "--", "true"]);
    assert_one_line(&out, 69, "dangling.lock is a symbolic link");
}

#[test]
fn a_new_user_with_an_empty_home_gets_a_private_state_directory() {
    // As a normal user the default is the user's own home; the test needs to become another.
    let Some(home) = tools::dir_for_another_user(0o755) else {
        return;
    };
    let nobody = tools::NOBODY;
    nix::unistd::chown(home.path(), Some(nobody.into()), Some(nobody.into())).unwrap();
    let out = output(
        tools::as_user(tools::NOBODY)
            .arg(BIN)
            .args(["--name", "demo", "--", "sh", "-c", "echo $FENCING_TOKEN"])
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/bin:/bin"),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n");
    let state = home.path().join(".local/state/lockrun");
    assert!(state.join("demo.lock").exists());
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

/// A non-root user whose `HOME` is relative has no default state directory: the run is refused
/// (64) saying that `HOME` is the problem, not told to set a variable that is set.
#[test]
fn a_relative_home_is_named_as_the_reason_there_is_no_state_directory() {
    if !tools::root() {
        return;
    }
    let scratch = Scene::file();
    let out = output(
        tools::as_user(tools::NOBODY)
            .arg(BIN)
            .args(["--name", "demo", "--", "touch"])
            .arg(scratch.path("ran"))
            .env_clear()
            .env("HOME", "relative/home")
            .env("PATH", "/usr/bin:/bin"),
    );
    let said = assert_one_line(&out, 64, "HOME is \"relative/home\", not an absolute path");
    assert!(!said.contains("set HOME or"), "{said}");
    assert!(!scratch.path("ran").exists());
}

#[test]
fn a_world_writable_state_directory_is_refused_unless_sticky() {
    let env = Scene::file();
    std::fs::create_dir_all(env.state()).unwrap();
    chmod(env.state(), 0o777);
    env.refuses(env.url(), "x", 69, "world-writable");

    // With the sticky bit, others cannot replace our files: that is a usable shared directory.
    chmod(env.state(), 0o1777);
    let out = env.run(["--name", "x", "--", "touch", "ran"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(env.path("ran").exists());
}

#[test]
fn a_state_directory_another_user_owns_is_refused_even_through_a_symlink() {
    // Giving the directory to another user needs root.
    if !tools::root() {
        return;
    }
    let env = Scene::file();
    std::fs::create_dir_all(env.state()).unwrap();
    nix::unistd::chown(&env.state(), Some(tools::NOBODY.into()), None).unwrap();
    let link = env.path("link");
    std::os::unix::fs::symlink(env.state(), &link).unwrap();
    let url = format!("file://{}", link.display());
    env.refuses(&url, "x", 69, "owned by uid 65534");
}

/// Guards against `--limit 1024`, the documented maximum, failing with "too many open files"
/// under a small descriptor limit (slot files are tried one at a time).
#[test]
fn the_largest_limit_fits_under_a_small_descriptor_limit() {
    let env = Scene::file();
    let script = format!(
        "ulimit -n 64 && exec {BIN} --backend {} --name big --limit 1024 -- sh -c 'echo $LOCKRUN_SLOT'",
        env.url()
    );
    let out = output(std::process::Command::new("sh").args(["-c", &script]));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "0\n");
}

/// Guards against a state directory shared by a group (root and a common group, mode 2770)
/// that a second user cannot use under the usual umask 022: files are made group-writable.
#[test]
fn a_group_shared_state_directory_works_for_every_member_under_umask_022() {
    let Some(top) = tools::dir_for_another_user(0o755) else {
        return;
    };
    let state = top.path().join("shared");
    std::fs::create_dir(&state).unwrap();
    nix::unistd::chown(&state, Some(0.into()), Some(tools::NOBODY.into())).unwrap();
    chmod(&state, 0o2770);
    let url = format!("file://{}", state.display());
    let run_as = |uid: u32, args: &[&str]| {
        let script = format!("umask 022 && exec {BIN} --backend {url} {}", args.join(" "));
        let mut cmd = tools::as_user(uid);
        cmd.args(["sh", "-c", &script]);
        scrub(&mut cmd);
        output(&mut cmd)
    };
    for uid in [0, tools::NOBODY, 0] {
        for mode in ["", "--shared"] {
            let out = run_as(uid, &["--name", "g", mode, "--", "true"]);
            assert_eq!(code(&out), 0, "as uid {uid} {mode}: {}", text(&out.stderr));
        }
    }
}

/// Guards against a waiter woken by a release that finds the lock still held and sleeps until
/// its one-second re-check (issue 10 item 7): 200 handoffs with both sides pinned to one CPU,
/// none slow.
#[test]
fn handoffs_under_cpu_contention_have_no_slow_outlier() {
    let env = Scene::file();
    let worker = |tag: &str| {
        let script = format!(
            "for i in $(seq 100); do s=$(date +%s%N); \
             {BIN} --backend {} --name hand --wait 30s -- true || exit 1; \
             e=$(date +%s%N); echo $(( (e - s) / 1000000 )) >> {tag}.ms; done",
            env.url()
        );
        let mut cmd = std::process::Command::new("taskset");
        cmd.args(["-c", "0", "sh", "-c", &script])
            .current_dir(env.dir());
        scrub(&mut cmd);
        Proc::spawn(&mut cmd)
    };
    let mut workers = [worker("a"), worker("b")];
    for w in &mut workers {
        let out = w.wait(Duration::from_secs(120));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let mut times: Vec<u64> = ["a", "b"]
        .iter()
        .flat_map(|tag| numbers_in(&env.path(&format!("{tag}.ms"))))
        .collect();
    assert_eq!(times.len(), 200);
    times.sort();
    let slowest = *times.last().unwrap();
    assert!(slowest < 700, "a handoff took {slowest} ms: {times:?}");
}

/// Guards against waiters turned away for want of an inotify instance: a user has 128 by default
/// (`fs.inotify.max_user_instances`) and each waiter keeps one, so more waiters than that on one
/// host used to fail with "too many open files". They now wait without one, and every one of
/// them gets its turn.
#[test]
fn more_waiters_than_inotify_instances_all_get_their_turn() {
    let Some(top) = tools::dir_for_another_user(0o777) else {
        return;
    };
    // The budget is per user: one that no other test acts as.
    let uid = 61_234;
    let budget: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .expect("read fs.inotify.max_user_instances")
        .trim()
        .parse()
        .expect("a number");
    let waiters = budget + 20;
    let url = format!("file://{}/state", top.path().display());
    let run = |args: &str| {
        let script = format!("exec {BIN} --backend {url} --name many {args}");
        let mut cmd = tools::as_user(uid);
        cmd.args(["sh", "-c", &script]).current_dir(top.path());
        scrub(&mut cmd);
        cmd
    };
    let mut holder = Proc::spawn(&mut run(
        "-- sh -c ': > held; while [ ! -e go ]; do sleep 0.05; done'",
    ));
    assert!(
        wait_until(SOON, || top.path().join("held").exists()),
        "{}",
        holder.stderr_so_far()
    );
    let mut line: Vec<Proc> = (0..waiters)
        .map(|_| Proc::spawn(&mut run("--wait 120s -- sh -c 'echo x >> ran'")))
        .collect();
    // Every waiter is in line before the holder lets go.
    let status = || {
        let out = output(&mut run_status(&url, uid));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let queued = wait_until(Duration::from_secs(60), || {
        status()["waiters"] == serde_json::json!(waiters)
    });
    let early = stderr_of_exited(&mut line, 3);
    assert!(
        queued && early.is_empty(),
        "not all {waiters} waiters queued: {early:?}"
    );
    std::fs::write(top.path().join("go"), "").unwrap();
    assert_eq!(code(&holder.wait(SOON)), 0);
    for waiter in &mut line {
        let out = waiter.wait(Duration::from_secs(120));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let ran = std::fs::read_to_string(top.path().join("ran")).unwrap_or_default();
    assert_eq!(ran.lines().count(), waiters);
}

/// A waiter that gets its turn leaves the line just after its command has started (off the path
/// from the lock to the command), not when it ends: while the command runs, nobody is in line.
#[test]
fn a_waiter_that_got_its_turn_is_out_of_the_line_while_its_command_runs() {
    let env = Scene::file();
    let mut holder = env.hold("turn", "h", &[]);
    let started = env.path("w.started");
    let go_on = env.path("w.go-on");
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        go_on.display()
    );
    let mut waiter = env.waiter("turn", &[], &script);
    env.wait_waiters("turn", 1);
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        wait_until(SOON, || started.exists()),
        "the waiter's command never started"
    );
    // Its ticket file, not `status`: a ticket nobody beats for 3 s no longer counts as a waiter,
    // but its file stays until someone clears it.
    assert!(
        wait_until(SOON, || tickets_in_line(&env, "turn").is_empty()),
        "still in line while its command runs: {:?}",
        tickets_in_line(&env, "turn")
    );
    std::fs::write(&go_on, "").unwrap();
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// A waiter that gets its turn but whose command cannot start (not found: 127) leaves the line
/// as it gives the lock back: what it kept for after the start goes with the unused lease.
#[test]
fn a_waiter_whose_command_cannot_start_leaves_no_ticket_behind() {
    let env = Scene::file();
    let mut holder = env.hold("unrun", "h", &[]);
    let mut waiter = env.spawn([
        "--name",
        "unrun",
        "--wait",
        "60s",
        "--",
        "no-such-program-anywhere",
    ]);
    env.wait_waiters("unrun", 1);
    assert_eq!(code(&holder.finish()), 0);
    let out = waiter.wait(SOON);
    assert_eq!(code(&out), 127, "{}", text(&out.stderr));
    let left = tickets_in_line(&env, "unrun");
    assert!(left.is_empty(), "tickets left in line: {left:?}");
}

/// The ticket files in NAME's line directory, live or not.
fn tickets_in_line(env: &Scene, name: &str) -> Vec<String> {
    std::fs::read_dir(env.state().join(format!("{name}.line")))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|file| file.starts_with('T'))
        .collect()
}

/// `lockrun status many --json` as `uid`.
fn run_status(url: &str, uid: u32) -> std::process::Command {
    let mut cmd = tools::as_user(uid);
    cmd.args([BIN, "--backend", url, "status", "many", "--json"]);
    scrub(&mut cmd);
    cmd
}

/// Guards against the `--min-interval` look deciding a run it cannot judge: a look that fails
/// (here the name's interval record is a directory) neither skips the run nor ends it early; the
/// run waits its turn, and the claim made once it holds the name decides (and fails, naming the
/// record, exit 69).
#[test]
fn a_failed_min_interval_look_leaves_the_decision_to_the_claim() {
    let env = Scene::file();
    let mut holder = env.hold("cron", "h", &[]);
    std::fs::create_dir(env.state().join("cron.interval")).unwrap();
    let mut late = env.waiter("cron", &["--min-interval", "1h"], "touch ran");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !late.exited(),
        "the failed look ended the run: {}",
        late.stderr_so_far()
    );
    assert_eq!(code(&holder.finish()), 0);
    assert_ended_without_running(&env, &late.wait(SOON), 69, "cron.interval");
}

/// A claim that finds the name's record locked by another process (one paused mid-claim) waits
/// for it without going deaf: a signal still ends the run at once, before the command starts.
#[test]
fn a_claim_behind_a_locked_record_still_hears_its_signals() {
    let env = Scene::file();
    let first = env.run(["--name", "cron", "--min-interval", "1s", "--", "true"]);
    assert_eq!(code(&first), 0, "{}", text(&first.stderr));
    let _record = locked_state_file(&env, "cron.interval");
    let mut run = env.spawn([
        "-vv",
        "--name",
        "cron",
        "--min-interval",
        "1s",
        "--",
        "touch",
        "ran",
    ]);
    interrupted_once_it_says(&env, &mut run, "recording itself in cron.interval");
}

/// A waiter that finds the line's ticket counter held by another process (one paused while it
/// joined) tries again without going deaf: a signal still ends it at once.
#[test]
fn a_joiner_behind_a_held_ticket_counter_still_hears_its_signals() {
    let (_env, mut holder) = heard_behind_a_held_file("x.tickets", &[], "joining the line");
    assert_eq!(code(&holder.finish()), 0);
}

/// A waiter that cannot join the line (its ticket counter held by a paused process) still gives
/// up when its `--wait` runs out, with the busy status.
#[test]
fn a_joiner_behind_a_held_ticket_counter_gives_up_when_its_wait_runs_out() {
    let env = Scene::file();
    let mut holder = env.hold("x", "h", &[]);
    let counter = locked_state_file(&env, "x.tickets");
    let mut run = env.spawn(["--name", "x", "--wait", "1", "--", "touch", "ran"]);
    assert_ended_without_running(&env, &run.wait(SOON), 75, "busy");
    drop(counter);
    assert_eq!(code(&holder.finish()), 0);
}

/// A new holder that finds the name's token counter held by another holder (one paused while it
/// took its token, with `--limit`) tries again without going deaf: a signal still ends it at
/// once, before its command starts, and gives its slot back.
#[test]
fn a_holder_behind_a_held_token_counter_still_hears_its_signals() {
    let limit = ["--limit", "2"];
    let (env, mut first) = heard_behind_a_held_file("x.fence", &limit, "is taking its token");
    let second = env.run(["--name", "x", "--limit", "2", "--no-wait", "--", "true"]);
    assert_eq!(
        code(&second),
        0,
        "the slot was not given back: {}",
        text(&second.stderr)
    );
    assert_eq!(code(&first.finish()), 0);
}

/// A holder of `x` (with `options`), then a run of `x` (with `options` too) that finds the state
/// file `locked` locked, as a process paused while holding it would leave it: once the run says
/// `says` (`-vv`), a SIGTERM must end it at once, its command not run. The file is unlocked
/// again on return.
fn heard_behind_a_held_file(locked: &str, options: &[&str], says: &str) -> (Scene, Holder) {
    let env = Scene::file();
    let holder = env.hold("x", "h", options);
    let _file = locked_state_file(&env, locked);
    let mut run = env.spawn([&["-vv", "--name", "x"], options, &["--", "touch", "ran"]].concat());
    interrupted_once_it_says(&env, &mut run, says);
    (env, holder)
}

/// A run that found the name held looks at when it last ran without the record's lock: a look
/// that waited for it would hang (deaf to its signals) behind whoever holds it, and a looker
/// paused while holding it would keep the holder's own claim waiting.
#[test]
fn a_min_interval_look_does_not_wait_for_the_record_lock() {
    let env = Scene::file();
    let mut holder = env.hold("cron", "h", &["--min-interval", "1h"]);
    let record = locked_state_file(&env, "cron.interval");
    let mut late = env.waiter("cron", &["--min-interval", "1h"], "touch ran");
    assert_ended_without_running(&env, &late.wait(SOON), 75, "--min-interval");
    drop(record);
    assert_eq!(code(&holder.finish()), 0);
}

/// Once `run` (started with `-vv`) says `says`, a SIGTERM must end it with 143, its command not
/// run.
fn interrupted_once_it_says(env: &Scene, run: &mut Proc, says: &str) {
    assert!(
        wait_until(SOON, || run.stderr_so_far().contains(says)),
        "{}",
        run.stderr_so_far()
    );
    run.signal(Signal::SIGTERM);
    assert_ended_without_running(env, &run.wait(SOON), 128 + 15, "interrupted by SIGTERM");
}

/// The state file `name` (created if missing, its contents kept), locked by this test as a
/// process paused while holding it would leave it; unlocked when dropped.
fn locked_state_file(env: &Scene, name: &str) -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(env.state().join(name))
        .unwrap();
    file.lock().unwrap();
    file
}

/// Guards the wake-up of a waiter behind many slots: up to eight lock files are watched one by
/// one, more through the state directory (by name). Either way a holder letting go wakes the
/// waiter, far sooner than the 1 s re-check of one that slept: here with `--limit 9`.
#[test]
fn a_release_wakes_a_waiter_behind_more_slots_than_are_watched_one_by_one() {
    let env = Scene::file();
    let limit = ["--limit", "9"];
    let mut fastest = Duration::MAX;
    for round in 0..3 {
        let mut holders: Vec<Holder> = (0..9)
            .map(|i| env.hold("many", &format!("r{round}h{i}"), &limit))
            .collect();
        let started = env.path(&format!("w{round}.started"));
        let mut waiter = env.waiter("many", &limit, &format!("touch {}", started.display()));
        env.wait_waiters("many", 1);
        let out = holders[4].finish();
        let released = std::time::SystemTime::now();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let out = waiter.wait(SOON);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let ran = std::fs::metadata(&started).unwrap().modified().unwrap();
        fastest = fastest.min(ran.duration_since(released).unwrap_or(Duration::ZERO));
        for holder in &mut holders {
            if holder.running() && holder.command_alive() {
                holder.finish();
            }
        }
    }
    assert!(
        fastest < Duration::from_millis(500),
        "the fastest of three handoffs took {fastest:?}"
    );
}

/// Guards the order of a semaphore's line: with `--limit 2`, one slot held for the whole test and
/// one let go, the freed slot goes to the waiter that came first. Letting every waiter with fewer
/// than `--limit` ahead try made the two race for it, and the later one won about half the time
/// (each round here is a new race; the first waiter's command outlasts the second's start).
#[test]
fn a_freed_slot_goes_to_the_waiter_that_came_first() {
    let env = Scene::file();
    let limit = ["--limit", "2"];
    let mut long = env.hold("pool", "long", &limit);
    for round in 0..4 {
        let mut short = env.hold("pool", &format!("short{round}"), &limit);
        let order = env.path(&format!("order{round}"));
        let first = format!("echo first >> {}; sleep 0.3", order.display());
        let mut first = env.waiter("pool", &limit, &first);
        env.wait_waiters("pool", 1);
        let second = format!("echo second >> {}", order.display());
        let mut second = env.waiter("pool", &limit, &second);
        env.wait_waiters("pool", 2);
        assert_eq!(code(&short.finish()), 0);
        for waiter in [&mut first, &mut second] {
            let out = waiter.wait(SOON);
            assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        }
        let served = std::fs::read_to_string(&order).unwrap();
        assert_eq!(
            served, "first\nsecond\n",
            "round {round}: served out of order"
        );
    }
    assert_eq!(code(&long.finish()), 0);
}

/// Guards against a look that makes what it looks at: `status`, `list` and `release --force` on a
/// state directory that does not exist (a first run would create it, or the path is mistyped)
/// answer "nothing held" without creating it.
#[test]
fn a_look_at_a_missing_state_directory_creates_nothing() {
    let env = Scene::file();
    let missing = env.path("not-yet");
    let url = format!("file://{}", missing.display());
    for (args, says) in [
        (&["status", "x"][..], "x: free\n"),
        (&["status", "x", "--json"], "\"held\":false"),
        (&["list"], ""),
        (&["release", "x", "--force"], ""),
    ] {
        let out = output(lockrun().arg("--backend").arg(&url).args(args));
        assert_eq!(code(&out), 0, "{args:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(says),
            "{args:?}: {}",
            text(&out.stdout)
        );
        assert!(!missing.exists(), "{args:?} created the state directory");
    }
    let out = output(
        lockrun()
            .arg("--backend")
            .arg(&url)
            .args(["--name", "x", "--", "true"]),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(missing.is_dir(), "a run creates it");
}

/// Guards against a reader beside a writer of `--limit` 2 when both try at the same instant:
/// readers share slot 0's lock, a writer may take slot 1, and only their marks (see the backend's
/// `modes`) keep them apart. Racing `--no-wait` runs of both kinds, the log of their sections
/// never shows a reader beside a writer, nor more than two writers.
#[test]
fn racing_readers_and_limit_writers_never_meet() {
    let s = Scene::file();
    let mut loops = Vec::new();
    for (mode, options) in [("r", "--shared"), ("w", "--limit 2")]
        .iter()
        .cycle()
        .take(6)
    {
        let section = format!("echo + {mode} >> log; sleep 0.005; echo - {mode} >> log");
        let script = format!(
            "for i in $(seq 25); do \"$0\" --backend '{url}' --name mix -n {options} -- sh -c '{section}'; sleep 0.0$((i % 3)); done; exit 0",
            url = s.url()
        );
        loops.push(shell_with_lockrun(&s, &script));
    }
    for run in &mut loops {
        assert_eq!(code(&run.wait(Duration::from_secs(120))), 0);
    }
    let log = std::fs::read_to_string(s.path("log")).unwrap();
    let (mut readers, mut writers, mut ran) = (0i32, 0i32, [0, 0]);
    for line in log.lines() {
        match line {
            "+ r" => (readers, ran[0]) = (readers + 1, ran[0] + 1),
            "+ w" => (writers, ran[1]) = (writers + 1, ran[1] + 1),
            "- r" => readers -= 1,
            "- w" => writers -= 1,
            other => panic!("unexpected log line {other:?}"),
        }
        assert!(
            !(readers > 0 && writers > 0) && writers <= 2,
            "{readers} readers beside {writers} writers at {line:?} in\n{log}"
        );
    }
    assert!(ran[0] > 0 && ran[1] > 0, "one kind never ran: {ran:?}");
}

/// Guards against a `--no-wait` run turned away by another one that could not hold: each used to
/// join the line for an instant, and a reader found a writer's passing ticket ahead of it (about
/// one try in a hundred, with a reader holding and `--limit` writers trying beside it).
#[test]
fn no_wait_runs_never_stand_in_each_others_way() {
    let s = Scene::file();
    let mut reader = s.hold("mix", "r", &["--shared"]);
    let mut loops = Vec::new();
    for (i, options) in ["--shared", "--limit 2", "--shared", "--limit 2"]
        .iter()
        .enumerate()
    {
        let script = format!(
            "for i in $(seq 100); do \"$0\" --backend '{url}' --name mix -n {options} -- true; \
             echo $? >> codes.{i}; done",
            url = s.url()
        );
        loops.push(shell_with_lockrun(&s, &script));
    }
    for run in &mut loops {
        assert_eq!(code(&run.wait(Duration::from_secs(120))), 0);
    }
    assert_eq!(code(&reader.finish()), 0);
    // Readers (loops 0 and 2) share with the holding reader; writers (1 and 3) are kept out.
    for (i, want) in ["0", "75", "0", "75"].iter().enumerate() {
        let codes = std::fs::read_to_string(s.path(&format!("codes.{i}"))).unwrap();
        let other: Vec<&str> = codes.lines().filter(|c| c != want).collect();
        assert!(
            other.is_empty() && codes.lines().count() == 100,
            "loop {i}: {} of 100 tries did not exit {want}: {other:?}",
            other.len()
        );
    }
}

/// Guards against a `--no-wait` run turned away by waiters killed in line: it does not join the
/// line, so it clears their places itself as it looks, and holds at once.
#[test]
fn a_no_wait_run_clears_waiters_killed_in_line_and_holds() {
    let s = Scene::file();
    let mut holder = s.hold("ghosts", "h", &[]);
    let mut dead = s.queue_waiters("ghosts", &[], 3, |i| format!("touch dead-{i}"));
    for waiter in &mut dead {
        waiter.signal(Signal::SIGKILL);
        waiter.wait(SOON);
    }
    let line = s.state().join("ghosts.line");
    let tickets = || {
        std::fs::read_dir(&line)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with('T')
            })
            .count()
    };
    // Those ahead of another are cleared by the one behind as it looks; the last is left.
    assert!(tickets() >= 1, "no killed waiter's place is left in line");
    let out = s.run(["--name", "ghosts", "-n", "--", "true"]);
    assert_eq!(code(&out), 75, "a -n run beside the holder");
    assert_eq!(code(&holder.finish()), 0);
    let out = s.run(["--name", "ghosts", "-n", "--", "touch", "ran"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(s.path("ran").exists());
    assert_eq!(tickets(), 0, "the killed waiters' places were left in line");
    assert!((0..3).all(|i| !s.path(&format!("dead-{i}")).exists()));
}

/// Starts `sh -c SCRIPT` in the scene's directory with `$0` the lockrun binary, its environment
/// scrubbed and the lockruns' messages discarded.
fn shell_with_lockrun(s: &Scene, script: &str) -> Proc {
    let mut cmd = std::process::Command::new("sh");
    crate::support::lockrun::scrub(&mut cmd);
    cmd.args(["-c", script, BIN]).current_dir(s.dir());
    cmd.stderr(std::process::Stdio::null());
    Proc::spawn(&mut cmd)
}
