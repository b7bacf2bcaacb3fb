//! Parsing the command line around clap: `LOCKRUN_*` variables that are set but empty count as
//! unset (a crontab's `LOCKRUN_NO_WAIT=`), the command line beats the environment for options
//! that exclude each other, and every parse error becomes one line that points the right way.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::args::Cli;
use crate::exit::Error;

/// The message for a run form without a command.
pub const MISSING_COMMAND: &str =
    "missing command: give it after --, as in lockrun --name NAME -- ./job.sh";
/// The message for a run form without `--name`.
const MISSING_NAME: &str =
    "missing --name: give the lease's name, as in lockrun --name NAME -- ./job.sh";
/// The message for a run form without `--name` inside another lockrun's command.
const MISSING_NAME_NESTED: &str = "missing --name: LOCKRUN_NAME here is the lease of the lockrun \
     this command runs under, not a setting; give this run its own, as in lockrun --name NAME -- \
     ./step.sh";
/// Set by lockrun only, for its command (with `LOCKRUN_NAME`): see [`forget_the_enclosing_name`].
const COMMAND_MARK: &str = "LOCKRUN_TTL_MS";

/// What parsing the command line came to.
pub enum Parsed {
    /// Flags to resolve.
    Cli(Box<Cli>),
    /// Help or the version was printed: nothing more to do.
    Printed,
}

/// Parses the process's arguments: clap's parse, then the rules clap cannot express (which of two
/// exclusive options wins); every error is one line (exit 64).
pub fn parse(args: Vec<OsString>) -> Result<Parsed, Error> {
    forget_empty_variables();
    forget_the_enclosing_name();
    no_value_taken_from_the_separator(&args)?;
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|mut matches| {
            // Read before the typed parse takes the values out of `matches`, which saves copying
            // them all (about 80 allocations a run).
            let typed = typed_exclusive_flags(&matches);
            let misplaced = run_option_before_subcommand(&matches);
            let from_variables = taken_from_variables(&matches);
            let cli = Cli::from_arg_matches_mut(&mut matches)?;
            Ok((cli, typed, misplaced, from_variables))
        });
    let (mut cli, typed, misplaced, from_variables) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return clap_error(&e, &args),
    };
    cli.from_variables = from_variables;
    if let Some((flag, subcommand)) = misplaced {
        return Err(Error::usage(format!(
            "{flag} is an option of a run, and {subcommand} here would be the lockrun subcommand: \
             to run a command named {subcommand}, put it after -- (lockrun {flag} … -- {subcommand})"
        )));
    }
    settle_overrides(&mut cli, &typed)?;
    Ok(Parsed::Cli(Box::new(cli)))
}

/// Removes `LOCKRUN_*` variables whose value is empty: for every option, an empty variable counts
/// as unset, as a crontab line `LOCKRUN_NO_WAIT=` means.
fn forget_empty_variables() {
    let empty: Vec<OsString> = crate::environment::entries()
        .filter(|entry| crate::environment::value(entry).is_empty())
        .map(crate::environment::key)
        .filter(|key| key.starts_with(b"LOCKRUN_"))
        .map(|key| OsString::from_vec(key.to_vec()))
        .collect();
    for key in empty {
        // SAFETY: called first thing in `main`, before the runtime or any other thread exists,
        // so nothing can read the environment concurrently.
        unsafe { std::env::remove_var(key) };
    }
}

/// Inside a lockrun's command, `LOCKRUN_NAME` is the name of the lease that lockrun holds, set
/// together with `LOCKRUN_TTL_MS`, which nothing else sets: a nested `lockrun -- step` that took
/// it as its `--name` would wait for its own parent forever. There it is not read as a setting;
/// a nested run without `--name` is then told why it needs one.
fn forget_the_enclosing_name() {
    if std::env::var_os(COMMAND_MARK).is_some() {
        // SAFETY: as in `forget_empty_variables`, before any other thread exists.
        unsafe { std::env::remove_var("LOCKRUN_NAME") };
    }
}

