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
        let mut text = String::from_utf8(out).unwrap();
        match shell {
            Shell::Bash => text.push_str(BASH_AFTER_DASHDASH),
            Shell::Fish => text = fish_after_dashdash(&text),
            // zsh's completion already hands the command to `_cmdambivalent`.
            _ => {}
        }
        check(file, text.as_bytes());
    }
}

/// Guards against completing lockrun's own options after `--`, where the command goes.
#[test]
fn bash_completes_commands_after_the_double_dash() {
    let script = format!(
        "source {}/completions/lockrun.bash
         complete() {{ :; }}
         COMP_WORDS=(lockrun --name x -- ech); COMP_CWORD=4
         _lockrun_or_command lockrun ech --
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    assert!(offered.lines().any(|l| l == "echo"), "{offered}");
    assert!(!offered.contains("--name"), "{offered}");
}

/// Bash: once `--` is on the line, complete the command (then its own arguments, with
/// bash-completion's `_command_offset` where it is installed, else file names).
const BASH_AFTER_DASHDASH: &str = r#"
_lockrun_or_command() {
    local i
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ "${COMP_WORDS[i]}" == -- ]]; then
            if declare -F _command_offset >/dev/null; then
                _command_offset $((i + 1))
            elif ((COMP_CWORD == i + 1)); then
                COMPREPLY=($(compgen -c -- "${COMP_WORDS[COMP_CWORD]}"))
            else
                COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
            fi
            return 0
        fi
    done
    _lockrun "$@"
}
complete -F _lockrun_or_command -o bashdefault -o default lockrun
"#;

/// Fish: none of lockrun's options after `--`; the command line after it completes as a command
/// line of its own.
fn fish_after_dashdash(generated: &str) -> String {
    let guarded = generated.replace(
        "complete -c lockrun -n \"",
        "complete -c lockrun -n \"not __lockrun_after_dashdash; and ",
    );
    format!(
        "{guarded}
# After `--`: the command and its arguments, not lockrun's options.
function __lockrun_after_dashdash
    contains -- -- (commandline -opc)
end

function __lockrun_complete_command
    set -l tokens (commandline -opc)
    set -l at (contains -i -- -- $tokens)
    complete -C (string join ' ' -- $tokens[(math $at + 1)..-1] (commandline -ct))
end

complete -c lockrun -n __lockrun_after_dashdash -f -a '(__lockrun_complete_command)'
"
    )
}

#[test]
fn man_page_is_up_to_date() {
    let page = crate::support::manual::render(&lockrun::cli::command());
    check("man/lockrun.1", page.as_bytes());
}
