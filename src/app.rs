//! The entry point: parse, resolve, run, and map every outcome to an exit status in one place.

use std::io::Write;

use crate::config::Invocation;
use crate::exit::{self, Error};
use crate::{cli, drill, holding, inspect, messages};

/// Runs lockrun with the process's arguments and returns its exit status.
pub fn main() -> u8 {
    crate::supervisor::note_heap_and_stack();
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "lockrun: internal error: {info}");
        std::process::exit(exit::INTERNAL.into());
    }));
    // The drill's internal probe writer, kept out of clap so that no help, man page or
    // completion offers it.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = drill::probe::from_args(&args) {
        return code;
    }
    let cli = match cli::parse(args) {
        Ok(cli::Parsed::Cli(cli)) => cli,
        Ok(cli::Parsed::Printed) => return 0,
        Err(e) => {
            crate::error!("{e}");
            return e.code();
        }
    };
    messages::set_level(cli.quiet, cli.verbose);
    match Invocation::resolve(*cli).and_then(execute) {
        Ok(code) => code,
        Err(e) => {
            if !e.is_quiet_skip() {
                crate::error!("{e}");
            }
            e.code()
        }
    }
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
                quiet,
            } => inspect::status(&backend, &name, json, quiet).await,
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