/// One of two options that exclude each other: its flag (whose clap id is the flag's name with
/// `_` for `-`: `--no-wait` is `no_wait`), whether it is set, and how to unset it.
type Exclusive = (&'static str, fn(&Cli) -> bool, fn(&mut Cli));

/// Two options that exclude each other, and why, where the flags alone do not say.
struct Exclusion {
    a: Exclusive,
    b: Exclusive,
    why: &'static str,
}

const EXCLUSIONS: [Exclusion; 4] = [
    Exclusion {
        a: ("--wait", |c| c.run.wait.is_some(), |c| c.run.wait = None),
        b: ("--no-wait", |c| c.run.no_wait, |c| c.run.no_wait = false),
        why: "",
    },
    Exclusion {
        a: ("--backend", |c| c.backend.is_some(), |c| c.backend = None),
        b: (
            "--backend-file",
            |c| c.backend_file.is_some(),
            |c| c.backend_file = None,
        ),
        why: "",
    },
    Exclusion {
        a: ("--shared", |c| c.run.shared, |c| c.run.shared = false),
        b: ("--limit", |c| c.run.limit.is_some(), |c| c.run.limit = None),
        why: " (shared holders are not counted against a limit)",
    },
    Exclusion {
        a: ("--quiet", |c| c.quiet, |c| c.quiet = false),
        b: ("--verbose", |c| c.verbose > 0, |c| c.verbose = 0),
        why: "",
    },
];

/// The clap id of `flag`.
fn id_of(flag: &str) -> String {
    flag.trim_start_matches('-').replace('-', "_")
}

/// An option that takes a value, given last before `--` without one (`--wait -- make`): clap
/// would take the `--` as the value (options whose values may start with `-` take it) or report
/// the command as an unexpected argument, either way pointing away from the option.
fn no_value_taken_from_the_separator(args: &[OsString]) -> Result<(), Error> {
    // Only a flag right before a `--` can be one: a usual run line (`--name N -- CMD`) is not
    // worth building clap's whole command for a second time.
    let flag_before_separator = args
        .windows(2)
        .any(|pair| pair[1] == "--" && pair[0].to_str().is_some_and(|w| w.starts_with('-')));
    if !flag_before_separator {
        return Ok(());
    }
    let command = Cli::command();
    let mut words = args.iter().skip(1).map(|word| word.to_str().unwrap_or(""));
    while let Some(word) = words.next() {
        if word == "--" || !word.starts_with('-') {
            return Ok(());
        }
        let Some((flag, arg)) = wants_next_word(&command, word) else {
            continue;
        };
        if words.next() == Some("--") {
            let value = arg
                .get_value_names()
                .and_then(|names| names.first())
                .map_or_else(|| "VALUE".to_owned(), ToString::to_string);
            let within = match flag == word {
                true => String::new(),
                false => format!(" (in {word})"),
            };
            return Err(Error::usage(format!(
                "missing value for {flag}{within}: give it before the --, as in {flag} {value}"
            )));
        }
    }
    Ok(())
}

/// The option whose value is the word after `word`, if there is one: `--wait`, `-w`, or a
/// cluster of short flags that ends with one taking a value (`-nw`; in `-wnq` the value is `nq`).
fn wants_next_word<'c>(command: &'c clap::Command, word: &str) -> Option<(String, &'c clap::Arg)> {
    let takes_values = |arg: &&clap::Arg| arg.get_action().takes_values();
    if let Some(long) = word.strip_prefix("--") {
        let arg = command
            .get_arguments()
            .filter(takes_values)
            .find(|arg| arg.get_long() == Some(long))?;
        return Some((word.to_owned(), arg));
    }
    let shorts = word.strip_prefix('-')?;
    for (at, short) in shorts.char_indices() {
        let arg = command
            .get_arguments()
            .find(|arg| arg.get_short() == Some(short))?;
        if takes_values(&arg) {
            let last = at + short.len_utf8() == shorts.len();
            return last.then(|| (format!("-{short}"), arg));
        }
    }
    None
}

