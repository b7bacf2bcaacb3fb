//! Bad input through the real binary: every usage error exits 64 with one lowercase line naming
//! the problem, and runs nothing.

use std::path::Path;
use std::process::Output;

use crate::support::asserts::{assert_hidden, assert_one_line, assert_said};
use crate::support::lockrun::{BIN, lockrun, output};
use crate::support::scene::Scene;
use crate::support::tools::chmod;
use crate::support::wait::{code, text};

/// Names that are not lock names.
const BAD_NAMES: &[&str] = &["../x", "/abs", "a//b", "a/", "", "sp ace", "a/./b"];

/// Each case: options given after `--name x` (the command, when one is reached, would create a
/// marker file), and a word the message must contain.
const BAD_OPTIONS: &[(&[&str], &str)] = &[
    (&["--ttl", "0"], "--ttl"),
    (&["--ttl", "15"], "--ttl"),
    (&["--ttl", "soon"], "--ttl"),
    (&["--ttl", "-1s"], "--ttl"),
    (&["--renew", "15s"], "--renew"),
    (&["--ttl", "1s", "--renew", "2s"], "--renew"),
    (&["--kill-after", "20s"], "--kill-after"),
    (
        &["--ttl", "10s", "--renew", "6s", "--kill-after", "4s"],
        "--kill-after",
    ),
    (&["--wait", "forever"], "--wait"),
    (&["--wait", "3153600001"], "longer than a century"),
    (
        &["--ttl", "1s", "--renew", "900ms"],
        "--renew 900ms leaves no time",
    ),
    (&["--progress", "1ms"], "at least 100ms"),
    (&["--wait", "1s", "--no-wait"], "--no-wait"),
    (&["--limit", "0"], "--limit"),
    (&["--limit", "many"], "--limit"),
    (&["--busy-exit-code", "256"], "--busy-exit-code"),
    (&["--token-env", "9LIVES"], "--token-env"),
    (&["--token-env", "A=B"], "--token-env"),
    (&["--token-env", "PATH"], "the command needs PATH"),
    (&["--backend", "ftp://host/x"], "scheme"),
    (&["--backend", "file://relative/dir"], "absolute"),
    (&["--backend", "file:///"], "the root directory"),
    (&["--backend", "file:////"], "the root directory"),
    (
        &["--backend", "file:///tmp/d?x=1"],
        "file:// takes no options",
    ),
    (&["--backend", "file:///tmp/d#top"], "unexpected \"#top\""),
    (&["--backend", "file:///tmp/a%00b"], "NUL byte"),
    (&["--backend", "etcd://host"], "host:port"),
    (&["--backend", "not a url"], "backend"),
    (
        &["--backend", "/srv/locks"],
        "write a directory as a URL: file:///srv/locks",
    ),
    (
        &["--backend", "dynamodb://bad!table"],
        "the table name is not 3-255",
    ),
    (
        &[
            "--backend",
            "postgres://127.0.0.1/db?lockrun_schema=Bad-Name",
        ],
        "schema",
    ),
    (
        &["--backend", "postgres://127.0.0.1/db?sslmode=sometimes"],
        "sslmode",
    ),
    (
        &[
            "--backend",
            "postgres://127.0.0.1:6432/db?listen=127.0.0.1:99999",
        ],
        "listen endpoint \"127.0.0.1:99999\": port \"99999\" is not 1-65535",
    ),
    (&["--bogus"], "--bogus"),
];

#[test]
fn bad_inputs_exit_64_with_one_line_and_run_nothing() {
    let env = Scene::file();
    let marker = env.path("ran");
    let names = BAD_NAMES
        .iter()
        .map(|name| (vec!["--name", name], "lock name"));
    let options = BAD_OPTIONS
        .iter()
        .map(|(options, needle)| ([&["--name", "x"], *options].concat(), *needle));
    let unnamed = (vec!["--ttl", "1s"], "--name");
    for (args, needle) in names.chain(options).chain([unnamed]) {
        let mut cmd = lockrun();
        if !args.contains(&"--backend") {
            cmd.arg("--backend").arg(env.url());
        }
        cmd.args(&args).arg("--").arg("touch").arg(&marker);
        let out = output(&mut cmd);
        let stderr = assert_one_line(&out, 64, needle);
        let message = &stderr["lockrun: ".len()..];
        assert!(
            message.starts_with(|c: char| !c.is_uppercase()),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!marker.exists(), "{args:?} ran the command");
    }
}

