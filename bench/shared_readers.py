#!/usr/bin/env python3
"""Benchmark: `--shared` readers on one name against the same readers on names of their own
(issue 16: readers must not serialize among themselves). Not a test.

For each backend (file, redis, etcd, postgres — servers started here on free loopback ports, in a
temporary directory, stopped at the end), N reader processes each run R critical sections of
HOLD seconds, one after the other:

  shared       every reader takes ONE name with --shared
  independent  every reader takes a name of its own (exclusive): the no-serialization baseline
  exclusive    every reader takes ONE name exclusively: the control, which must serialize (about
               N times the baseline), so the benchmark is seen to detect serialization

It prints wall times and shared / independent (target <= 1.2x).

Run (Python 3.11 standard library only, Linux only; redis-server, etcd, PostgreSQL installed):

    python3 bench/shared_readers.py                     # every backend; builds the release binary
    python3 bench/shared_readers.py --backend redis --bin target/release/lockrun
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import scale  # noqa: E402  (the backends and their servers)

TARGET = 1.2


def run_readers(binary: str, url: str, readers: int, rounds: int, hold: float, mode: str) -> float:
    """Wall time for `readers` processes each running `rounds` sections in `mode`."""
    pids = []
    started = time.monotonic()
    for r in range(readers):
        name = "books" if mode != "independent" else f"books-{r}"
        extra = "--shared" if mode == "shared" else ""
        script = (f'for i in $(seq {rounds}); do "$0" --backend "$1" --name {name} {extra} '
                  f'--wait 600s -- sleep {hold} || exit 1; done')
        pids.append(benchlib.spawn(["/bin/sh", "-c", script, binary, url], quiet=True))
    failed = benchlib.wait_all(pids, f"{mode} readers", 600)
    if failed:
        raise benchlib.Broken(f"{failed} {mode} readers failed on {url}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="all", choices=["all", *scale.BACKENDS])
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hold", type=float, default=0.2, help="seconds per critical section")
    parser.add_argument("--bin")
    args = parser.parse_args()
    binary = benchlib.lockrun_binary(args.bin)
    names = list(scale.BACKENDS) if args.backend == "all" else [args.backend]
    rows = []
    for label in names:
        with tempfile.TemporaryDirectory(prefix=f"lockrun-readers-{label}-") as tmp:
            backend = scale.BACKENDS[label](Path(tmp))
            try:
                times = {mode: run_readers(binary, backend.url, args.readers, args.rounds,
                                           args.hold, mode)
                         for mode in ("independent", "shared", "exclusive")}
            finally:
                backend.stop()
        ratio = times["shared"] / times["independent"]
        verdict = "PASS" if ratio <= TARGET else "MISS"
        rows.append(f"| {label} | {times['independent']:.2f} | {times['shared']:.2f} | "
                    f"{ratio:.2f}x {verdict} | {times['exclusive']:.2f} "
                    f"({times['exclusive'] / times['independent']:.1f}x) |")
        print(f"{label}: done", file=sys.stderr)
    print(f"\n{args.readers} readers x {args.rounds} sections of {args.hold:g} s each "
          f"(ideal without serialization: {args.rounds * args.hold:.1f} s)\n")
    print("| backend | independent names (s) | one name, --shared (s) | shared / independent "
          "(target <= 1.2x) | one name, exclusive (s) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    benchlib.run_script(main)