/// The flags of [`EXCLUSIONS`] that were typed on the command line (not taken from the
/// environment).
fn typed_exclusive_flags(matches: &ArgMatches) -> Vec<&'static str> {
    EXCLUSIONS
        .iter()
        .flat_map(|exclusion| [exclusion.a.0, exclusion.b.0])
        .filter(|flag| matches.value_source(&id_of(flag)) == Some(ValueSource::CommandLine))
        .collect()
}

/// The options whose value came from their `LOCKRUN_*` variable, as (`--flag`, variable), the
/// subcommand's included (a global `--backend` is seen there too).
fn taken_from_variables(matches: &ArgMatches) -> Vec<(String, String)> {
    let mut taken: Vec<(String, String)> = Vec::new();
    let subcommand = matches.subcommand().map(|(_, sub)| sub);
    for matches in std::iter::once(matches).chain(subcommand) {
        for id in matches.ids() {
            if matches.value_source(id.as_str()) != Some(ValueSource::EnvVariable) {
                continue;
            }
            let pair = (flag_of(id.as_str()), variable_of(id.as_str()));
            if !taken.contains(&pair) {
                taken.push(pair);
            }
        }
    }
    taken
}

/// The flag of a clap id: `no_wait` is `--no-wait`.
fn flag_of(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

/// The variable of a clap id: `no_wait` is `LOCKRUN_NO_WAIT`.
fn variable_of(id: &str) -> String {
    format!("LOCKRUN_{}", id.to_ascii_uppercase())
}

/// A run option typed on the command line before a subcommand, and that subcommand:
/// `lockrun --name x list` is a command named `list` whose `--` was left out, never the `list`
/// subcommand with the run's options dropped (`--name nightly drill` would drill instead).
fn run_option_before_subcommand(matches: &ArgMatches) -> Option<(String, String)> {
    let subcommand = matches.subcommand_name()?;
    Cli::command()
        .get_arguments()
        .filter(|arg| !arg.is_global_set() && !arg.is_positional())
        .find(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .and_then(|arg| arg.get_long().map(|long| format!("--{long}")))
        .map(|flag| (flag, subcommand.to_owned()))
}

/// Options that exclude each other may come one from the environment (a crontab's
/// `LOCKRUN_NO_WAIT=1`) and one from the command line (`--wait 5m` on one line): the command line
/// wins. Both from the same place is a usage error.
fn settle_overrides(cli: &mut Cli, typed_flags: &[&str]) -> Result<(), Error> {
    let typed = |flag: &str| typed_flags.contains(&flag);
    for Exclusion { a, b, why } in EXCLUSIONS {
        let ((a_flag, a_set, a_clear), (b_flag, b_set, b_clear)) = (a, b);
        if !(a_set(cli) && b_set(cli)) {
            continue;
        }
        let forget = |cli: &mut Cli, flag: &str| cli.from_variables.retain(|(f, _)| f != flag);
        match (typed(a_flag), typed(b_flag)) {
            (true, false) => {
                b_clear(cli);
                forget(cli, b_flag);
            }
            (false, true) => {
                a_clear(cli);
                forget(cli, a_flag);
            }
            (true, true) => {
                return Err(Error::usage(format!(
                    "{a_flag} cannot be used with {b_flag}{why}"
                )));
            }
            (false, false) => {
                return Err(Error::usage(format!(
                    "{a_flag} cannot be used with {b_flag}{why} (set by {} and {})",
                    variable_of(&id_of(a_flag)),
                    variable_of(&id_of(b_flag))
                )));
            }
        }
    }
    Ok(())
}

/// Help and version go to stdout ([`Parsed::Printed`]); every parse error is one line.
fn clap_error(e: &clap::Error, args: &[OsString]) -> Result<Parsed, Error> {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            match e.print() {
                Ok(()) => Ok(Parsed::Printed),
                // `lockrun --help | head -1` is the reader's choice; a full disk is not.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Parsed::Printed),
                Err(e) => Err(Error::os("cannot write to stdout", &e)),
            }
        }
        _ => Err(Error::Usage(usage_message(e, args))),
    }
}

