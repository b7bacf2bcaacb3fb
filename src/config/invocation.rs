//! [`Invocation`]: the whole command line, validated — the backend (from `--backend` or
//! `--backend-file`), the subcommand's arguments, and for the run form every option in a
//! [`RunConfig`].

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::{note, values};
use crate::backend::{BackendSpec, Mode};
use crate::cli::{Cli, Command, MISSING_COMMAND};
use crate::exit::Error;
use crate::name::LockName;
use crate::timing::Timing;

/// What the user asked for, validated.
#[derive(Debug)]
pub enum Invocation {
    Run(RunConfig),
    Status {
        backend: BackendSpec,
        name: LockName,
        json: bool,
        /// Print nothing; the exit status says whether NAME is held.
        quiet: bool,
    },
    List {
        backend: BackendSpec,
        prefix: String,
        json: bool,
    },
    Release {
        backend: BackendSpec,
        name: LockName,
    },
    Drill {
        backend: BackendSpec,
        name: LockName,
        /// The drill's lease timing (the run form's rules, default renewal and grace).
        timing: Timing,
        json: bool,
    },
}

/// The run form, validated.
#[derive(Debug)]
pub struct RunConfig {
    pub name: LockName,
    pub backend: BackendSpec,
    pub timing: Timing,
    /// `None`: wait forever; zero: try once.
    pub wait: Option<Duration>,
    pub busy_exit_code: u8,
    pub limit: u32,
    pub mode: Mode,
    pub token_env: String,
    pub note: Option<String>,
    /// The command's own time limit.
    pub timeout: Option<Duration>,
    /// Run at most once per this long, fleet-wide.
    pub min_interval: Option<Duration>,
    pub supersede: bool,
    /// How often to say who holds NAME while waiting; `None` never.
    pub progress: Option<Duration>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl Invocation {
    /// Validates everything the command line says. A bad value that came from a `LOCKRUN_*`
    /// variable is reported with the variable's name, as clap's own errors are.
    pub fn resolve(mut cli: Cli) -> Result<Self, Error> {
        let from_variables = std::mem::take(&mut cli.from_variables);
        Self::resolve_values(cli).map_err(|e| match e {
            Error::Usage(message) => Error::Usage(name_the_variable(message, &from_variables)),
            other => other,
        })
    }

    fn resolve_values(cli: Cli) -> Result<Self, Error> {
        let from_file = cli
            .backend_file
            .as_deref()
            .map(read_backend_file)
            .transpose()?;
        let backend = match from_file.as_ref().or(cli.backend.as_ref()) {
            Some(url) => BackendSpec::parse(url),
            None => BackendSpec::default_file(),
        }
        .and_then(|spec| spec.check_files().map(|()| spec))
        .map_err(Error::Usage)?;
        let name = |raw: &str| LockName::parse(raw).map_err(Error::Usage);
        Ok(match cli.subcommand {
            Some(Command::Status { name: raw, json }) => Invocation::Status {
                backend,
                name: name(&raw)?,
                json,
                quiet: cli.quiet,
            },
            Some(Command::List { prefix, json }) => Invocation::List {
                backend,
                prefix: prefix.unwrap_or_default(),
                json,
            },
            Some(Command::Release { name: raw, force }) => {
                let name = name(&raw)?;
                if !force {
                    return Err(Error::usage(format!(
                        "release {name} needs --force: it breaks another process's lease"
                    )));
                }
                Invocation::Release { backend, name }
            }
            Some(Command::Drill {
                ttl,
                name: raw,
                json,
            }) => {
                let ttl = values::duration("--ttl", &ttl)?;
                let timing = Timing::new(ttl, None, None).map_err(Error::Usage)?;
                let name = match raw {
                    Some(raw) => name(&raw)?,
                    None => default_drill_name()?,
                };
                Invocation::Drill {
                    backend,
                    name,
                    timing,
                    json,
                }
            }
            None => Invocation::Run(resolve_run(cli, backend)?),
        })
    }
}

fn resolve_run(cli: Cli, backend: BackendSpec) -> Result<RunConfig, Error> {
    let run = cli.run;
    let name = LockName::parse(run.name.as_deref().unwrap_or_default()).map_err(Error::Usage)?;
    let optional = |flag: &str, raw: &Option<String>| {
        raw.as_deref()
            .map(|v| values::duration(flag, v))
            .transpose()
    };
    let ttl = values::duration("--ttl", &run.ttl)?;
    let renew = optional("--renew", &run.renew)?;
    let kill_after = optional("--kill-after", &run.kill_after)?;
    let timing = Timing::new(ttl, renew, kill_after).map_err(Error::Usage)?;
    let wait = match (run.no_wait, run.wait.as_deref()) {
        (true, _) => Some(Duration::ZERO),
        (false, Some(v)) => Some(values::wait(v)?),
        (false, None) => None,
    };
    let limit = run.limit.as_deref().map_or(Ok(1), values::limit)?;
    // `cli::parse` has settled --shared against --limit (even --limit 1: a cap that shared
    // holders, who are not counted, would not keep).
    let mode = match run.shared {
        false => Mode::Exclusive,
        true => Mode::Shared,
    };
    values::token_env(&run.token_env)?;
    let progress = match values::progress(&run.progress)? {
        d if d.is_zero() || cli.quiet => None,
        d => Some(d),
    };
    let env = |key: &str| std::env::var(key).ok();
    let note = note::resolve(run.note, &env);
    let mut command = run.command.into_iter();
    let program = command
        .next()
        .ok_or_else(|| Error::usage(MISSING_COMMAND))?;
    if program.is_empty() {
        return Err(Error::usage(
            "the command is an empty string: give a program after --, as in lockrun --name NAME -- ./job.sh",
        ));
    }
    Ok(RunConfig {
        name,
        backend,
        timing,
        wait,
        busy_exit_code: run.busy_exit_code,
        limit,
        mode,
        token_env: run.token_env,
        note,
        timeout: optional("--timeout", &run.timeout)?,
        min_interval: optional("--min-interval", &run.min_interval)?,
        supersede: run.supersede,
        progress,
        program,
        args: command.collect(),
    })
}

/// `message` with ` (set by VARIABLE)` added when the option it is about came from VARIABLE:
/// `invalid --ttl "15": … (set by LOCKRUN_TTL)` tells a crontab's author where to look.
fn name_the_variable(message: String, from_variables: &[(String, String)]) -> String {
    let about = |flag: &str| -> bool {
        let subjects: &[&str] = match flag {
            "--backend" => &["invalid backend "],
            "--backend-file" => &["cannot read --backend-file ", "--backend-file "],
            "--name" => &["invalid lock name "],
            _ => &[],
        };
        subjects.iter().any(|s| message.starts_with(s))
            || message
                .strip_prefix("invalid ")
                .and_then(|rest| rest.strip_prefix(flag))
                .is_some_and(|rest| rest.starts_with([' ', ':']))
    };
    match from_variables.iter().find(|(flag, _)| about(flag)) {
        Some((_, variable)) => format!("{message} (set by {variable})"),
        None => message,
    }
}

/// `lockrun-drill/HOST-PID`: a name of the drill's own, which no real lock uses. Characters a
/// name may not hold become `-`.
fn default_drill_name() -> Result<LockName, Error> {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let pid = std::process::id();
    LockName::parse(&format!("lockrun-drill/{host}-{pid}"))
        .or_else(|_| LockName::parse(&format!("lockrun-drill/{pid}")))
        .map_err(Error::Internal)
}

/// The backend URL kept in a file: its first line, trimmed. A file that holds a password and
/// that anyone may read is refused, as ssh refuses such a key.
fn read_backend_file(path: &std::path::Path) -> Result<String, Error> {
    let cannot = |e: std::io::Error| {
        Error::usage(format!(
            "cannot read --backend-file {}: {}",
            path.display(),
            crate::messages::io(&e)
        ))
    };
    // At most this much is read: a URL is short, and `/dev/zero` given by mistake must not be
    // read until memory runs out.
    const MOST: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MOST).read_to_end(&mut bytes))
        .map_err(cannot)?;
    let first_line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    if first_line.len() as u64 >= MOST {
        return Err(Error::usage(format!(
            "--backend-file {}: its first line is over 64 KiB; put the backend URL on it",
            path.display()
        )));
    }
    let url = std::str::from_utf8(first_line)
        .map_err(|_| {
            Error::usage(format!(
                "--backend-file {}: its first line is not text",
                path.display()
            ))
        })?
        .trim();
    if url.is_empty() {
        return Err(Error::usage(format!(
            "--backend-file {} is empty: put the backend URL on its first line",
            path.display()
        )));
    }
    let mode = std::fs::metadata(path)
        .map_err(cannot)?
        .permissions()
        .mode();
    if mode & 0o004 != 0 && crate::backend::has_secret(url) {
        return Err(Error::usage(format!(
            "--backend-file {} holds a password and anyone may read it (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        )));
    }
    Ok(url.to_owned())
}
