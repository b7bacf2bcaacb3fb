//! The shell completions and the man page are generated from the clap definition and committed;
//! this test fails when they are stale. Regenerate with `LOCKRUN_BLESS=1 cargo test --test lib generated`.

use std::path::Path;

use clap_complete::Shell;

fn check(relative: &str, fresh: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    if std::env::var_os("LOCKRUN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fresh).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{relative} is stale: run LOCKRUN_BLESS=1 cargo test --test lib generated and commit the result"
    );
}

#[test]
fn completions_are_up_to_date() {
    for (shell, file) in [
        (Shell::Bash, "completions/lockrun.bash"),
        (Shell::Zsh, "completions/_lockrun"),
        (Shell::Fish, "completions/lockrun.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut lockrun::cli::command(), "lockrun", &mut out);
        check(file, &out);
    }
}

#[test]
fn man_page_is_up_to_date() {
    let mut out = Vec::new();
    clap_mangen::Man::new(lockrun::cli::command())
        .render(&mut out)
        .unwrap();
    check("man/lockrun.1", &out);
}