/// The one line for a parse error, pointing at what the user most likely meant.
fn usage_message(e: &clap::Error, args: &[OsString]) -> String {
    let subcommand = subcommand_of(args);
    let help = match subcommand {
        Some(sub) => format!("lockrun {sub} --help"),
        None => "lockrun --help".to_owned(),
    };
    if e.kind() == ErrorKind::MissingRequiredArgument && subcommand.is_none() {
        let missing = missing_args(e);
        if missing.iter().any(|a| a.starts_with("--name")) {
            return match std::env::var_os(COMMAND_MARK) {
                Some(_) => MISSING_NAME_NESTED.to_owned(),
                None => MISSING_NAME.to_owned(),
            };
        }
        if missing.iter().any(|a| a.contains("<COMMAND>")) {
            return MISSING_COMMAND.to_owned();
        }
    }
    if e.kind() == ErrorKind::InvalidUtf8
        && let Some(variable) = variable_not_utf8(args)
    {
        return format!(
            "{variable} is not valid UTF-8: lockrun reads its settings as text (see {help})"
        );
    }
    if e.kind() == ErrorKind::MissingRequiredArgument
        && let Some(sub) = subcommand
        && missing_args(e).iter().any(|a| a == "<NAME>")
    {
        let force = if sub == "release" { " --force" } else { "" };
        return format!(
            "missing NAME: say which lease, as in lockrun {sub} NAME{force} (see {help})"
        );
    }
    if e.kind() == ErrorKind::UnknownArgument
        && let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidArg)
        && !word.starts_with('-')
        && subcommand.is_none()
    {
        let has_name = args.iter().any(|a| {
            let a = a.to_string_lossy();
            a == "--name" || a.starts_with("--name=")
        }) || std::env::var_os("LOCKRUN_NAME").is_some();
        if !has_name && let Some(sub) = subcommand_like(word) {
            return format!(
                "unexpected argument {word:?}: did you mean the {sub} subcommand? (see lockrun {sub} --help)"
            );
        }
        return match has_name || crate::name::LockName::parse(word).is_err() {
            true => format!(
                "unexpected argument {word:?}: put the command after --, as in lockrun --name NAME -- {word}"
            ),
            false => format!(
                "unexpected argument {word:?}: did you mean --name {word}? (lockrun --name {word} -- COMMAND)"
            ),
        };
    }
    let mut text = one_line(&e.render().to_string());
    if let Some(ContextValue::String(suggested)) = e.get(ContextKind::SuggestedArg).map(first_of)
        && !text.contains(&suggested)
    {
        text = format!("{text}; did you mean {suggested}?");
    }
    if let Some(ContextValue::String(suggested)) =
        e.get(ContextKind::SuggestedSubcommand).map(first_of)
        && !text.contains(&suggested)
    {
        text = format!("{text}; did you mean {suggested}?");
    }
    if let Some(variable) = bad_value_from_variable(e, args) {
        text = format!("{text} (set by {variable})");
    }
    format!("{text} (see {help})")
}

/// The `LOCKRUN_*` variable a refused value came from: its option is not on the command line.
fn bad_value_from_variable(e: &clap::Error, args: &[OsString]) -> Option<String> {
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // Shown as `--verbose...` or `--busy-exit-code <N>`.
    let long = shown
        .strip_prefix("--")?
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .next()?;
    let command = Cli::command();
    let arg = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))?;
    let typed = args.iter().map(|a| a.to_string_lossy()).any(|a| {
        a.strip_prefix("--")
            .is_some_and(|rest| rest == long || rest.starts_with(&format!("{long}=")))
            || arg.get_short().is_some_and(|short| {
                a.starts_with('-') && !a.starts_with("--") && a.contains(short)
            })
    });
    let variable = arg.get_env()?.to_string_lossy().into_owned();
    (!typed && std::env::var_os(&variable).is_some()).then_some(variable)
}

