//! Links lockrun's programs as position-dependent executables on Linux with glibc.
//!
//! A position-independent lockrun has about 22,000 relative relocations (vtables, tables of
//! string slices), which the dynamic loader applies at every start by writing into some 100 pages
//! of read-only-after-relocation data: each a copy-on-write fault at start, then page-table work
//! again at each of the two forks (the watchdog and the command) and at exit. For a program whose
//! whole job on the embedded backend is a few milliseconds, that was 0.25–0.6 ms per run (of
//! about 2.5), and 0.6 MiB of peak RSS (`bench/file_vs_flock.py`). A fixed load address needs no
//! such relocations.
//!
//! The price is that the program's own code and data are at the same address in every run
//! (address-space layout randomisation still moves the stack, the heap and every shared library).
//! A packager who prefers the randomisation builds with `LOCKRUN_PIE=1` in the environment.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LOCKRUN_PIE");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    let pie_wanted = std::env::var_os("LOCKRUN_PIE").is_some_and(|v| !v.is_empty() && v != "0");
    if linux_gnu && !pie_wanted {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
