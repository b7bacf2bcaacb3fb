#!/usr/bin/env python3
"""Writes tools/startup-order.txt: the functions a short lockrun run executes, for the linker.

A run on the embedded backend executes a few hundred of the binary's thousands of functions,
scattered over 8 MB of code; each 64 KiB window of code it touches is a page fault and resident
memory. `build.rs` hands this list to the linker (lld's --symbol-ordering-file), which then
places those functions side by side at the start of the code: 12 code faults a run instead of
about 37, and 2.5 MiB less peak RSS (`bench/file_vs_flock.py`).

Two sources make the list, for typical invocations: callgrind (every function the lockrun
process calls) and, where `perf` is installed, the page faults of real runs (functions whose code
was first touched outside the list's pages: callgrind misses the command's child before exec,
and the paths valgrind changes, as it has no pidfd_open). Names already in the list that the
binary still defines are kept, so running the script again on a binary linked with the list adds
what was still missed; two rounds find nearly everything.

The list names functions by their mangled symbols, whose hashes depend on the toolchain and the
dependencies' versions. A name that no longer matches is skipped by the linker (the run is then
only as fast as without it), so regenerate the list after a toolchain or dependency update, or a
rename on the run's path:

    cargo build --release && python3 tools/startup_order.py    # twice

Needs valgrind (Debian `valgrind`). It runs lockrun on the file backend only, in a temporary
directory.
"""

from __future__ import annotations

import argparse
import bisect
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


def defined_functions(binary: Path) -> list[tuple[int, int, str]]:
    """The function symbols `binary` defines: (address, size, name), by address."""
    nm = subprocess.run(["nm", "--defined-only", "--print-size", str(binary)],
                        capture_output=True, text=True, check=True).stdout
    functions = []
    for fields in (line.split() for line in nm.splitlines()):
        if len(fields) == 4 and fields[2] in "tTwW":
            functions.append((int(fields[0], 16), int(fields[1], 16), fields[3]))
    return sorted(functions)


def functions_faulted(binary: Path, args: list[str], work: Path,
                      functions: list[tuple[int, int, str]]) -> set[str] | None:
    """Functions of `binary` whose code was faulted in while `binary args` ran (and its forks),
    from perf's page-fault addresses; None without a working perf. The binary is linked at a
    fixed address (`build.rs`), so a fault's address is its symbol's."""
    data = work / "perf.data"
    try:
        recorded = subprocess.run(
            ["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-d", "-o", str(data),
             "--", str(binary), *args],
            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if recorded.returncode != 0 and not data.exists():
            return None
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "addr"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    starts = [start for start, _, _ in functions]
    names: set[str] = set()
    for word in script.split():
        try:
            address = int(word, 16)
        except ValueError:
            continue
        i = bisect.bisect_right(starts, address) - 1
        if i >= 0 and address < starts[i] + max(functions[i][1], 1):
            names.add(functions[i][2])
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "lockrun"),
                    help="the release lockrun to profile (default: target/release/lockrun)")
    binary = Path(ap.parse_args().bin)
    if not binary.exists():
        print(f"no lockrun at {binary}: run `cargo build --release` first", file=sys.stderr)
        return 1
    functions = defined_functions(binary)
    defined = {name for _, _, name in functions}
    kept = set(OUT.read_text().split()) & defined if OUT.exists() else set()
    with tempfile.TemporaryDirectory(prefix="lockrun-order-") as tmp:
        work = Path(tmp)
        called: set[str] = set()
        faulted: set[str] = set()
        use_perf = True
        for args in invocations(work / "state"):
            called |= functions_run(binary, args, work)
            for _ in range(3 if use_perf else 0):
                found = functions_faulted(binary, args, work, functions)
                if found is None:
                    print("perf did not run: page faults not used", file=sys.stderr)
                    use_perf = False
                    break
                faulted |= found
    ordered = sorted((called | faulted | kept) & defined)
    if not ordered:
        print("callgrind saw none of lockrun's functions: is valgrind installed?", file=sys.stderr)
        return 1
    OUT.write_text("".join(f"{name}\n" for name in ordered))
    added = len(set(ordered) - kept)
    print(f"{len(ordered)} functions written to {OUT.relative_to(REPO)} ({added} new)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
