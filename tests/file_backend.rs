//! The embedded `file://` backend through the real binary: mutual exclusion, tokens, semaphores,
//! waiting, status and list, and what happens to the files.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::common::{Drive, FileEnv, code, lockrun, text, wait_exit, wait_until};

#[test]
fn the_command_gets_its_token_name_ttl_and_slot() {
    let env = FileEnv::new();
    let script = "echo $FENCING_TOKEN $LOCKRUN_NAME $LOCKRUN_TTL_MS $LOCKRUN_SLOT";
    let out = env.run([
        "--name",
        "ci/deploy",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 ci/deploy 2000 0\n");
    assert!(
        out.stderr.is_empty(),
        "lockrun is silent by default: {}",
        text(&out.stderr)
    );
}

#[test]
fn tokens_strictly_increase_across_runs_and_token_env_renames_the_variable() {
    let env = FileEnv::new();
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let out = env.run(["--name", "t", "--", "sh", "-c", "echo $FENCING_TOKEN"]);
        tokens.push(text(&out.stdout).trim().parse::<u64>().unwrap());
    }
    assert_eq!(tokens, [1, 2, 3, 4, 5]);
    let out = env.run([
        "--name",
        "t",
        "--token-env",
        "FENCE",
        "--",
        "sh",
        "-c",
        "echo ${FENCE}-${FENCING_TOKEN:-unset}",
    ]);
    assert_eq!(text(&out.stdout), "6-unset\n");
}

#[test]
fn the_fencing_counter_survives_a_reboot_and_a_corrupt_one_runs_nothing() {
    let env = FileEnv::new();
    let token = |env: &FileEnv| -> u64 {
        let out = env.run(["--name", "c", "--", "sh", "-c", "echo $FENCING_TOKEN"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        text(&out.stdout).trim().parse().unwrap()
    };
    let before = token(&env);
    // The flushed reservation covers every token issued.
    let fence = env.path().join("state/c.fence");
    let reserved: u64 = std::fs::read_to_string(&fence)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(reserved >= before, "reserved {reserved} < issued {before}");
    // A reboot: the unflushed record of the last token is from another boot, or lost.
    std::fs::remove_file(env.path().join("state/c.fence-hot")).unwrap();
    let after = token(&env);
    assert!(
        after > reserved,
        "token {after} after a reboot does not exceed {reserved}"
    );

    std::fs::write(&fence, "garbage").unwrap();
    let marker = env.scratch("ran");
    let out = env.run(["--name", "c", "--", "touch", marker.to_str().unwrap()]);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("corrupt"),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists());
}

#[test]
fn concurrent_read_modify_write_loses_no_update_and_tokens_rise_in_order() {
    let env = FileEnv::new();
    let counter = env.scratch("counter");
    let log = env.scratch("tokens");
    std::fs::write(&counter, "0").unwrap();
    // Read, pause (to widen any race), write; log the token in the order sections ran.
    let section = format!(
        "n=$(cat {c}); sleep 0.01; echo $((n+1)) > {c}; echo $FENCING_TOKEN >> {l}",
        c = counter.display(),
        l = log.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|_| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "for i in 1 2 3 4 5 6 7 8; do {} --backend {} --name rmw -- sh -c '{section}' || exit 1; done",
                    crate::support::common::BIN,
                    env.url()
                ))
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut worker in workers {
        assert!(worker.wait().unwrap().success());
    }
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().trim(),
        "48",
        "an update was lost"
    );
    let tokens: Vec<u64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 48);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {tokens:?}"
    );
}

#[test]
fn a_semaphore_never_exceeds_its_limit_and_does_reach_it() {
    let env = FileEnv::new();
    let slots = env.scratch("slots");
    let peak = env.scratch("peak");
    std::fs::create_dir_all(&slots).unwrap();
    // mkdir fails if two holders got the same slot; the peak is the most holders seen at once.
    let section = format!(
        "mkdir {s}/$LOCKRUN_SLOT || exit 9; ls {s} | wc -l >> {p}; sleep 0.4; rmdir {s}/$LOCKRUN_SLOT",
        s = slots.display(),
        p = peak.display()
    );
    let runs: Vec<_> = (0..7)
        .map(|_| env.spawn(["--name", "pool", "--limit", "3", "--", "sh", "-c", &section]))
        .collect();
    for mut run in runs {
        let out = wait_exit(&mut run, Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    }
    let counts: Vec<u32> = std::fs::read_to_string(&peak)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 7);
    assert!(
        counts.iter().all(|&n| n <= 3),
        "more than 3 holders: {counts:?}"
    );
    assert_eq!(
        counts.iter().max(),
        Some(&3),
        "never reached 3 holders: {counts:?}"
    );
}

