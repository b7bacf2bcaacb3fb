//! The entry point: parse, resolve, run, and map every outcome to an exit status in one place.

use std::io::Write;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::cli::Cli;
use crate::config::Invocation;
use crate::exit::{self, Error};
use crate::{drill, holding, inspect, report};

/// The message for a run form without a command.
pub const MISSING_COMMAND: &str =
    "missing command: give it after --, as in lockrun --name NAME -- ./job.sh";

/// Runs lockrun with the process's arguments and returns its exit status.
pub fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "lockrun: internal error: {info}");
        std::process::exit(exit::INTERNAL.into());
    }));
    // The drill's internal probe writer, kept out of clap so that no help, man page or
    // completion offers it.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = drill::probe::from_args(&args) {
        return ExitCode::from(code);
    }
    let parsed = Cli::command()
        .try_get_matches_from(args)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return ExitCode::from(clap_error(&e)),
    };
    let settled = settle_overrides(&mut cli, &matches);
    report::set_level(cli.quiet, cli.verbose);
    match settled
        .and_then(|()| Invocation::resolve(cli))
        .and_then(execute)
    {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if !e.is_quiet_skip() {
                crate::error!("{e}");
            }
            ExitCode::from(e.code())
        }
    }
}

/// One of two options that exclude each other: its clap id, its flag, whether it is set, and how
/// to unset it.
type Exclusive = (&'static str, &'static str, fn(&Cli) -> bool, fn(&mut Cli));

const EXCLUSIVE: [(Exclusive, Exclusive); 3] = [
    (
        (
            "wait",
            "--wait",
            |c| c.run.wait.is_some(),
            |c| c.run.wait = None,
        ),
        (
            "no_wait",
            "--no-wait",
            |c| c.run.no_wait,
            |c| c.run.no_wait = false,
        ),
    ),
    (
        (
            "backend",
            "--backend",
            |c| c.backend.is_some(),
            |c| c.backend = None,
        ),
        (
            "backend_file",
            "--backend-file",
            |c| c.backend_file.is_some(),
            |c| c.backend_file = None,
        ),
    ),
    (
        ("quiet", "--quiet", |c| c.quiet, |c| c.quiet = false),
        ("verbose", "--verbose", |c| c.verbose > 0, |c| c.verbose = 0),
    ),
];

/// Options that exclude each other may come one from the environment (a crontab's
/// `LOCKRUN_NO_WAIT=1`) and one from the command line (`--wait 5m` on one line): the command line
/// wins. Both from the same place is a usage error.
fn settle_overrides(cli: &mut Cli, matches: &ArgMatches) -> Result<(), Error> {
    let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    for ((a_id, a_flag, a_set, a_clear), (b_id, b_flag, b_set, b_clear)) in EXCLUSIVE {
        if !(a_set(cli) && b_set(cli)) {
            continue;
        }
        match (typed(a_id), typed(b_id)) {
            (true, false) => b_clear(cli),
            (false, true) => a_clear(cli),
            _ => {
                return Err(Error::usage(format!(
                    "{a_flag} cannot be used with {b_flag}"
                )));
            }
        }
    }
    Ok(())
}

fn execute(invocation: Invocation) -> Result<u8, Error> {
    // One thread: the command is spawned from it, so its parent-death signal is tied to lockrun's
    // whole life rather than to a worker thread that may exit.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        match invocation {
            Invocation::Run(config) => holding::run(config).await,
            Invocation::Status {
                backend,
                name,
                json,
            } => inspect::status(&backend, &name, json).await,
            Invocation::List {
                backend,
                prefix,
                json,
            } => inspect::list(&backend, &prefix, json).await,
            Invocation::Release { backend, name } => inspect::force_release(&backend, &name).await,
            Invocation::Drill {
                backend,
                name,
                timing,
                json,
            } => drill::drill(&backend, &name, timing, json).await,
        }
    })
}

/// Help and version go to stdout with status 0; every parse error is one line and status 64.
fn clap_error(e: &clap::Error) -> u8 {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            0
        }
        _ => {
            let missing_command = e.kind() == ErrorKind::MissingRequiredArgument
                && e.render().to_string().contains("<COMMAND>");
            let message = match stray_word(e) {
                _ if missing_command => MISSING_COMMAND.to_owned(),
                Some(word) => format!(
                    "unexpected argument {word:?}: put the command after --, as in lockrun --name NAME -- {word}"
                ),
                None => one_line(&e.render().to_string()),
            };
            report::say(report::QUIET, format_args!("{message}"));
            exit::USAGE
        }
    }
}

/// The unexpected word, when it looks like a command rather than a mistyped flag.
fn stray_word(e: &clap::Error) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(word)) if !word.starts_with('-') => Some(word.clone()),
        _ => None,
    }
}

/// clap's message without the `error:` label, the usage block and the `--help` hint, on one line.
fn one_line(rendered: &str) -> String {
    let body: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let text = body.join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    format!("{text} (see lockrun --help)")
}
