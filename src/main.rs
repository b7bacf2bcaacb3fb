//! The `lockrun` binary: everything lives in the library; see `app::main`.

fn main() -> std::process::ExitCode {
    lockrun::app::main()
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
