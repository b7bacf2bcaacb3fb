//! lockrun's own messages: always on stderr, always prefixed `lockrun:`, filtered by `-q`/`-v`;
//! and the helpers messages go through — [`fragment`] for text that comes from elsewhere (an I/O
//! error, a server's reply, a client library), [`printable`] for what other processes wrote
//! (a holder's note, host or user), [`duration`] for times. stdout belongs to the command alone.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Errors only.
pub const QUIET: u8 = 0;
/// Errors and warnings (the default).
pub const NORMAL: u8 = 1;
/// Plus what lockrun is doing: acquisition, token, release.
pub const VERBOSE: u8 = 2;
/// Plus every renewal.
pub const DEBUG: u8 = 3;

static LEVEL: AtomicU8 = AtomicU8::new(NORMAL);

/// Sets the level from `-q` and the count of `-v`.
pub fn set_level(quiet: bool, verbose: u8) {
    let level = if quiet {
        QUIET
    } else {
        NORMAL.saturating_add(verbose).min(DEBUG)
    };
    LEVEL.store(level, Ordering::Relaxed);
}

/// Whether messages of `level` are printed.
pub fn enabled(level: u8) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level
}

/// Prints `lockrun: {message}` to stderr when `level` is enabled; errors use [`QUIET`].
pub fn say(level: u8, message: std::fmt::Arguments<'_>) {
    if enabled(level) {
        // Never blocks, and a closed or broken stderr never turns a message into a panic.
        crate::stderr_sink::write_line(format!("lockrun: {message}\n").as_bytes());
    }
}

/// An error message, printed even with `-q`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::messages::say($crate::messages::QUIET, format_args!($($arg)*)) };
}

/// A warning: something went wrong that did not stop lockrun.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::messages::say($crate::messages::NORMAL, format_args!($($arg)*)) };
}

/// What lockrun is doing, with `-v`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::messages::say($crate::messages::VERBOSE, format_args!($($arg)*)) };
}

/// Per-renewal detail, with `-vv`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::messages::say($crate::messages::DEBUG, format_args!($($arg)*)) };
}

/// Text from elsewhere, made fit to follow `lockrun: ...: `: every secret replaced by `***`,
/// on one line, without an `(os error N)` tail, starting in lowercase (unless it starts with an
/// acronym such as `DB` or `ERR`).
pub fn fragment(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret.as_str(), "***");
    }
    if let Some(at) = text.find(" (os error") {
        text.truncate(at);
    }
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = one_line.trim_end_matches('.');
    let mut chars = text.chars();
    match (chars.next(), chars.clone().next()) {
        (Some(first), next) if !next.is_some_and(char::is_uppercase) => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => text.to_owned(),
    }
}

/// Text another process wrote (a holder's note, host or user, read from the backend), made safe
/// to print on a terminal: control characters but tabs, and the Unicode controls that reorder or hide
/// what follows them (bidirectional overrides, embeddings and isolates), are shown as `\u{…}`
/// escapes instead of acting on the display.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let acts = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.contains(acts) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match acts(c) {
            true => shown.push_str(&c.escape_unicode().to_string()),
            false => shown.push(c),
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// The I/O errors in `e`'s chain of causes, outermost first. An I/O error that wraps an error
/// of its own (a path put in its text, a client library's layer) is followed into that error:
/// its `source` would skip it.
pub fn io_errors<'e>(e: &'e (dyn std::error::Error + 'static)) -> Vec<&'e io::Error> {
    let mut found = Vec::new();
    let mut at = Some(e);
    while let Some(current) = at {
        at = match current.downcast_ref::<io::Error>() {
            Some(io) => {
                found.push(io);
                io.get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static))
            }
            None => current.source(),
        };
    }
    found
}

/// The OS error code of `e`, or of an I/O error it wraps (one given a path in its text, say).
pub fn os_error_within(e: &io::Error) -> Option<i32> {
    io_errors(e).into_iter().find_map(io::Error::raw_os_error)
}

/// An I/O error as a fragment.
pub fn io(e: &io::Error) -> String {
    fragment(&e.to_string(), &[])
}

/// The operating system's reason at the bottom of `e`'s chain of causes (`connection refused`),
/// as a fragment; `None` when no cause is an error the system returned (an I/O error that only
/// carries a library's own, such as a TLS alert, keeps the context around it). Client libraries
/// wrap the system's reason in layers of their own ("dispatch failure: io error: client error
/// (Connect): tcp connect error: ...") that say nothing more to a user.
pub fn io_cause(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    io_errors(e)
        .into_iter()
        .rfind(|io| io.raw_os_error().is_some())
        .map(self::io)
}

/// A duration as people write it (`1s 500ms`), rounded to the millisecond.
pub fn duration(d: Duration) -> String {
    let rounded = Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX));
    humantime::format_duration(rounded).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_cannot_reorder_or_hide_what_follows() {
        assert!(matches!(
            printable("deploy #42 — שלום"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(printable("a\u{202e}gnp.exe"), "a\\u{202e}gnp.exe");
        assert_eq!(printable("x\u{1b}[2Jy\u{2066}"), "x\\u{1b}[2Jy\\u{2066}");
    }

    #[test]
    fn fragments_are_scrubbed_lowercase_single_lines() {
        let secrets = vec!["p@ss".to_owned(), "p%40ss".to_owned()];
        assert_eq!(
            fragment("Failed near p@ss and p%40ss (os error 13)", &secrets),
            "failed near *** and ***"
        );
        assert_eq!(
            fragment("DB index is out of range.", &[]),
            "DB index is out of range"
        );
        assert_eq!(fragment("Bad\nthing\n  here", &[]), "bad thing here");
        assert_eq!(fragment("", &[]), "");
    }

    #[test]
    fn an_io_cause_is_found_under_wrappers() {
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "tcp connect error: {}", self.0)
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrapper(io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert_eq!(io_cause(&refused).as_deref(), Some("connection refused"));
        assert_eq!(io_cause(&std::fmt::Error), None);
        let alert = Wrapper(io::Error::other("invalid peer certificate"));
        assert_eq!(io_cause(&alert), None);
    }

    #[test]
    fn durations_round_to_milliseconds() {
        assert_eq!(duration(Duration::from_nanos(1_500_400_000)), "1s 500ms");
        assert_eq!(duration(Duration::from_secs(192)), "3m 12s");
    }
}
