//! How lockrun's programs are linked on Linux with glibc: at a fixed address, with the unwinder
//! inside, and, in release builds whose linker can, with the functions a short run executes laid
//! out side by side.
//!
//! **A fixed address.** A position-independent lockrun has about 22,000 relative relocations
//! (vtables, tables of string slices), which the dynamic loader applies at every start by writing
//! into some 100 pages of read-only-after-relocation data: each a copy-on-write fault at start,
//! then page-table work again at the watchdog's fork and at exit.
//! For a program whose whole job on the embedded backend is a few milliseconds, that was 0.25–0.6
//! ms per run (of about 2.5), and 0.6 MiB of peak RSS (`bench/file_vs_flock.py`). A fixed load
//! address needs no such relocations. The price is that the program's own code and data are at the
//! same address in every run (address-space layout randomisation still moves the stack, the heap
//! and every shared library); a packager who prefers the randomisation builds with `LOCKRUN_PIE=1`.
//!
//! **The unwinder inside.** Rust's standard library takes its unwinder (`_Unwind_*`, used for
//! backtraces) from `libgcc_s.so`. Each shared library costs every start its mapping, its
//! relocations and its page faults, and `libgcc_s` also runs a constructor that probes the CPU
//! with `cpuid`, which traps to the hypervisor on a virtual machine. Together with libm (see
//! `src/main.rs`) that was 0.2 ms of a 2.5 ms run. So the link searches first a directory whose
//! `libgcc_s.so` is a linker script naming the static `libgcc_eh.a`, which is what
//! `gcc -static-libgcc` links for C programs; a toolchain without it (tried once, as below) links
//! as before.
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
    let unwinder = static_unwinder_dir();
    if links_with(&["-L".to_owned(), format!("native={}", unwinder.display())]) {
        println!("cargo:rustc-link-search=native={}", unwinder.display());
    }
    let order = Path::new(&env("CARGO_MANIFEST_DIR").unwrap_or_default()).join(ORDER);
    let ordering = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ];
    let ordering_flags: Vec<String> = ordering
        .iter()
        .flat_map(|arg| ["-C".to_owned(), format!("link-arg={arg}")])
        .collect();
    if env("PROFILE").as_deref() == Some("release") && order.exists() && links_with(&ordering_flags)
    {
        for arg in &ordering {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A directory holding `libgcc_s.so`: a linker script that names the static `libgcc_eh.a`.
fn static_unwinder_dir() -> PathBuf {
    let dir = PathBuf::from(env("OUT_DIR").unwrap_or_default()).join("static-unwinder");
    let script = dir.join("libgcc_s.so");
    if !script.exists() {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(&script, "INPUT(-lgcc_eh)\n");
    }
    dir
}

/// Whether an empty program links for the target with the rustc flags `flags` added, through the
/// same rustc, linker and flags as lockrun.
fn links_with(flags: &[String]) -> bool {
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
    rustc.args(flags);
    rustc
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
