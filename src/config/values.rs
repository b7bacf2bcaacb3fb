//! Single values from the command line, judged one at a time: durations (with a unit, or a bare
//! number of seconds for `--wait` as `flock -w` takes it), `--limit`, `--token-env`.

use std::time::Duration;

use crate::backend::MAX_LIMIT;
use crate::exit::Error;

/// Longest duration accepted: every later deadline (boot clock + duration) stays far from
/// overflow.
const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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

/// A duration that may be zero (`--progress 0`).
pub fn duration_or_zero(flag: &str, raw: &str) -> Result<Duration, Error> {
    let trimmed = raw.trim();
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    // --wait alone also takes bare seconds, as `flock -w` does.
    let hint = match flag {
        "--wait" => "use seconds (10, 0.5) or a number with a unit: 500ms, 2m",
        _ => "use a number with a unit: 500ms, 15s, 2m",
    };
    let d = humantime::parse_duration(trimmed).map_err(|e| {
        Error::usage(format!(
            "invalid {flag} {raw:?}: {} ({hint})",
            crate::messages::fragment(&e.to_string(), &[])
        ))
    })?;
    if d > CENTURY {
        return Err(Error::usage(format!(
            "invalid {flag} {raw:?}: longer than a century"
        )));
    }
    Ok(d)
}

/// The shortest `--progress` pace: each line asks the backend who holds NAME.
const MIN_PROGRESS: Duration = Duration::from_millis(100);

/// `--progress`: `0` (never), or a pace of at least [`MIN_PROGRESS`].
pub fn progress(raw: &str) -> Result<Duration, Error> {
    let d = duration_or_zero("--progress", raw)?;
    if !d.is_zero() && d < MIN_PROGRESS {
        return Err(Error::usage(format!(
            "invalid --progress {raw:?}: must be 0 (never) or at least {} (each line asks the \
             backend who holds the name)",
            crate::messages::duration(MIN_PROGRESS)
        )));
    }
    Ok(d)
}

/// `--wait`: a duration, or a bare (possibly fractional) number of seconds as `flock -w` takes it.
pub fn wait(raw: &str) -> Result<Duration, Error> {
    let trimmed = raw.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let Ok(secs) = trimmed.parse::<f64>() else {
            return Err(Error::usage(format!(
                "invalid --wait {raw:?}: use seconds (10, 0.5) or a duration (500ms, 2m)"
            )));
        };
        return match secs <= CENTURY.as_secs_f64() {
            true => Ok(Duration::from_secs_f64(secs)),
            false => Err(Error::usage(format!(
                "invalid --wait {raw:?}: longer than a century"
            ))),
        };
    }
    duration_or_zero("--wait", raw)
}

/// `--limit`: a whole number from 1 to [`MAX_LIMIT`].
pub fn limit(raw: &str) -> Result<u32, Error> {
    match raw.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(Error::usage(format!(
            "invalid --limit {raw:?}: must be a whole number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// `--token-env`: a variable name that is not lockrun's own.
pub fn token_env(var: &str) -> Result<(), Error> {
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
    if var.starts_with("LOCKRUN_") {
        return Err(Error::usage(format!(
            "invalid --token-env {var:?}: lockrun sets the LOCKRUN_* variables itself; pick another name"
        )));
    }
    if BELONGS_TO_THE_COMMAND.contains(&var) || var.starts_with("LD_") {
        return Err(Error::usage(format!(
            "invalid --token-env {var:?}: the command needs {var} for itself (a token there \
             would replace it); pick a name of your own, such as FENCING_TOKEN"
        )));
    }
    Ok(())
}

/// Variables whose replacement by a number would break the command's own running (finding
/// programs, its home, its shell, how the dynamic loader starts it): never a `--token-env`.
const BELONGS_TO_THE_COMMAND: [&str; 6] = ["PATH", "HOME", "SHELL", "IFS", "PWD", "TMPDIR"];

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
    fn wait_takes_bare_seconds_like_flock() {
        assert_eq!(wait("10").unwrap(), Duration::from_secs(10));
        assert_eq!(wait("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(wait("0").unwrap(), Duration::ZERO);
        assert_eq!(wait("2m").unwrap(), Duration::from_secs(120));
        for bad in ["1.2.3", "."] {
            let err = wait(bad).unwrap_err().to_string();
            assert!(err.contains("use seconds"), "{bad}: {err}");
        }
        for bad in ["-1", "x"] {
            let err = wait(bad).unwrap_err().to_string();
            assert!(err.contains("use seconds"), "{bad}: {err}");
        }
        for long in ["3153600001", "99999999999999999999999", "36501d"] {
            let err = wait(long).unwrap_err().to_string();
            assert!(err.ends_with("longer than a century"), "{long}: {err}");
        }
    }

    #[test]
    fn progress_is_never_or_a_human_pace() {
        assert_eq!(progress("0").unwrap(), Duration::ZERO);
        assert_eq!(progress("100ms").unwrap(), Duration::from_millis(100));
        for fast in ["1ns", "1ms", "99ms"] {
            let err = progress(fast).unwrap_err().to_string();
            assert!(err.contains("at least 100ms"), "{fast}: {err}");
        }
    }

    #[test]
    fn limits_and_env_names_are_checked() {
        assert_eq!(limit("3").unwrap(), 3);
        for bad in ["0", "-1", "x", "1025", ""] {
            assert!(limit(bad).is_err(), "{bad}");
        }
        assert!(token_env("FENCE_2").is_ok());
        for bad in ["", "2X", "A-B", "A B", "A=B", "LOCKRUN_TTL_MS", "LOCKRUN_X"] {
            assert!(token_env(bad).is_err(), "{bad}");
        }
        for taken in ["PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
            let err = token_env(taken).unwrap_err().to_string();
            assert!(err.contains("the command needs"), "{taken}: {err}");
        }
        // Only those names: one that merely contains them is the user's own.
        for own in ["MY_PATH", "PATHS", "HOME_TOKEN", "OLD_TOKEN"] {
            assert!(token_env(own).is_ok(), "{own}");
        }
    }
}
