//! The `lockrun` binary: everything lives in the library; see `app::main`.
//!
//! On Linux with glibc the binary has its own C `main` (`no_main`) instead of Rust's start-up,
//! which finds the main thread's stack guard by reading `/proc/self/maps` and puts a stack-overflow
//! handler on an alternate signal stack: about 0.09 ms of a 2.3 ms run on the file backend
//! (`bench/file_vs_flock.py`). What lockrun needs of that start-up is done here: closed standard
//! descriptors are opened on `/dev/null` (so that no lock file or connection becomes stdout),
//! SIGPIPE is ignored (a closed pipe is an error to report, not a death; SIGXFSZ likewise, and
//! the command gets both back as lockrun found them), and stdout is flushed
//! at the end. glibc hands the arguments to the standard library as before. The one thing lost:
//! a stack overflow ends lockrun with SIGSEGV instead of a message first.

#![cfg_attr(all(target_os = "linux", target_env = "gnu", not(test)), no_main)]

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(test))))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(lockrun::app::main())
}

/// The process's entry, called by the C library.
#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    use std::io::Write;
    open_closed_standard_descriptors();
    lockrun::supervisor::ignore_for_lockrun();
    let code = lockrun::app::main();
    let _ = std::io::stdout().flush();
    code.into()
}

/// Opens `/dev/null` on each of descriptors 0, 1 and 2 that is closed; if that fails, lockrun
/// cannot run safely and aborts, as Rust's start-up does.
#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
fn open_closed_standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: polls three entries of a local array, without waiting.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0;
    for pollfd in fds {
        let closed = match polled {
            true => pollfd.revents & libc::POLLNVAL != 0,
            // SAFETY: asks about a descriptor number; no memory is passed.
            false => (unsafe { libc::fcntl(pollfd.fd, libc::F_GETFD) }) == -1,
        };
        // SAFETY: the lowest free descriptor is this one, as the lower ones are open by now.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != pollfd.fd {
            std::process::abort();
        }
    }
}

/// `pow`, for the one caller lockrun has (the AWS SDK's retry backoff), from the pure-Rust `libm`
/// crate: defined here, it keeps the linker from needing glibc's libm, which every start would
/// otherwise map and relocate (about 0.1 ms; see `build.rs` on the unwinder). Both are accurate to
/// within one unit in the last place.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}