/// The `LOCKRUN_*` variable whose value is not UTF-8, when every option before `--` is: clap
/// reports both as "arguments".
fn variable_not_utf8(args: &[OsString]) -> Option<String> {
    let options = args.iter().skip(1).take_while(|a| *a != "--");
    if options.clone().any(|a| a.to_str().is_none()) {
        return None;
    }
    crate::environment::entries()
        .filter(|entry| crate::environment::key(entry).starts_with(b"LOCKRUN_"))
        .find(|entry| std::str::from_utf8(crate::environment::value(entry)).is_err())
        .map(|entry| String::from_utf8_lossy(crate::environment::key(entry)).into_owned())
}

/// A context value reduced to its first string.
fn first_of(value: &ContextValue) -> ContextValue {
    match value {
        ContextValue::Strings(list) => list
            .first()
            .map_or(ContextValue::None, |s| ContextValue::String(s.clone())),
        other => other.clone(),
    }
}

/// The arguments a missing-argument error names.
fn missing_args(e: &clap::Error) -> Vec<String> {
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(list)) => list.clone(),
        Some(ContextValue::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

const SUBCOMMANDS: [&str; 4] = ["status", "list", "release", "drill"];

/// The subcommand `word` is a slip of the keyboard for: one letter added, dropped, changed or
/// swapped with its neighbour (`stauts`, `lsit`, `relase`), two in a word of five or more.
fn subcommand_like(word: &str) -> Option<&'static str> {
    let slips = match word.chars().count() {
        0..=2 => return None,
        3..=4 => 1,
        _ => 2,
    };
    SUBCOMMANDS
        .into_iter()
        .find(|sub| edit_distance(word, sub) <= slips)
}

/// Letters to add, drop, change or swap (two side by side) to turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![(0..=b.len()).collect::<Vec<usize>>(); a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let changed = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + changed);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// The subcommand the arguments name, if any (the first word that is one, before `--`).
fn subcommand_of(args: &[OsString]) -> Option<&'static str> {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .find_map(|a| SUBCOMMANDS.iter().find(|s| **s == a).copied())
}

/// clap's message without the `error:` label, the usage block and tips, on one line.
fn one_line(rendered: &str) -> String {
    let body: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let text = body.join(" ");
    text.strip_prefix("error: ").unwrap_or(&text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slips_of_the_keyboard_find_their_subcommand() {
        for (word, sub) in [
            ("stauts", "status"),
            ("lsit", "list"),
            ("relase", "release"),
        ] {
            assert_eq!(subcommand_like(word), Some(sub), "{word}");
        }
        for word in ["deploy", "backup", "nightly", "x", "ls", "test"] {
            assert_eq!(subcommand_like(word), None, "{word}");
        }
    }

    /// [`flag_of`] and [`variable_of`] give every option with a variable its own flag and
    /// variable.
    #[test]
    fn every_variable_is_named_after_its_option() {
        for arg in Cli::command().get_arguments() {
            let Some(variable) = arg.get_env() else {
                continue;
            };
            let id = arg.get_id().as_str();
            assert_eq!(arg.get_long().map(|l| format!("--{l}")), Some(flag_of(id)));
            assert_eq!(variable.to_str(), Some(variable_of(id).as_str()));
        }
    }

    /// Each flag of [`EXCLUSIONS`] names an argument whose clap id [`id_of`] derives: a wrong one
    /// would make the command line never win over the environment.
    #[test]
    fn every_exclusive_flag_is_an_argument_of_that_id() {
        let command = Cli::command();
        for Exclusion { a, b, .. } in EXCLUSIONS {
            for (flag, _, _) in [a, b] {
                let arg = command
                    .get_arguments()
                    .find(|arg| arg.get_id() == id_of(flag).as_str())
                    .unwrap_or_else(|| panic!("no argument with the id of {flag}"));
                assert_eq!(
                    arg.get_long().map(|long| format!("--{long}")),
                    Some(flag.into())
                );
            }
        }
    }
}
