//! The command line: its definition for clap ([`args`]) and the parse around clap ([`parse`]):
//! environment values that count as unset, which of two exclusive options wins, and one-line
//! usage errors that point the right way.
//!
//! Nothing here touches the world or judges values beyond their type: durations, names and URLs
//! stay strings until `config` resolves them, so that every bad value gets the same one-line,
//! exit-64 treatment.

mod args;
mod parse;

pub use args::{Cli, Command, RunArgs, command};
pub use parse::{MISSING_COMMAND, Parsed, parse};
