//! The entry point: parse, resolve, run, and map every outcome to an exit status in one place.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Invocation;
use crate::exit::{self, Error};
use crate::{cli, drill, holding, inspect, messages};

/// Set while the runtime is built: tokio panics, rather than returning an error, when the system
/// refuses it a descriptor for its signal pipe (a low `ulimit -n`).
static STARTING_RUNTIME: AtomicBool = AtomicBool::new(false);

/// Runs lockrun with the process's arguments and returns its exit status.
pub fn main() -> u8 {
    crate::supervisor::note_heap_and_stack();
    std::panic::set_hook(Box::new(|info| {
        if STARTING_RUNTIME.load(Ordering::Relaxed) {
            crate::error!("cannot start the runtime: {}", runtime_refusal());
        } else {
            // One line, as every message: the location and the message are two in std's form.
            crate::error!(
                "internal error: {}",
                messages::fragment(&info.to_string(), &[])
            );
        }
        crate::stderr_sink::flush(crate::stderr_sink::EXIT_FLUSH);
        std::process::exit(exit::INTERNAL.into());
    }));
    let code = run();
    // What a full stderr has not taken yet, now that the command is stopped and the lease gone.
    crate::stderr_sink::flush(crate::stderr_sink::EXIT_FLUSH);
    code
}

fn run() -> u8 {
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
    STARTING_RUNTIME.store(true, Ordering::Relaxed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::os("cannot start the runtime", &e));
    STARTING_RUNTIME.store(false, Ordering::Relaxed);
    let runtime = runtime?;
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

/// Why the system refused the runtime, asked again: a pipe made (and closed) now meets the same
/// refusal.
fn runtime_refusal() -> String {
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills the two-element array; both ends are closed at once.
    unsafe {
        if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return messages::io(&std::io::Error::last_os_error());
        }
        libc::close(ends[0]);
        libc::close(ends[1]);
    }
    "the system refused it a resource".into()
}
