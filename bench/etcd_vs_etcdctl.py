#!/usr/bin/env python3
"""Benchmark: lockrun's etcd:// backend side by side with `etcdctl lock NAME -- COMMAND`.

`etcdctl lock` is what etcd users reach for: it takes a lock in a session, runs the command and
unlocks; it never stops the command when its session dies and has no try-once or timeout. It is the
baseline lockrun must beat.

What it measures, both tools in ONE run against ONE private etcd, runs interleaved so that machine
drift hits both equally:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms); target: the
                         lockrun/etcdctl ratio of the medians <= 0.5
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), target ratio <= 0.5,
                         and a check that the counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: lockrun's median no
                         slower than etcdctl's
  d. peak RSS            max resident set of each tool running `true` (MiB); target: lockrun
                         <= 8 MiB

The etcd member is started by this script on free loopback ports, in a temporary directory, and
stopped at the end (never one that happens to run on the machine).

Run (Python 3.11 standard library only, Linux only; needs Debian's etcd-server and etcd-client):

    python3 bench/etcd_vs_etcdctl.py            # builds lockrun with `cargo build --release`
    python3 bench/etcd_vs_etcdctl.py --quick    # fewer iterations, a smoke run
    python3 bench/etcd_vs_etcdctl.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a tool
failing, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
GNU_TIME = "/usr/bin/time"

TARGET_RATIO = 0.5
TARGET_RSS_MIB = 8.0

WORKERS = 8
SECTIONS = 15
# A non-atomic increment: without mutual exclusion, concurrent sections lose updates.
RMW = 'n=$(cat "$1"); echo $((n+1)) > "$1"'
HOLD_AFTER_READY_S = 0.25  # how long the handoff holder keeps the lock once the waiter may start


class Broken(Exception):
    """Something that makes the numbers meaningless (exit 1)."""


# --------------------------------------------------------------------------------------------
# The server.
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """A private etcd member on free loopback ports, data in `tmp`."""

    def __init__(self, tmp: Path):
        self.client = free_port()
        peer = free_port()
        client_url = f"http://127.0.0.1:{self.client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.log = open(tmp / "etcd.log", "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", str(tmp / "etcd"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"bench={peer_url}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 20
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Broken(f"etcd did not start (see {tmp / 'etcd.log'})")
            time.sleep(0.05)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client}"

    def healthy(self) -> bool:
        return subprocess.run(
            ["etcdctl", "--endpoints", self.endpoint, "--command-timeout", "1s",
             "endpoint", "health"],
            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


# --------------------------------------------------------------------------------------------
# The two tools, described as "prefix to put in front of a command".
# --------------------------------------------------------------------------------------------


@dataclass
class Tool:
    label: str
    binary: str
    endpoint: str

    def wrap(self, lock: str, command: list[str]) -> list[str]:
        """argv that runs `command` while holding the lock called `lock`."""
        if self.label == "lockrun":
            return [self.binary, "--backend", f"etcd://{self.endpoint}", "--name", lock,
                    "--", *command]
        return [self.binary, "--endpoints", self.endpoint, "lock", lock, "--", *command]


def clean_env() -> dict[str, str]:
    """Our environment minus LOCKRUN_* and ETCDCTL_* (stray settings would change the tools),
    with etcdctl's v3 API chosen explicitly."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOCKRUN_", "ETCDCTL_"))}
    env["ETCDCTL_API"] = "3"
    return env


ENV = clean_env()