#[test]
fn busy_lock_exits_75_or_the_chosen_code() {
    let env = FileEnv::new();
    let mut holder = env.spawn(["--name", "busy", "--", "sleep", "30"]);
    env.wait_held("busy", 1);

    let out = env.run(["--name", "busy", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("busy") && stderr.contains(&holder.id().to_string()),
        "{stderr}"
    );

    let out = env.run([
        "--name",
        "busy",
        "--no-wait",
        "--busy-exit-code",
        "0",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0);
    assert!(
        out.stderr.is_empty(),
        "a cron skip is quiet: {}",
        text(&out.stderr)
    );

    let out = env.run([
        "--name",
        "busy",
        "--wait",
        "0",
        "--busy-exit-code",
        "9",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 9);

    let started = Instant::now();
    let out = env.run(["--name", "busy", "--wait", "300ms", "--", "true"]);
    assert_eq!(code(&out), 75);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "gave up early"
    );
    assert!(
        text(&out.stderr).contains("after waiting"),
        "{}",
        text(&out.stderr)
    );

    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn a_waiter_runs_as_soon_as_the_holder_exits() {
    let env = FileEnv::new();
    let release = env.scratch("release");
    let mut holder = env.spawn([
        "--name",
        "handoff",
        "--",
        "sh",
        "-c",
        &format!("while [ ! -e {} ]; do sleep 0.01; done", release.display()),
    ]);
    env.wait_held("handoff", 1);
    let mut waiter = env.spawn([
        "--name",
        "handoff",
        "--wait",
        "20s",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN",
    ]);
    assert!(wait_until(Duration::from_secs(10), || env
        .status("handoff")["waiters"]
        == 1));
    std::fs::write(&release, "").unwrap();
    let out = wait_exit(&mut waiter, Duration::from_secs(10));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2\n");
    assert_eq!(code(&wait_exit(&mut holder, Duration::from_secs(5))), 0);
}

#[test]
fn a_killed_holder_frees_the_lock_at_once() {
    let env = FileEnv::new();
    let mut holder = env.spawn(["--name", "crash", "--", "sleep", "30"]);
    env.wait_held("crash", 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    holder.wait().unwrap();
    let out = env.run([
        "--name",
        "crash",
        "--wait",
        "5s",
        "--",
        "sh",
        "-c",
        "echo $FENCING_TOKEN",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2\n");
}

#[test]
fn status_and_list_show_holders_in_the_contract_shape() {
    let env = FileEnv::new();
    let mut holder = env.spawn([
        "--name",
        "jobs/billing",
        "--note",
        "deploy #42",
        "--ttl",
        "6s",
        "--",
        "sleep",
        "30",
    ]);
    let status = env.wait_held("jobs/billing", 1);
    assert_eq!(status["name"], "jobs/billing");
    assert_eq!(status["held"], true);
    assert_eq!(status["limit"], 1);
    assert_eq!(status["waiters"], 0);
    let h = &status["holders"][0];
    assert_eq!(h["token"], 1);
    assert_eq!(h["pid"], holder.id());
    assert_eq!(h["note"], "deploy #42");
    assert_eq!(h["slot"], 0);
    assert_eq!(h["expires_in_ms"], 6000);
    assert!(h["host"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(h["user"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(
        h["acquired_at"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z') && s.len() == 20),
        "{h}"
    );

    let list = env.run(["list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "jobs/billing");
    let prefixed: serde_json::Value =
        serde_json::from_slice(&env.run(["list", "jobs/", "--json"]).stdout).unwrap();
    assert_eq!(prefixed.as_array().unwrap().len(), 1);
    let other: serde_json::Value =
        serde_json::from_slice(&env.run(["list", "other", "--json"]).stdout).unwrap();
    assert_eq!(other, serde_json::json!([]));

    let human = text(&env.run(["status", "jobs/billing"]).stdout);
    assert!(
        human.contains("held") && human.contains("deploy #42"),
        "{human}"
    );

    holder.kill().unwrap();
    holder.wait().unwrap();
    let after = env.status("jobs/billing");
    assert_eq!(after["held"], false);
    assert_eq!(after["holders"], serde_json::json!([]));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&env.run(["list", "--json"]).stdout).unwrap(),
        serde_json::json!([])
    );
    assert!(text(&env.run(["status", "jobs/billing"]).stdout).contains("free"));
}

#[test]
fn status_counts_waiters() {
    let env = FileEnv::new();
    let mut holder = env.spawn(["--name", "q", "--", "sleep", "30"]);
    env.wait_held("q", 1);
    let mut waiters: Vec<_> = (0..2)
        .map(|_| env.spawn(["--name", "q", "--", "true"]))
        .collect();
    assert!(wait_until(
        Duration::from_secs(10),
        || env.status("q")["waiters"] == 2
    ));
    holder.kill().unwrap();
    holder.wait().unwrap();
    for w in &mut waiters {
        assert_eq!(code(&wait_exit(w, Duration::from_secs(10))), 0);
    }
    assert_eq!(env.status("q")["waiters"], 0);
}

#[test]
fn force_release_explains_that_a_kernel_lock_cannot_be_stolen() {
    let env = FileEnv::new();
    let mut holder = env.spawn(["--name", "k", "--", "sleep", "30"]);
    env.wait_held("k", 1);
    let out = env.run(["release", "k", "--force"]);
    assert_ne!(code(&out), 0);
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("pid {}", holder.id())), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(env.status("k")["held"], true, "the holder keeps its lock");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = env.run(["release", "k", "--force"]);
    assert_eq!(
        code(&out),
        0,
        "nothing to release is fine: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_removed_lock_file_is_a_lost_lease() {
    let env = FileEnv::new();
    let mut holder = env.spawn(["--name", "gone", "--ttl", "600ms", "--", "sleep", "30"]);
    env.wait_held("gone", 1);
    std::fs::remove_file(env.path().join("state/gone.lock")).unwrap();
    let out = wait_exit(&mut holder, Duration::from_secs(10));
    assert_eq!(code(&out), 76, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("removed or replaced"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn names_stay_inside_the_state_directory() {
    let env = FileEnv::new();
    assert_eq!(code(&env.run(["--name", "a/b:c", "--", "true"])), 0);
    let mut files: Vec<String> = std::fs::read_dir(env.path().join("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["a%b:c.fence", "a%b:c.fence-hot", "a%b:c.lock"]);
    let mode = std::fs::metadata(env.path().join("state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the state directory is private");
}

#[test]
fn a_symlink_planted_as_a_lock_file_is_refused() {
    let env = FileEnv::new();
    std::fs::create_dir_all(env.path().join("state")).unwrap();
    let target = env.scratch("victim");
    std::fs::write(&target, "precious").unwrap();
    std::os::unix::fs::symlink(&target, env.path().join("state/evil.lock")).unwrap();
    let out = env.run(["--name", "evil", "--", "true"]);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
}

#[test]
fn an_unusable_state_directory_exits_69_naming_it() {
    let out = lockrun()
        .args([
            "--backend",
            "file:///dev/null/locks",
            "--name",
            "x",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("/dev/null/locks"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_new_user_with_an_empty_home_gets_a_private_state_directory() {
    if !nix::unistd::geteuid().is_root() {
        // As a normal user the default is the user's own home; the test needs to become another.
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    nix::unistd::chown(home.path(), Some(65534.into()), Some(65534.into())).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(crate::support::common::BIN)
        .args(["--name", "demo", "--", "sh", "-c", "echo $FENCING_TOKEN"])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n");
    let state = home.path().join(".local/state/lockrun");
    assert!(state.join("demo.lock").exists());
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn a_state_directory_someone_else_could_rewrite_is_refused() {
    let env = FileEnv::new();
    let state = env.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let marker = env.scratch("ran");
    let touch = ["--name", "x", "--", "touch", marker.to_str().unwrap()];

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = env.run(touch);
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("world-writable"),
        "{}",
        text(&out.stderr)
    );

    // With the sticky bit, others cannot replace our files: that is a usable shared directory.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(code(&env.run(touch)), 0);
    std::fs::remove_file(&marker).unwrap();

    if nix::unistd::geteuid().is_root() {
        // A directory (or a symlink to one) that another user owns could be theirs to rewrite.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(&state, Some(65534.into()), None).unwrap();
        let link = env.path().join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        let out = lockrun()
            .arg("--backend")
            .arg(format!("file://{}", link.display()))
            .args(touch)
            .output()
            .unwrap();
        assert_eq!(code(&out), 69, "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("owned by uid 65534"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(!marker.exists());
}
