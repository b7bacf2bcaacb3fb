#!/usr/bin/env python3
"""Benchmark: lockrun's embedded file backend side by side with util-linux flock(1).

What it measures (both tools, in ONE run, runs of the two tools interleaved so that machine
drift hits both equally):

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms)
  b. contention          8 processes x 15 critical sections on ONE lock name, each section a
                         read-modify-write of a counter file; total wall time (median of reps),
                         and a check that the counter ends at 120 (anything else = lost update)
  c. peak RSS            max resident set of the tool process while it runs `true` (MiB)
  d. handoff latency     time from the holder's child's last action (`date +%s%N`) to the
                         waiter's child's first action (`date +%s%N`), median and p90 (ms)

It then prints a table `metric | lockrun | flock | ratio | target` and PASS/MISS per target
(uncontended median ratio <= 1.5x, contention ratio <= 1.5x, lockrun peak RSS <= 8 MiB).

Lock state lives in a fresh temporary directory (lockrun: --backend file://TMP/state,
flock: TMP/flock-*.lock), removed at the end.

Run (from anywhere; Python 3.11 standard library only, Linux only):

    python3 bench/file_vs_flock.py            # builds lockrun with `cargo build --release`
    python3 bench/file_vs_flock.py --quick    # fewer iterations, a smoke run (~10 s)
    python3 bench/file_vs_flock.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update,
a tool failing, or the build failing. This is not a test and is never run by `cargo test`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FLOCK = "/usr/bin/flock"
GNU_TIME = "/usr/bin/time"

# Targets from the brief.
TARGET_RATIO = 1.5
TARGET_RSS_MIB = 8.0

# The critical section of the contention test: a non-atomic increment of a counter file.
# Without mutual exclusion, concurrent sections lose updates and the total ends below 120.
RMW = 'n=$(cat "$1"); echo $((n+1)) > "$1"'


class Broken(Exception):
    """Something that makes the numbers meaningless (exit 1)."""


# --------------------------------------------------------------------------------------------
# The two tools, described as "prefix to put in front of a command".
# --------------------------------------------------------------------------------------------


@dataclass
class Tool:
    label: str
    binary: str
    tmp: Path

    def wrap(self, lock: str, command: list[str]) -> list[str]:
        """argv that runs `command` while holding the lock called `lock`."""
        if self.label == "lockrun":
            return [self.binary, "--backend", f"file://{self.tmp}/state", "--name", lock,
                    "--", *command]
        # flock(1): lock file FILE, run command; each lock name gets its own file.
        return [self.binary, str(self.tmp / f"flock-{lock}.lock"), *command]


def clean_env() -> dict[str, str]:
    """The environment for the tools: ours minus LOCKRUN_* (a stray LOCKRUN_VERBOSE or
    LOCKRUN_WAIT in the caller's shell would change what lockrun does)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}


ENV = clean_env()


def spawn(argv: list[str], stdout: str | None = None) -> int:
    """Starts argv with posix_spawn (much cheaper than subprocess, so the harness adds as
    little as possible to what is measured); stdout optionally redirected to a file."""
    actions = []
    if stdout is not None:
        actions.append((os.POSIX_SPAWN_OPEN, 1, stdout,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    return os.posix_spawn(argv[0], argv, ENV, file_actions=actions)


def wait_ok(pid: int, what: str) -> None:
    """Waits for pid and raises Broken unless it exited 0."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise Broken(f"{what} exited with status {code}")


def run_ok(argv: list[str], stdout: str | None = None) -> None:
    wait_ok(spawn(argv, stdout), " ".join(argv))


# --------------------------------------------------------------------------------------------
# Statistics helpers.
# --------------------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    """90th percentile, nearest-rank (an actual observed value)."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def interleaved(tools: list[Tool], n: int):
    """Yields (iteration, tool) with the two tools alternating, and which one goes first
    also alternating, so neither always runs right after the other."""
    for i in range(n):
        order = tools if i % 2 == 0 else tools[::-1]
        for tool in order:
            yield i, tool


# --------------------------------------------------------------------------------------------
# a. Uncontended per-run wall time.
# --------------------------------------------------------------------------------------------


def bench_uncontended(tools: list[Tool], warmup: int, iters: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    for i, tool in interleaved(tools, warmup + iters):
        argv = tool.wrap("uncontended", ["true"])
        start = time.perf_counter_ns()
        run_ok(argv)
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        if i >= warmup:
            times[tool.label].append(elapsed_ms)
    return times


def bench_bare_true(iters: int) -> float:
    """Median cost of spawning plain `true` with this harness: the floor under both tools."""
    true = shutil.which("true") or "/bin/true"
    xs = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        run_ok([true])
        xs.append((time.perf_counter_ns() - start) / 1e6)
    return median(xs)


# --------------------------------------------------------------------------------------------
# b. Contention: 8 processes x 15 read-modify-write sections on one name.
# --------------------------------------------------------------------------------------------

WORKERS = 8
SECTIONS = 15


def contention_once(tool: Tool, tmp: Path) -> tuple[float, int]:
    """One round: returns (total wall ms, final counter value)."""
    counter = tmp / f"counter-{tool.label}"
    counter.write_text("0\n")
    # Each worker is a shell looping SECTIONS times over `TOOL ... -- sh -c RMW sh COUNTER`.
    section = tool.wrap("contended", ["sh", "-c", RMW, "sh", str(counter)])
    loop = f'i=0; while [ $i -lt {SECTIONS} ]; do "$@" || exit 1; i=$((i+1)); done'
    worker = ["/bin/sh", "-c", loop, "worker", *section]
    start = time.perf_counter_ns()
    pids = [spawn(worker) for _ in range(WORKERS)]
    failures = []
    for pid in pids:
        try:
            wait_ok(pid, f"{tool.label} contention worker")
        except Broken as e:
            failures.append(str(e))
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    if failures:
        raise Broken("; ".join(failures))
    return elapsed_ms, int(counter.read_text().strip() or "0")


def bench_contention(tools: list[Tool], tmp: Path, reps: int):
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    finals: dict[str, list[int]] = {t.label: [] for t in tools}
    contention_once(tools[0], tmp)  # warm-up (page cache, state files); not counted
    contention_once(tools[1], tmp)
    for _, tool in interleaved(tools, reps):
        ms, final = contention_once(tool, tmp)
        times[tool.label].append(ms)
        finals[tool.label].append(final)
        if final != WORKERS * SECTIONS:
            print(f"!!! FAIL: {tool.label}: counter ended at {final}, expected "
                  f"{WORKERS * SECTIONS}: LOST UPDATE (two holders at once)", file=sys.stderr)
    return times, finals


# --------------------------------------------------------------------------------------------
# c. Peak RSS of the tool process while it runs `true`.
# --------------------------------------------------------------------------------------------


def peak_rss_kib(argv: list[str], tmp: Path) -> tuple[int, str]:
    """Max RSS (KiB) of the process started by argv. With GNU time, `%M` is the ru_maxrss
    that time(1) gets from wait4 on its child; without it we call wait4 ourselves on the tool's
    pid. Either way the value is max(tool, its waited-for children): the child here is `true`,
    far smaller than either tool, so the figure is the tool's own."""
    if os.access(GNU_TIME, os.X_OK):
        out = tmp / "time.out"
        run_ok([GNU_TIME, "-f", "%M", "-o", str(out), *argv])
        return int(out.read_text().split()[-1]), "/usr/bin/time -f %M"
    pid = spawn(argv)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Broken(f"{argv} failed")
    return usage.ru_maxrss, "os.wait4 ru_maxrss"  # KiB on Linux


def bench_rss(tools: list[Tool], tmp: Path, reps: int):
    peaks: dict[str, int] = {t.label: 0 for t in tools}
    method = ""
    for _, tool in interleaved(tools, reps):
        kib, method = peak_rss_kib(tool.wrap("rss", ["true"]), tmp)
        peaks[tool.label] = max(peaks[tool.label], kib)
    true = shutil.which("true") or "/bin/true"
    bare, _ = peak_rss_kib([true], tmp)
    return peaks, bare, method


# --------------------------------------------------------------------------------------------
# d. Handoff latency: holder's child's last action -> waiter's child's first action.
# --------------------------------------------------------------------------------------------

HOLD_AFTER_READY_S = 0.25  # how long the holder keeps the lock once the waiter may start


def handoff_once(tool: Tool, tmp: Path) -> float:
    ready = tmp / "handoff.ready"
    a_end = tmp / "handoff.a"
    b_start = tmp / "handoff.b"
    for f in (ready, a_end, b_start):
        f.unlink(missing_ok=True)
    # Holder: signal "I hold it", keep it a while, and make `date` the very last thing the
    # child does (exec, so no shell runs after it). Its stdout (the timestamp) goes to a_end.
    holder_cmd = ["sh", "-c", f': > "$1"; sleep {HOLD_AFTER_READY_S}; exec date +%s%N',
                  "sh", str(ready)]
    holder = spawn(tool.wrap("handoff", holder_cmd), stdout=str(a_end))
    deadline = time.monotonic() + 10
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: handoff holder never started its command")
        time.sleep(0.001)
    # Waiter: its command *is* `date` (no shell in front), stdout to b_start. It blocks until
    # the holder lets go; the holder still has HOLD_AFTER_READY_S to go, plenty to get queued.
    waiter = spawn(tool.wrap("handoff", ["date", "+%s%N"]), stdout=str(b_start))
    wait_ok(holder, f"{tool.label} handoff holder")
    wait_ok(waiter, f"{tool.label} handoff waiter")
    # Both stamps are CLOCK_REALTIME on the same host: fine for a sub-second difference.
    return (int(b_start.read_text()) - int(a_end.read_text())) / 1e6


def bench_handoff(tools: list[Tool], tmp: Path, reps: int) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {t.label: [] for t in tools}
    for _, tool in interleaved(tools, reps):
        lat[tool.label].append(handoff_once(tool, tmp))
    return lat


# --------------------------------------------------------------------------------------------
# Build, report, main.
# --------------------------------------------------------------------------------------------


def build_lockrun() -> str:
    """`cargo build --release --quiet` in the repo root; the lockrun binary's path, as cargo
    reports it (so a CARGO_TARGET_DIR or a configured target dir is honoured)."""
    print(f"building lockrun (cargo build --release) in {REPO_ROOT} ...", file=sys.stderr)
    proc = subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "lockrun",
         "--message-format=json"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise Broken("cargo build --release failed (see above); pass --bin PATH to skip it")
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["target"]["name"] == "lockrun"):
            return msg["executable"]
    return str(REPO_ROOT / "target" / "release" / "lockrun")


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:.3f}{unit}" if x < 10 else f"{x:.1f}{unit}"


def print_table(rows: list[tuple[str, float, float, str, bool | None]]) -> None:
    """rows: (metric, lockrun, flock, target text, met?) -- met None = informational."""
    header = ("metric", "lockrun", "flock", "ratio", "target")
    lines = []
    for metric, lr, fl, target, met in rows:
        ratio = lr / fl if fl else float("inf")
        verdict = "" if met is None else (" PASS" if met else " MISS")
        lines.append((metric, fmt(lr), fmt(fl), f"{ratio:.2f}x", target + verdict))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]

    def show(r):
        print(" | ".join(c.ljust(w) if i == 0 else c.rjust(w) if i < 4 else c
                         for i, (c, w) in enumerate(zip(r, widths))))

    show(header)
    print("-+-".join("-" * w for w in widths))
    for r in lines:
        show(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary to use (skips the build)")
    args = ap.parse_args()

    if args.quick:
        warmup, iters, cont_reps, rss_reps, handoff_reps = 5, 40, 2, 3, 6
    else:
        warmup, iters, cont_reps, rss_reps, handoff_reps = 20, 300, 5, 10, 20

    for needed in (FLOCK, "/bin/sh"):
        if not os.access(needed, os.X_OK):
            print(f"bench: {needed} is missing", file=sys.stderr)
            return 1
    try:
        binary = str(Path(args.bin).resolve()) if args.bin else build_lockrun()
    except Broken as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    if not os.access(binary, os.X_OK):
        print(f"bench: {binary} is not an executable", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tools = [Tool("lockrun", binary, tmp), Tool("flock", FLOCK, tmp)]
        print(f"lockrun: {binary}\nstate:   {tmp} (removed afterwards)", file=sys.stderr)
        try:
            print(f"[a] uncontended: {warmup} warm-up + {iters} runs each ...", file=sys.stderr)
            unc = bench_uncontended(tools, warmup, iters)
            floor = bench_bare_true(max(20, iters // 3))
            print(f"[b] contention: {WORKERS} procs x {SECTIONS} sections, {cont_reps} reps "
                  "each ...", file=sys.stderr)
            cont, finals = bench_contention(tools, tmp, cont_reps)
            print(f"[c] peak RSS: {rss_reps} runs each ...", file=sys.stderr)
            rss, rss_true, rss_method = bench_rss(tools, tmp, rss_reps)
            print(f"[d] handoff: {handoff_reps} handoffs each ...", file=sys.stderr)
            hand = bench_handoff(tools, tmp, handoff_reps)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1

    lost = {label: [f for f in fs if f != WORKERS * SECTIONS] for label, fs in finals.items()}
    mib = lambda kib: kib / 1024  # noqa: E731

    unc_ratio = median(unc["lockrun"]) / median(unc["flock"])
    cont_ratio = median(cont["lockrun"]) / median(cont["flock"])
    rows = [
        ("uncontended `true` median (ms)", median(unc["lockrun"]), median(unc["flock"]),
         f"ratio <= {TARGET_RATIO}x", unc_ratio <= TARGET_RATIO),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["flock"]), "-", None),
        # The same medians minus the cost of spawning bare `true` from this harness: what
        # each tool itself adds (informational; the target is on the totals above).
        ("  overhead over bare `true` (ms)", median(unc["lockrun"]) - floor,
         median(unc["flock"]) - floor, "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["flock"]), f"ratio <= {TARGET_RATIO}x", cont_ratio <= TARGET_RATIO),
        ("  per critical section (ms)", median(cont["lockrun"]) / (WORKERS * SECTIONS),
         median(cont["flock"]) / (WORKERS * SECTIONS), "-", None),
        ("peak RSS running `true` (MiB)", mib(rss["lockrun"]), mib(rss["flock"]),
         f"lockrun <= {TARGET_RSS_MIB:g} MiB", mib(rss["lockrun"]) <= TARGET_RSS_MIB),
        ("handoff latency median (ms)", median(hand["lockrun"]), median(hand["flock"]),
         "-", None),
        ("handoff latency p90 (ms)", p90(hand["lockrun"]), p90(hand["flock"]), "-", None),
    ]

    mode = "quick" if args.quick else "full"
    print(f"\nlockrun (file backend) vs flock(1) -- {mode} run, {os.cpu_count()} CPUs, "
          f"runs interleaved")
    print(f"(harness floor: spawning bare `true` takes {floor:.3f} ms median; peak RSS of bare "
          f"`true` {mib(rss_true):.2f} MiB; RSS via {rss_method})\n")
    print_table(rows)
    print()
    for label in ("lockrun", "flock"):
        if lost[label]:
            print(f"counter {label}: FAIL -- LOST UPDATE, final values {finals[label]} "
                  f"(expected {WORKERS * SECTIONS})")
        else:
            print(f"counter {label}: ok ({WORKERS * SECTIONS} in every rep)")
    verdicts = [
        ("uncontended ratio", unc_ratio <= TARGET_RATIO),
        ("contention ratio", cont_ratio <= TARGET_RATIO),
        ("lockrun RSS", mib(rss["lockrun"]) <= TARGET_RSS_MIB),
    ]
    print("targets: " + ", ".join(f"{name} {'PASS' if ok else 'MISS'}"
                                  for name, ok in verdicts)
          + (", counters FAIL (LOST UPDATE)" if any(lost.values()) else ", counters ok"))
    return 1 if any(lost.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