def spawn(argv: list[str], stdout: str | None = None) -> int:
    """Starts argv with posix_spawn (cheaper than subprocess, so the harness adds little to what
    is measured); stdout optionally redirected to a file."""
    actions = []
    if stdout is not None:
        actions.append((os.POSIX_SPAWN_OPEN, 1, stdout,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    return os.posix_spawnp(argv[0], argv, ENV, file_actions=actions)


def wait_ok(pid: int, what: str) -> None:
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise Broken(f"{what} exited with status {code}")


def run_ok(argv: list[str], stdout: str | None = None) -> None:
    wait_ok(spawn(argv, stdout), " ".join(argv))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    """90th percentile, nearest-rank (an actual observed value)."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def interleaved(tools: list[Tool], n: int):
    """Yields (iteration, tool), the tools alternating, and which goes first alternating too."""
    for i in range(n):
        order = tools if i % 2 == 0 else tools[::-1]
        for tool in order:
            yield i, tool


# --------------------------------------------------------------------------------------------
# The measurements.
# --------------------------------------------------------------------------------------------


def bench_uncontended(tools: list[Tool], warmup: int, iters: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    for i, tool in interleaved(tools, warmup + iters):
        argv = tool.wrap("uncontended", ["true"])
        start = time.perf_counter_ns()
        run_ok(argv)
        if i >= warmup:
            times[tool.label].append((time.perf_counter_ns() - start) / 1e6)
    return times


def contention_once(tool: Tool, tmp: Path) -> tuple[float, int]:
    """One round: (total wall ms, final counter value)."""
    counter = tmp / f"counter-{tool.label}"
    counter.write_text("0\n")
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
    for _, tool in interleaved(tools, reps):
        ms, final = contention_once(tool, tmp)
        times[tool.label].append(ms)
        finals[tool.label].append(final)
        if final != WORKERS * SECTIONS:
            print(f"!!! FAIL: {tool.label}: counter ended at {final}, expected "
                  f"{WORKERS * SECTIONS}: LOST UPDATE (two holders at once)", file=sys.stderr)
    return times, finals


def handoff_once(tool: Tool, tmp: Path) -> float:
    ready, a_end, b_start = tmp / "handoff.ready", tmp / "handoff.a", tmp / "handoff.b"
    for f in (ready, a_end, b_start):
        f.unlink(missing_ok=True)
    # Holder: say "I hold it", keep it a while, and make `date` its very last action.
    holder_cmd = ["sh", "-c", f': > "$1"; sleep {HOLD_AFTER_READY_S}; exec date +%s%N',
                  "sh", str(ready)]
    holder = spawn(tool.wrap("handoff", holder_cmd), stdout=str(a_end))
    deadline = time.monotonic() + 10
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: handoff holder never started its command")
        time.sleep(0.001)
    # Waiter: its command *is* `date`; it queues while the holder still has time to go.
    waiter = spawn(tool.wrap("handoff", ["date", "+%s%N"]), stdout=str(b_start))
    wait_ok(holder, f"{tool.label} handoff holder")
    wait_ok(waiter, f"{tool.label} handoff waiter")
    return (int(b_start.read_text()) - int(a_end.read_text())) / 1e6


def bench_handoff(tools: list[Tool], tmp: Path, reps: int) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {t.label: [] for t in tools}
    for _, tool in interleaved(tools, reps):
        lat[tool.label].append(handoff_once(tool, tmp))
    return lat


def peak_rss_kib(argv: list[str], tmp: Path) -> int:
    """Max RSS (KiB) of the process started by argv (its child `true` is far smaller)."""
    if os.access(GNU_TIME, os.X_OK):
        out = tmp / "time.out"
        run_ok([GNU_TIME, "-f", "%M", "-o", str(out), *argv])
        return int(out.read_text().split()[-1])
    pid = spawn(argv)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Broken(f"{argv} failed")
    return usage.ru_maxrss


def bench_rss(tools: list[Tool], tmp: Path, reps: int) -> dict[str, int]:
    peaks = {t.label: 0 for t in tools}
    for _, tool in interleaved(tools, reps):
        peaks[tool.label] = max(peaks[tool.label], peak_rss_kib(tool.wrap("rss", ["true"]), tmp))
    return peaks


# --------------------------------------------------------------------------------------------
# Build, report, main.
# --------------------------------------------------------------------------------------------


def build_lockrun() -> str:
    """`cargo build --release` in the repo root; the binary's path as cargo reports it."""
    print(f"building lockrun (cargo build --release) in {REPO_ROOT} ...", file=sys.stderr)
    proc = subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "lockrun", "--message-format=json"],
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


def fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def print_table(rows: list[tuple[str, float, float, str, bool | None]]) -> None:
    """rows: (metric, lockrun, etcdctl, target text, met?) -- met None = informational."""
    header = ("metric", "lockrun", "etcdctl", "ratio", "target")
    lines = []
    for metric, lr, ec, target, met in rows:
        ratio = lr / ec if ec else float("inf")
        verdict = "" if met is None else (" PASS" if met else " MISS")
        lines.append((metric, fmt(lr), fmt(ec), f"{ratio:.2f}x", target + verdict))
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
        warmup, iters, cont_reps, rss_reps, handoff_reps = 3, 30, 2, 3, 6
    else:
        warmup, iters, cont_reps, rss_reps, handoff_reps = 10, 150, 4, 10, 20

    for needed in ("etcd", "etcdctl"):
        if shutil.which(needed) is None:
            print(f"bench: {needed} is missing (apt-get install etcd-server etcd-client)",
                  file=sys.stderr)
            return 1
    try:
        binary = str(Path(args.bin).resolve()) if args.bin else build_lockrun()
    except Broken as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    etcdctl = shutil.which("etcdctl") or "etcdctl"

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-etcd-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            server = Etcd(tmp)
        except Broken as e:
            print(f"bench: {e}", file=sys.stderr)
            return 1
        tools = [Tool("lockrun", binary, server.endpoint), Tool("etcdctl", etcdctl, server.endpoint)]
        print(f"lockrun: {binary}\netcd:    {server.endpoint} (data in {tmp}, removed "
              "afterwards)", file=sys.stderr)
        try:
            print(f"[a] uncontended: {warmup} warm-up + {iters} runs each ...", file=sys.stderr)
            unc = bench_uncontended(tools, warmup, iters)
            print(f"[b] contention: {WORKERS} procs x {SECTIONS} sections, {cont_reps} reps "
                  "each ...", file=sys.stderr)
            cont, finals = bench_contention(tools, tmp, cont_reps)
            print(f"[c] handoff: {handoff_reps} handoffs each ...", file=sys.stderr)
            hand = bench_handoff(tools, tmp, handoff_reps)
            print(f"[d] peak RSS: {rss_reps} runs each ...", file=sys.stderr)
            rss = bench_rss(tools, tmp, rss_reps)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    lost = {label: [f for f in fs if f != WORKERS * SECTIONS] for label, fs in finals.items()}
    mib = lambda kib: kib / 1024  # noqa: E731
    unc_ratio = median(unc["lockrun"]) / median(unc["etcdctl"])
    cont_ratio = median(cont["lockrun"]) / median(cont["etcdctl"])
    hand_ok = median(hand["lockrun"]) <= median(hand["etcdctl"])
    rss_ok = mib(rss["lockrun"]) <= TARGET_RSS_MIB
    rows = [
        ("uncontended `true` median (ms)", median(unc["lockrun"]), median(unc["etcdctl"]),
         f"ratio <= {TARGET_RATIO}x", unc_ratio <= TARGET_RATIO),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["etcdctl"]), "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["etcdctl"]), f"ratio <= {TARGET_RATIO}x", cont_ratio <= TARGET_RATIO),
        ("  per critical section (ms)", median(cont["lockrun"]) / (WORKERS * SECTIONS),
         median(cont["etcdctl"]) / (WORKERS * SECTIONS), "-", None),
        ("handoff latency median (ms)", median(hand["lockrun"]), median(hand["etcdctl"]),
         "lockrun <= etcdctl", hand_ok),
        ("handoff latency p90 (ms)", p90(hand["lockrun"]), p90(hand["etcdctl"]), "-", None),
        ("peak RSS running `true` (MiB)", mib(rss["lockrun"]), mib(rss["etcdctl"]),
         f"lockrun <= {TARGET_RSS_MIB:g} MiB", rss_ok),
    ]
    mode = "quick" if args.quick else "full"
    print(f"\nlockrun (etcd backend) vs etcdctl lock -- {mode} run, {os.cpu_count()} CPUs, "
          "runs interleaved\n")
    print_table(rows)
    print()
    for label in ("lockrun", "etcdctl"):
        if lost[label]:
            print(f"counter {label}: FAIL -- LOST UPDATE, final values {finals[label]}")
        else:
            print(f"counter {label}: ok ({WORKERS * SECTIONS} in every rep)")
    verdicts = [("uncontended ratio", unc_ratio <= TARGET_RATIO),
                ("contention ratio", cont_ratio <= TARGET_RATIO),
                ("handoff", hand_ok), ("lockrun RSS", rss_ok)]
    print("targets: " + ", ".join(f"{name} {'PASS' if ok else 'MISS'}" for name, ok in verdicts)
          + (", counters FAIL (LOST UPDATE)" if any(lost.values()) else ", counters ok"))
    return 1 if any(lost.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
