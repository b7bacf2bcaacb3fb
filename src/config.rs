//! Turning parsed flags into a validated [`Invocation`]: names, durations, limits, the backend URL
//! and the lease timing are all judged here, before anything connects or runs. Every problem is a
//! one-line [`Error::Usage`] (exit 64).

use std::ffi::OsString;
use std::time::Duration;

use crate::backend::BackendSpec;
use crate::cli::{Cli, Command};
use crate::exit::Error;
use crate::name::LockName;
use crate::timing::Timing;

/// Longest `--note`, in bytes.
pub const MAX_NOTE_LEN: usize = 1024;
/// Largest `--limit`.
pub const MAX_LIMIT: u32 = 1024;

/// What the user asked for, validated.
#[derive(Debug)]
pub enum Invocation {
    Run(RunConfig),
    Status {
        backend: BackendSpec,
        name: LockName,
        json: bool,
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
    pub token_env: String,
    pub note: Option<String>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

impl Invocation {
    /// Validates everything the command line says.
    pub fn resolve(cli: Cli) -> Result<Self, Error> {
        let from_file = cli
            .backend_file
            .as_deref()
            .map(read_backend_file)
            .transpose()?;
        let backend = match from_file.as_ref().or(cli.backend.as_ref()) {
            Some(url) => BackendSpec::parse(url),
            None => BackendSpec::default_file(),
        }
        .map_err(Error::Usage)?;
        let name = |raw: &str| LockName::parse(raw).map_err(Error::Usage);
        Ok(match cli.subcommand {
            Some(Command::Status { name: raw, json }) => Invocation::Status {
                backend,
                name: name(&raw)?,
                json,
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
                let ttl = duration("--ttl", &ttl)?;
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
    let ttl = duration("--ttl", &run.ttl)?;
    let renew = run
        .renew
        .as_deref()
        .map(|v| duration("--renew", v))
        .transpose()?;
    let kill_after = run
        .kill_after
        .as_deref()
        .map(|v| duration("--kill-after", v))
        .transpose()?;
    let timing = Timing::new(ttl, renew, kill_after).map_err(Error::Usage)?;
    let wait = match (run.no_wait, run.wait.as_deref()) {
        (true, _) => Some(Duration::ZERO),
        (false, Some(v)) => Some(duration_or_zero("--wait", v)?),
        (false, None) => None,
    };
    let limit = parse_limit(&run.limit)?;
    validate_env_name(&run.token_env)?;
    if let Some(note) = &run.note {
        validate_note(note)?;
    }
    let mut command = run.command.into_iter();
    let program = command
        .next()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Error::usage(crate::app::MISSING_COMMAND))?;
    Ok(RunConfig {
        name,
        backend,
        timing,
        wait,
        busy_exit_code: run.busy_exit_code,
        limit,
        token_env: run.token_env,
        note: run.note,
        program,
        args: command.collect(),
    })
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

/// The backend URL kept in a file: its first line, trimmed.
fn read_backend_file(path: &std::path::Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::usage(format!(
            "cannot read --backend-file {}: {}",
            path.display(),
            crate::report::io_reason(&e)
        ))
    })?;
    let url = text.lines().next().unwrap_or_default().trim();
    if url.is_empty() {
        return Err(Error::usage(format!(
            "--backend-file {} is empty: put the backend URL on its first line",
            path.display()
        )));
    }
    Ok(url.to_owned())
}

/// A positive duration such as `500ms`, `15s` or `2m`.
pub fn duration(flag: &str, raw: &str) -> Result<Duration, Error> {
    let d = duration_or_zero(flag, raw)?;
    if d.is_zero() {
        return Err(Error::usage(format!(
            "invalid {flag} {raw:?}: must be more than zero"
        )));
    }
    Ok(d)
}

/// A duration that may be zero (`--wait 0`).
fn duration_or_zero(flag: &str, raw: &str) -> Result<Duration, Error> {
    let trimmed = raw.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    let d = humantime::parse_duration(trimmed).map_err(|e| {
        Error::usage(format!(
            "invalid {flag} {raw:?}: {} (use a number with a unit: 500ms, 15s, 2m)",
            lowercase(&e.to_string())
        ))
    })?;
    // Keep every later deadline computation (boot clock + duration) far from overflow.
    if d > Duration::from_secs(100 * 365 * 24 * 3600) {
        return Err(Error::usage(format!(
            "invalid {flag} {raw:?}: longer than a century"
        )));
    }
    Ok(d)
}

fn parse_limit(raw: &str) -> Result<u32, Error> {
    match raw.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(Error::usage(format!(
            "invalid --limit {raw:?}: must be a whole number from 1 to {MAX_LIMIT}"
        ))),
    }
}

fn validate_env_name(var: &str) -> Result<(), Error> {
    let mut chars = var.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(Error::usage(format!(
            "invalid --token-env {var:?}: use letters, digits and _, not starting with a digit"
        )));
    }
    Ok(())
}

fn validate_note(note: &str) -> Result<(), Error> {
    if note.len() > MAX_NOTE_LEN {
        return Err(Error::usage(format!(
            "invalid --note: {} bytes is longer than {MAX_NOTE_LEN}",
            note.len()
        )));
    }
    if note.chars().any(char::is_control) {
        return Err(Error::usage(
            "invalid --note: it contains a control character (a newline?)",
        ));
    }
    Ok(())
}

fn lowercase(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_units_and_reject_zero() {
        assert_eq!(
            duration("--ttl", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(duration("--ttl", "2m").unwrap(), Duration::from_secs(120));
        for bad in ["0", "0s", "15", "abc", "-1s", "", "1000000000000h"] {
            let err = duration("--ttl", bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid --ttl"), "{bad}: {err}");
        }
        assert_eq!(duration_or_zero("--wait", "0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn limits_and_env_names_are_checked() {
        assert_eq!(parse_limit("3").unwrap(), 3);
        for bad in ["0", "-1", "x", "1025", ""] {
            assert!(parse_limit(bad).is_err(), "{bad}");
        }
        assert!(validate_env_name("FENCE_2").is_ok());
        for bad in ["", "2X", "A-B", "A B", "A=B"] {
            assert!(validate_env_name(bad).is_err(), "{bad}");
        }
    }
}