#[test]
fn a_missing_command_is_a_usage_error() {
    let env = Scene::file();
    for args in [
        &["--name", "x"][..],
        &["--name", "x", "--"],
        &["--name", "x", "--", ""],
    ] {
        let out = env.run(args);
        assert_eq!(code(&out), 64, "{args:?}: {}", text(&out.stderr));
        assert_said(&out, "command");
    }
    // An empty program is not a missing one: the message says which it is.
    assert_one_line(
        &env.run(["--name", "x", "--", ""]),
        64,
        "the command is an empty string",
    );
}

#[test]
fn a_command_without_the_separator_is_refused_with_a_hint() {
    let env = Scene::file();
    let out = env.run(["--name", "x", "echo", "hi"]);
    assert_eq!(code(&out), 64);
    assert_said(&out, "after --");
    assert!(out.stdout.is_empty(), "echo must not have run");
}

#[test]
fn passwords_in_bad_urls_are_not_echoed() {
    // A bad scheme, no scheme at all, a scheme broken by a stray comma, and credentials whose
    // @HOST was left out.
    for url in [
        "ftp://user:hunter2@host/",
        "user:hunter2@host:6379",
        "x:hunter2@h,redis://y",
        "redis://:hunter2",
        "postgres://app:hunter2?x",
        "zk://app:hunter2/x/y",
    ] {
        let out = output(lockrun().args(["--name", "x", "--backend", url, "--", "true"]));
        assert_eq!(code(&out), 64);
        assert_hidden(&text(&out.stderr), &["hunter2"]);
    }
}

