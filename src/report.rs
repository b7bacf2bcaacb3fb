//! lockrun's own messages: always on stderr, always prefixed `lockrun:`, filtered by `-q`/`-v`.
//! stdout belongs to the command alone.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};

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
        // A closed or broken stderr must not turn a message into a panic.
        let _ = writeln!(io::stderr().lock(), "lockrun: {message}");
    }
}

/// An error message, printed even with `-q`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::report::say($crate::report::QUIET, format_args!($($arg)*)) };
}

/// A warning: something went wrong that did not stop lockrun.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::report::say($crate::report::NORMAL, format_args!($($arg)*)) };
}

/// What lockrun is doing, with `-v`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::report::say($crate::report::VERBOSE, format_args!($($arg)*)) };
}

/// Per-renewal detail, with `-vv`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::report::say($crate::report::DEBUG, format_args!($($arg)*)) };
}

/// An I/O error as a lowercase fragment without the `(os error N)` tail.
pub fn io_reason(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
