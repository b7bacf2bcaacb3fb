//! README.md's own examples, run as written (issue 18 item 1): a newcomer copies them first, so a
//! broken one is a bug. Every ```sh block runs in a sandbox (with `lockrun` on `PATH`, a private
//! state directory, and do-nothing stand-ins for the scripts it names, `./deploy.sh` and the
//! like); every ```crontab line's command runs the same way, its variables set; the fenced write
//! (```sql, then the `bill.sh` script) runs against a real PostgreSQL, twice, and then with a
//! stale token, which it must refuse. ```text blocks are illustrations (other hosts, output) and
//! are not run.

use std::path::PathBuf;
use std::process::Command;

use crate::support::fixture::{Fixture, Reachable};
use crate::support::lockrun::{BIN, output, scrub};
use crate::support::postgres_server::PgServer;
use crate::support::tools::chmod;
use crate::support::wait::{code, text};

/// The README's code blocks: the info string and the body.
fn blocks() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push((info.trim().to_owned(), body.join("\n") + "\n"));
    }
    blocks
}

/// A place to run examples: `lockrun` on `PATH` (and nothing of the machine's own state).
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::os::unix::fs::symlink(BIN, dir.path().join("bin/lockrun")).unwrap();
        Sandbox { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A stand-in that does nothing, at `relative` inside the sandbox.
    fn stub(&self, relative: &str) -> PathBuf {
        let path = self.path(relative.trim_start_matches("./").trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        chmod(&path, 0o755);
        path
    }

    /// `sh -e -c script` in the sandbox, with the example's own environment.
    fn sh(&self, script: &str, env: &[(String, String)]) -> Command {
        let mut cmd = Command::new("sh");
        scrub(&mut cmd);
        cmd.args(["-e", "-c", script])
            .current_dir(self.dir.path())
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.path("bin").display()),
            )
            .env("HOME", self.dir.path())
            .env(
                "LOCKRUN_BACKEND",
                format!("file://{}", self.path("state").display()),
            )
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    }

    /// Runs `script` as [`Sandbox::sh`] does; unless it exits 0, fails the test with `failed`
    /// and what the script printed on stderr.
    fn assert_runs(&self, script: &str, env: &[(String, String)], failed: &str) {
        let out = output(&mut self.sh(script, env));
        assert_eq!(code(&out), 0, "{failed}\n{}", text(&out.stderr));
    }
}

/// Gives every `./script` an example names a stand-in in the sandbox.
fn stub_relative_commands(sandbox: &Sandbox, script: &str) {
    for word in script.split(|c: char| c.is_whitespace() || c == '\'' || c == ';') {
        if word.starts_with("./") && word.len() > 2 {
            sandbox.stub(word);
        }
    }
}

/// Guards against an example in README.md that does not run as written.
#[test]
fn every_shell_example_runs_as_written() {
    let mut ran = 0;
    for (info, body) in blocks() {
        if info != "sh" || body.starts_with("#!") {
            continue;
        }
        let sandbox = Sandbox::new();
        stub_relative_commands(&sandbox, &body);
        // The first example builds lockrun; the sandbox has it built already.
        let script = body.replace("cargo run --release --", "lockrun");
        sandbox.assert_runs(&script, &[], &format!("README example failed:\n{body}"));
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} shell examples were found");
}

/// Guards against a crontab line in README.md that does not run (with its variables, and its
/// absolute paths given stand-ins).
#[test]
fn every_crontab_line_runs() {
    let mut ran = 0;
    for (info, body) in blocks() {
        if info != "crontab" {
            continue;
        }
        let sandbox = Sandbox::new();
        let state = format!("file://{}", sandbox.path("state").display());
        let mut env = Vec::new();
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            if let Some((key, value)) = line.split_once('=')
                && !key.contains(' ')
            {
                env.push((
                    key.to_owned(),
                    value.replace("file:///var/lib/lockrun", &state),
                ));
                continue;
            }
            let command: Vec<&str> = line.split_whitespace().skip(5).collect();
            let command: Vec<String> = command
                .iter()
                .map(|word| match *word {
                    "/usr/local/bin/lockrun" => "lockrun".to_owned(),
                    w if w.starts_with('/') => sandbox.stub(w).display().to_string(),
                    w => w.to_owned(),
                })
                .collect();
            let failed = format!("crontab line failed:\n{line}");
            sandbox.assert_runs(&command.join(" "), &env, &failed);
            ran += 1;
        }
    }
    assert!(ran >= 2, "only {ran} crontab lines were found");
}

/// Guards against the fenced-write example failing on its first run (the table once lacked its
/// row), and against one that accepts a stale token.
#[test]
fn the_fenced_write_example_works_and_refuses_a_stale_token() {
    let blocks = blocks();
    let sql = &blocks
        .iter()
        .find(|(info, _)| info == "sql")
        .expect("a sql block")
        .1;
    let script = &blocks
        .iter()
        .find(|(info, body)| info == "sh" && body.contains("# bill.sh"))
        .expect("the bill.sh block")
        .1;
    let server = PgServer::start();
    let out = server.psql(sql);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let sandbox = Sandbox::new();
    let bill = sandbox.path("bill.sh");
    std::fs::write(&bill, script).unwrap();
    chmod(&bill, 0o755);
    let env = [("DATABASE_URL".to_owned(), server.url())];
    for _ in 0..2 {
        sandbox.assert_runs(
            "lockrun --name billing -- ./bill.sh",
            &env,
            "bill.sh failed:",
        );
    }
    let out = output(&mut sandbox.sh("FENCING_TOKEN=1 ./bill.sh", &env));
    assert_eq!(
        code(&out),
        1,
        "a stale token was accepted: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("stale fencing token 1"),
        "{}",
        text(&out.stderr)
    );
    let stored = server.psql("SELECT fence_token FROM billing_state WHERE id = 1");
    let stored: u64 = text(&stored.stdout).trim().parse().unwrap();
    assert!(
        stored > 1,
        "the second run's token was not stored: {stored}"
    );
}