/// Guards against a nested run that takes the enclosing lockrun's `LOCKRUN_NAME` (which the
/// contract also makes the `--name` variable) as its own name: it waited for its parent forever.
#[test]
fn a_nested_run_does_not_take_the_enclosing_lease_as_its_name() {
    let env = Scene::file();
    let inner = format!("{} -b {} -w 2 -- touch inner", BIN, env.url());
    let out = env.run(["--name", "outer", "--", "sh", "-c", &inner]);
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("missing --name") && said.contains("runs under"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(!env.path("inner").exists());
    // With a name of its own it runs, and its command is told that name.
    let inner = format!(
        "{} -b {} --name inner -- sh -c 'echo $LOCKRUN_NAME'",
        BIN,
        env.url()
    );
    let out = env.run(["--name", "outer", "--", "sh", "-c", &inner]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "inner\n");
}

#[test]
fn options_can_come_from_the_environment() {
    let env = Scene::file();
    let out = output(
        lockrun()
            .env("LOCKRUN_BACKEND", env.url())
            .env("LOCKRUN_NAME", "from-env")
            .env("LOCKRUN_TOKEN_ENV", "MY_TOKEN")
            .env("LOCKRUN_TTL", "3s")
            .args([
                "--",
                "sh",
                "-c",
                "echo $LOCKRUN_NAME $MY_TOKEN $LOCKRUN_TTL_MS",
            ]),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "from-env 1 3000\n");
    // A bad value from the environment is judged like a flag, and the message names the
    // variable: the crontab line that set it has no such flag on it.
    for (variable, value, says) in [
        ("LOCKRUN_LIMIT", "0", "invalid --limit"),
        ("LOCKRUN_TTL", "15", "invalid --ttl"),
        ("LOCKRUN_TTL", " ", "invalid --ttl"),
        ("LOCKRUN_RENEW", "1h", "invalid --renew"),
        ("LOCKRUN_KILL_AFTER", "1h", "invalid --kill-after"),
        ("LOCKRUN_WAIT", "soon", "invalid --wait"),
        ("LOCKRUN_TIMEOUT", "0", "invalid --timeout"),
        ("LOCKRUN_MIN_INTERVAL", "daily", "invalid --min-interval"),
        ("LOCKRUN_PROGRESS", "1ms", "invalid --progress"),
        ("LOCKRUN_TOKEN_ENV", "9LIVES", "invalid --token-env"),
        ("LOCKRUN_BACKEND", "ftp://h/x", "invalid backend"),
        (
            "LOCKRUN_BACKEND_FILE",
            "/nonexistent/url",
            "cannot read --backend-file",
        ),
    ] {
        let mut cmd = lockrun();
        if !variable.starts_with("LOCKRUN_BACKEND") {
            cmd.env("LOCKRUN_BACKEND", env.url());
        }
        let out = output(cmd.env(variable, value).args(["--name", "x", "--", "true"]));
        let said = assert_one_line(&out, 64, says);
        assert!(said.ends_with(&format!("(set by {variable})\n")), "{said}");
    }
    let out = output(lockrun().env("LOCKRUN_NAME", "/x").args(["--", "true"]));
    assert_one_line(&out, 64, "(set by LOCKRUN_NAME)");
    let out = output(
        lockrun()
            .env("LOCKRUN_SHARED", "1")
            .env("LOCKRUN_LIMIT", "2")
            .args(["--name", "x", "--", "true"]),
    );
    assert_one_line(&out, 64, "(set by LOCKRUN_SHARED and LOCKRUN_LIMIT)");
    // The same value typed on the command line is the flag's, whatever the environment holds.
    let out = env.run(["--name", "x", "--ttl", "15", "--", "true"]);
    let said = assert_one_line(&out, 64, "invalid --ttl");
    assert!(!said.contains("set by"), "{said}");
    // An overridden variable is not blamed for the value that replaced it.
    let out = output(lockrun().env("LOCKRUN_BACKEND", "ftp://h/x").args([
        "--backend-file",
        "/nonexistent/url",
        "--name",
        "x",
        "--",
        "true",
    ]));
    let said = assert_one_line(&out, 64, "cannot read --backend-file");
    assert!(!said.contains("set by"), "{said}");
    // One that clap refuses names the variable it came from, which the user may not see.
    let out = output(
        lockrun()
            .env("LOCKRUN_BACKEND", env.url())
            .env("LOCKRUN_NO_WAIT", "2")
            .args(["--name", "x", "--", "true"]),
    );
    assert_one_line(&out, 64, "(set by LOCKRUN_NO_WAIT)");
    // A value that is not text names its variable, not "arguments".
    use std::os::unix::ffi::OsStrExt;
    let out = output(
        lockrun()
            .env("LOCKRUN_BACKEND", env.url())
            .env("LOCKRUN_TTL", std::ffi::OsStr::from_bytes(b"3\xffs"))
            .args(["--name", "x", "--", "true"]),
    );
    assert_one_line(&out, 64, "LOCKRUN_TTL is not valid UTF-8");
}

#[test]
fn help_and_version_go_to_stdout_and_succeed() {
    for flag in ["--help", "--version"] {
        let out = output(lockrun().arg(flag));
        assert_eq!(code(&out), 0);
        assert!(!out.stdout.is_empty());
    }
    let out = output(lockrun().args(["status", "--help"]));
    assert_eq!(code(&out), 0);
}

/// Guards against output lost without a word: help, the version or a `status` that cannot be
/// written (a full disk) is an error, while a reader that stopped reading is not.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    let env = Scene::file();
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    for args in [
        &["--help"][..],
        &["--version"],
        &["status", "--help"],
        &["status", "x"],
    ] {
        let out = env.cmd(args).stdout(full()).output().unwrap();
        assert_one_line(&out, 70, "cannot write to stdout: no space left on device");
    }
    let mut cmd = lockrun();
    let mut reader = cmd
        .arg("--help")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(reader.stdout.take());
    let out = reader.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

#[test]
fn release_without_force_is_refused() {
    let env = Scene::file();
    let out = env.run(["release", "x"]);
    assert_eq!(code(&out), 64);
    assert_said(&out, "--force");
}

/// Runs `lockrun --backend-file FILE ARGS...` to completion.
fn with_backend_file(file: &Path, args: &[&str]) -> Output {
    output(lockrun().arg("--backend-file").arg(file).args(args))
}

#[test]
fn the_backend_url_can_come_from_a_file() {
    let env = Scene::file();
    let file = env.path("backend");
    std::fs::write(&file, format!("{}\n", env.url())).unwrap();
    let echo = ["--name", "f", "--", "sh", "-c", "echo $FENCING_TOKEN"];
    let out = with_backend_file(&file, &echo);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n");
    assert_eq!(
        env.status("f")["held"],
        false,
        "the same state directory as --backend"
    );

    // A password in a file anyone may read is refused, as ssh refuses such a key.
    std::fs::write(&file, "redis://:hunter2@127.0.0.1:1\n").unwrap();
    chmod(&file, 0o644);
    let out = with_backend_file(&file, &["--name", "f", "--", "true"]);
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    assert_said(&out, "chmod 600");
    assert_hidden(&text(&out.stderr), &["hunter2"]);

    // A password kept in a private file shows nowhere, even when the backend is unreachable.
    chmod(&file, 0o600);
    let out = output(
        lockrun()
            .env("LOCKRUN_BACKEND_FILE", &file)
            .args(["--name", "f", "--", "env"]),
    );
    assert_eq!(code(&out), 69, "{}", text(&out.stderr));
    assert_hidden(&text(&out.stderr), &["hunter2"]);

    for bad in [env.path("missing"), env.path("empty")] {
        if bad.ends_with("empty") {
            std::fs::write(&bad, "\n").unwrap();
        }
        let out = with_backend_file(&bad, &["--name", "f", "--", "true"]);
        assert_eq!(code(&out), 64, "{}", text(&out.stderr));
        assert_said(&out, "--backend-file");
    }
    // A file with no end (given by mistake) is read no further than a URL could be long.
    let out = with_backend_file(Path::new("/dev/zero"), &["--name", "f", "--", "true"]);
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    assert_said(&out, "first line is over 64 KiB");
}

#[test]
fn the_command_line_overrides_the_environment_for_exclusive_options() {
    let env = Scene::file();
    let _holder = env.hold("busy", "h", &[]);
    // A crontab says "never wait" for all its lines; this line asks to wait a little.
    let started = std::time::Instant::now();
    let out = output(
        env.cmd(["--name", "busy", "--wait", "300ms", "--", "true"])
            .env("LOCKRUN_NO_WAIT", "1"),
    );
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "did not wait"
    );
    // And the other way round, with a boolean spelled as cron users do.
    let out = output(
        env.cmd(["--name", "busy", "--no-wait", "--", "true"])
            .env("LOCKRUN_WAIT", "1h"),
    );
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    let out = output(
        env.cmd(["--name", "busy", "--", "true"])
            .env("LOCKRUN_NO_WAIT", "yes"),
    );
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    let out = output(
        env.cmd(["--name", "busy", "--", "true"])
            .env("LOCKRUN_NO_WAIT", "maybe"),
    );
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    // A crontab's LOCKRUN_LIMIT does not stop one line from running --shared, nor its
    // LOCKRUN_SHARED one line from running with --limit.
    let out = output(
        env.cmd(["--name", "s", "--shared", "--", "true"])
            .env("LOCKRUN_LIMIT", "2"),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = output(
        env.cmd(["--name", "s", "--limit", "2", "--", "true"])
            .env("LOCKRUN_SHARED", "1"),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards against `LOCKRUN_VERBOSE` refusing the words every other switch variable takes
/// (`true`, `yes`, `on` were "invalid digit found in string", exit 64): they mean one `-v`, a
/// count still counts, and the negative words mean none.
#[test]
fn lockrun_verbose_takes_a_switchs_words_or_a_count() {
    let env = Scene::file();
    let verbose = |value: &str| {
        let out = output(
            env.cmd(["--name", "v", "--", "true"])
                .env("LOCKRUN_VERBOSE", value),
        );
        assert_eq!(code(&out), 0, "{value}: {}", text(&out.stderr));
        text(&out.stderr)
    };
    for word in ["true", "yes", "On"] {
        assert!(verbose(word).contains("acquired v"), "{word}");
    }
    assert!(verbose("2").contains("started the command"));
    for word in ["0", "off", "no"] {
        assert_eq!(verbose(word), "", "{word}");
    }
    let out = output(
        env.cmd(["--name", "v", "--", "true"])
            .env("LOCKRUN_VERBOSE", "loud"),
    );
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
}

/// Guards against free text and valid names that clap would take for options: a note and a name
/// may start with `-`.
#[test]
fn a_note_or_a_name_may_start_with_a_dash() {
    let env = Scene::file();
    let mut holder = env.hold("n", "h", &["--note", "-urgent: hotfix"]);
    let status = env.wait_held("n", 1);
    assert_eq!(status["holders"][0]["note"], "-urgent: hotfix");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = env.run(["--name", "-a", "--", "sh", "-c", "echo $LOCKRUN_NAME"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "-a\n");
}

/// Guards against a note that stops a deploy: too long is cut with a warning, tabs are kept, a
/// newline becomes a space; never refused. And against one that rewrites the terminal of whoever
/// runs `status`.
#[test]
fn notes_are_made_to_fit_never_refused() {
    let env = Scene::file();
    let long = "x".repeat(2000);
    let mut holder = env.hold("n", "h", &["--note", &format!("a\tb\nc {long}")]);
    let status = env.wait_held("n", 1);
    let note = status["holders"][0]["note"].as_str().unwrap().to_owned();
    assert!(note.starts_with("a\tb c x"), "{note:?}");
    assert_eq!(note.len(), 1024, "{note:?}");
    let out = holder.finish();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_said(&out, "cut to the first 1024");
    // What a terminal would act on shows as an escape in `status`; the JSON keeps the text.
    let mut other = env.hold("m", "o", &["--note", "fix\u{202e}gnp.exe"]);
    assert_eq!(
        env.wait_held("m", 1)["holders"][0]["note"],
        "fix\u{202e}gnp.exe"
    );
    let out = env.run(["status", "m"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("note: fix\\u{202e}gnp.exe\n"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(code(&other.finish()), 0);
}

/// Guards against a crontab's `LOCKRUN_X=` (set but empty) breaking every job: an empty variable
/// counts as unset, for every option.
#[test]
fn empty_environment_variables_count_as_unset() {
    let env = Scene::file();
    let out = output(
        env.cmd(["--name", "e", "--", "true"])
            .env("LOCKRUN_NO_WAIT", "")
            .env("LOCKRUN_WAIT", "")
            .env("LOCKRUN_TTL", "")
            .env("LOCKRUN_SHARED", "")
            .env("LOCKRUN_NOTE", ""),
    );
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards against usage errors that point the wrong way (issue 18 item 4).
#[test]
fn usage_errors_point_at_what_was_meant() {
    let env = Scene::file();
    for (args, needle) in [
        (&["--", "echo", "hi"][..], "missing --name"),
        (&[][..], "missing --name"),
        (
            &["billing", "--", "true"][..],
            "did you mean --name billing",
        ),
        (&["--nmae", "x", "--", "true"][..], "did you mean --name"),
        (&["stauts", "x"][..], "did you mean the status subcommand?"),
        // A command named like a subcommand, its `--` left out: never the subcommand instead.
        (
            &["--name", "nightly", "--ttl", "500ms", "drill"][..],
            "to run a command named drill, put it after --",
        ),
        (&["--name", "x", "-n", "list"][..], "a command named list"),
        (
            &["status"][..],
            "missing NAME: say which lease, as in lockrun status NAME",
        ),
        (&["status"][..], "lockrun status --help"),
        (&["release"][..], "as in lockrun release NAME --force"),
        (
            &["--name", "x", "--shared", "--limit", "2", "--", "true"][..],
            "--shared cannot be used with --limit (shared holders are not counted against a limit)",
        ),
        // A cap of one that shared holders, who are not counted, would not keep.
        (
            &["--name", "x", "--shared", "--limit", "1", "--", "true"][..],
            "--shared cannot be used with --limit",
        ),
        (
            &["--name", "x", "--wait", "--", "sleep", "1"][..],
            "missing value for --wait: give it before the --",
        ),
        (
            &["--name", "x", "-w", "--", "true"][..],
            "missing value for -w",
        ),
        (
            &["--name", "x", "--note", "--", "true"][..],
            "missing value for --note",
        ),
        // A cluster of short flags whose last one takes a value.
        (
            &["--name", "x", "-nw", "--", "make"][..],
            "missing value for -w (in -nw): give it before the --, as in -w DURATION",
        ),
        (
            &["--name", "x", "--token-env", "LOCKRUN_TTL_MS", "--", "true"][..],
            "LOCKRUN_",
        ),
        (
            &["--name", "x", "--renew", "1ns", "--", "true"][..],
            "at least 10ms",
        ),
        (
            &["--name", "x", "--ttl", "10ms", "--", "true"][..],
            "invalid --ttl 10ms",
        ),
    ] {
        assert_one_line(&env.run(args), 64, needle);
    }
}

/// Guards against flock habits that do not carry over: `-n`, `-w SECONDS`, `-E CODE`, `-s`.
#[test]
fn flock_short_options_mean_what_they_mean_to_flock() {
    let env = Scene::file();
    let _holder = env.hold("f", "h", &[]);
    let out = env.run(["-n", "-E", "9", "--name", "f", "--", "true"]);
    assert_eq!(code(&out), 9, "{}", text(&out.stderr));
    let started = std::time::Instant::now();
    let out = env.run(["-w", "0.3", "--name", "f", "--", "true"]);
    assert_eq!(code(&out), 75, "{}", text(&out.stderr));
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    let out = env.run(["-s", "-n", "--name", "other", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
}

/// Guards against `status` that scripts cannot ask: with -q it prints nothing and exits 0 when
/// NAME is held, 1 when free.
#[test]
fn status_quiet_answers_in_its_exit_status() {
    let env = Scene::file();
    let assert_answers = |status: i32| {
        let out = env.run(["status", "q", "-q"]);
        let answer = (code(&out), out.stdout.len());
        assert_eq!(answer, (status, 0), "{}", text(&out.stderr));
    };
    assert_answers(1);
    let _holder = env.hold("q", "h", &[]);
    assert_answers(0);
}
