#!/usr/bin/env python3
"""Writes tools/startup-order.txt: the functions a short lockrun run executes, for the linker.

A run on the embedded backend executes a few hundred of the binary's thousands of functions,
scattered over 8 MB of code; each 64 KiB window of code it touches is a page fault and resident
memory. `build.rs` hands this list to the linker (lld's --symbol-ordering-file), which then
places those functions side by side at the start of the code: about 40 fewer faults a run and
2 MiB less peak RSS (`bench/file_vs_flock.py`).

The list names functions by their mangled symbols, whose hashes depend on the toolchain and the
dependencies' versions. A name that no longer matches is skipped by the linker (the run is then
only as fast as without it), so regenerate the list after a toolchain or dependency update, or a
rename on the run's path:

    cargo build --release && python3 tools/startup_order.py

Needs valgrind (Debian `valgrind`). It runs lockrun on the file backend only, in a temporary
directory.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tools" / "startup-order.txt"
CALLED = re.compile(r"^c?fn=\(\d+\) (\S+)$")


def invocations(state: Path) -> list[list[str]]:
    """The runs whose code is laid out together: what cron and CI lines do most."""
    backend = ["--backend", f"file://{state}"]
    return [
        [*backend, "--name", "job", "--", "true"],
        [*backend, "--name", "job", "--wait", "1s", "-v", "--", "true"],
        [*backend, "--name", "job", "--shared", "--", "true"],
        [*backend, "status", "job"],
        ["--name", "job", "--backend", f"file://{state}", "--no-wait", "--", "false"],
    ]


def functions_run(binary: Path, args: list[str], work: Path) -> set[str]:
    """Mangled names of the functions callgrind saw `binary args` call (the forked watchdog and
    the command's pre-exec child included)."""
    out = work / "callgrind.%p"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={out}",
         str(binary), *args],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
    )
    names: set[str] = set()
    for profile in work.glob("callgrind.*"):
        for line in profile.read_text(errors="replace").splitlines():
            if m := CALLED.match(line):
                names.add(m.group(1))
        profile.unlink()
    return names


def defined_functions(binary: Path) -> set[str]:
    """The function symbols `binary` defines."""
    nm = subprocess.run(["nm", "--defined-only", str(binary)], capture_output=True, text=True,
                        check=True).stdout
    return {p[2] for p in (l.split() for l in nm.splitlines()) if len(p) == 3 and p[1] in "tTwW"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "lockrun"),
                    help="the release lockrun to profile (default: target/release/lockrun)")
    binary = Path(ap.parse_args().bin)
    if not binary.exists():
        print(f"no lockrun at {binary}: run `cargo build --release` first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="lockrun-order-") as tmp:
        work = Path(tmp)
        called: set[str] = set()
        for args in invocations(work / "state"):
            called |= functions_run(binary, args, work)
    ordered = sorted(called & defined_functions(binary))
    if not ordered:
        print("callgrind saw none of lockrun's functions: is valgrind installed?", file=sys.stderr)
        return 1
    OUT.write_text("".join(f"{name}\n" for name in ordered))
    print(f"{len(ordered)} functions written to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
