//! How lockrun's programs are linked on Linux with glibc: at a fixed address, and, in release
//! builds whose linker can, with the functions a short run executes laid out side by side.
//!
//! **A fixed address.** A position-independent lockrun has about 22,000 relative relocations
//! (vtables, tables of string slices), which the dynamic loader applies at every start by writing
//! into some 100 pages of read-only-after-relocation data: each a copy-on-write fault at start,
//! then page-table work again at each of the two forks (the watchdog and the command) and at exit.
//! For a program whose whole job on the embedded backend is a few milliseconds, that was 0.25–0.6
//! ms per run (of about 2.5), and 0.6 MiB of peak RSS (`bench/file_vs_flock.py`). A fixed load
//! address needs no such relocations. The price is that the program's own code and data are at the
//! same address in every run (address-space layout randomisation still moves the stack, the heap
//! and every shared library); a packager who prefers the randomisation builds with `LOCKRUN_PIE=1`.
//!
//! **The run's functions together.** `tools/startup-order.txt` lists the functions a short run
//! executes (written by `tools/startup_order.py`); lld places them first, so that they share a few
//! pages instead of touching about 25 more windows of the 8 MB of code: 0.1–0.15 ms and 2.5 MiB of
//! peak RSS a run. Whether the linker takes the list is tried once, by linking an empty program
//! with it; a linker that does not (GNU ld) links as before. Names in the list that no longer
//! match are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER: &str = "tools/startup-order.txt";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-env-changed=LOCKRUN_PIE");
    let linux_gnu = env("CARGO_CFG_TARGET_OS").as_deref() == Some("linux")
        && env("CARGO_CFG_TARGET_ENV").as_deref() == Some("gnu");
    if !linux_gnu {
        return;
    }
    let pie_wanted = env("LOCKRUN_PIE").is_some_and(|v| !v.is_empty() && v != "0");
    if !pie_wanted {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    let order = Path::new(&env("CARGO_MANIFEST_DIR").unwrap_or_default()).join(ORDER);
    let ordering = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    if env("PROFILE").as_deref() == Some("release") && order.exists() && links_with(&ordering) {
        for arg in &ordering {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Whether an empty program links for the target with `args` added, through the same rustc,
/// linker and flags as lockrun.
fn links_with(args: &[String]) -> bool {
    let out = PathBuf::from(env("OUT_DIR").unwrap_or_default());
    let source = out.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = Command::new(env("RUSTC").unwrap_or_else(|| "rustc".into()));
    rustc
        .arg("--crate-type=bin")
        .arg("--target")
        .arg(env("TARGET").unwrap_or_default())
        .arg("-o")
        .arg(out.join("link_probe"))
        .arg(&source);
    if let Some(linker) = env("RUSTC_LINKER") {
        rustc.arg("-C").arg(format!("linker={linker}"));
    }
    if let Some(flags) = env("CARGO_ENCODED_RUSTFLAGS").filter(|f| !f.is_empty()) {
        rustc.args(flags.split('\x1f'));
    }
    for arg in args {
        rustc.arg("-C").arg(format!("link-arg={arg}"));
    }
    rustc
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
