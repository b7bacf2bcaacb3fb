#!/usr/bin/env python3
"""Benchmark: lockrun's redis:// backend side by side with a hand-written redis-cli lock script.

The baseline is what people write by hand:

    redis-cli SET k v NX PX 15000 ; COMMAND ; redis-cli DEL k

(for waiting: the SET retried every 10 ms until it succeeds). It has no renewal, no fencing token,
no owner check on DEL, and no fairness; it is here as the cost floor lockrun must not exceed.

What it measures, both tools in ONE run against ONE private redis-server, runs interleaved:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms); target: the
                         lockrun/baseline ratio of the medians <= 1.0
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), and a check that the
                         counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: lockrun median <= 5 ms
  d. peak RSS            max resident set of lockrun running `true` (MiB); target <= 8 MiB

The server is started by this script on a free loopback port, in a temporary directory, with
persistence off, and stopped at the end.

Run (Python 3.11 standard library only, Linux only; needs redis-server and redis-cli):

    python3 bench/redis_vs_cli.py            # builds lockrun with `cargo build --release`
    python3 bench/redis_vs_cli.py --quick    # fewer iterations, a smoke run
    python3 bench/redis_vs_cli.py --bin target/release/lockrun   # skip the build

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

TARGET_UNCONTENDED_RATIO = 1.0
TARGET_HANDOFF_MS = 5.0
TARGET_RSS_MIB = 8.0

WORKERS = 8
SECTIONS = 15
# A non-atomic increment: without mutual exclusion, concurrent sections lose updates.
RMW = 'n=$(cat "$1"); echo $((n+1)) > "$1"'
HOLD_AFTER_READY_S = 0.25


class Broken(Exception):
    """Something that makes the numbers meaningless (exit 1)."""


# ------------------------------------------------------------------------------------------------
# The server.
# ------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Server:
    """A private redis-server, ready when it answers PING."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not answers_ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Broken(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# ------------------------------------------------------------------------------------------------
# The two tools, as "a prefix that runs COMMAND under lock NAME".
# ------------------------------------------------------------------------------------------------


@dataclass
class Tool:
    label: str
    lockrun: str
    port: int

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        if self.label == "lockrun":
            return [self.lockrun, "--backend", f"redis://127.0.0.1:{self.port}", "--name", lock,
                    "--", *command]
        cli = f"redis-cli -p {self.port}"
        take = f"{cli} SET bench:{lock} v NX PX 15000"
        # Uncontended: exactly the hand-written one-liner. Waiting: the SET retried every 10 ms.
        acquire = (f"until [ \"$({take})\" = OK ]; do sleep 0.01; done" if wait
                   else f"{take} >/dev/null")
        script = f'{acquire}; "$@"; s=$?; {cli} DEL bench:{lock} >/dev/null; exit $s'
        return ["/bin/sh", "-c", script, "sh", *command]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}


ENV = clean_env()


def spawn(argv: list[str], stdout: str | None = None) -> int:
    """posix_spawn (cheaper than subprocess, so the harness adds little to what is measured)."""
    actions = []
    if stdout is not None:
        actions.append((os.POSIX_SPAWN_OPEN, 1, stdout,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    path = argv[0] if "/" in argv[0] else (shutil.which(argv[0]) or argv[0])
    return os.posix_spawn(path, argv, ENV, file_actions=actions)


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
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def interleaved(tools: list[Tool], n: int):
    for i in range(n):
        for tool in (tools if i % 2 == 0 else tools[::-1]):
            yield i, tool


# ------------------------------------------------------------------------------------------------
# The measurements.
# ------------------------------------------------------------------------------------------------


def bench_uncontended(tools: list[Tool], warmup: int, iters: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    for i, tool in interleaved(tools, warmup + iters):
        argv = tool.wrap("uncontended", ["true"], wait=False)
        start = time.perf_counter_ns()
        run_ok(argv)
        if i >= warmup:
            times[tool.label].append((time.perf_counter_ns() - start) / 1e6)
    return times


def contention_once(tool: Tool, tmp: Path) -> tuple[float, int]:
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
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if failures:
        raise Broken("; ".join(failures))
    return elapsed, int(counter.read_text().strip() or "0")


def bench_contention(tools: list[Tool], tmp: Path, reps: int):
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    finals: dict[str, list[int]] = {t.label: [] for t in tools}
    for _, tool in interleaved(tools, reps):
        ms, final = contention_once(tool, tmp)
        times[tool.label].append(ms)
        finals[tool.label].append(final)
    return times, finals


def handoff_once(tool: Tool, tmp: Path) -> float:
    ready, a_end, b_start = (tmp / f"handoff.{x}" for x in ("ready", "a", "b"))
    for f in (ready, a_end, b_start):
        f.unlink(missing_ok=True)
    holder_cmd = ["sh", "-c", f': > "$1"; sleep {HOLD_AFTER_READY_S}; exec date +%s%N',
                  "sh", str(ready)]
    holder = spawn(tool.wrap("handoff", holder_cmd), stdout=str(a_end))
    deadline = time.monotonic() + 10
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: handoff holder never started its command")
        time.sleep(0.001)
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
    """ru_maxrss of the process (and its waited-for children: here only `true`)."""
    if os.access(GNU_TIME, os.X_OK):
        out = tmp / "time.out"
        run_ok([GNU_TIME, "-f", "%M", "-o", str(out), *argv])
        return int(out.read_text().split()[-1])
    pid = spawn(argv)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Broken(f"{argv} failed")
    return usage.ru_maxrss


# ------------------------------------------------------------------------------------------------
# Build, report, main.
# ------------------------------------------------------------------------------------------------


def build_lockrun() -> str:
    print(f"building lockrun (cargo build --release) in {REPO_ROOT} ...", file=sys.stderr)
    proc = subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "lockrun", "--message-format=json"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise Broken("cargo build --release failed; pass --bin PATH to skip it")
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


def print_table(rows: list[tuple[str, float, float | None, str, bool | None]]) -> None:
    header = ("metric", "lockrun", "redis-cli", "ratio", "target")
    lines = []
    for metric, lr, base, target, met in rows:
        ratio = "-" if not base else f"{lr / base:.2f}x"
        verdict = "" if met is None else (" PASS" if met else " MISS")
        lines.append((metric, fmt(lr), "-" if base is None else fmt(base), ratio,
                      target + verdict))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]
    for n, r in enumerate([header, None, *lines]):
        if r is None:
            print("-+-".join("-" * w for w in widths))
            continue
        print(" | ".join(c.ljust(w) if i in (0, 4) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary to use (skips the build)")
    args = ap.parse_args()
    if args.quick:
        warmup, iters, cont_reps, handoff_reps, rss_reps = 5, 40, 2, 6, 3
    else:
        warmup, iters, cont_reps, handoff_reps, rss_reps = 20, 200, 4, 20, 10

    for needed in ("redis-server", "redis-cli"):
        if shutil.which(needed) is None:
            print(f"bench: {needed} is missing (apt-get install redis-server redis-tools)",
                  file=sys.stderr)
            return 1
    try:
        binary = str(Path(args.bin).resolve()) if args.bin else build_lockrun()
    except Broken as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-redis-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            server = Server(tmp)
        except Broken as e:
            print(f"bench: {e}", file=sys.stderr)
            return 1
        try:
            tools = [Tool("lockrun", binary, server.port), Tool("redis-cli", binary, server.port)]
            print(f"lockrun: {binary}\nredis-server on 127.0.0.1:{server.port}", file=sys.stderr)
            print(f"[a] uncontended: {warmup} warm-up + {iters} runs each ...", file=sys.stderr)
            unc = bench_uncontended(tools, warmup, iters)
            print(f"[b] contention: {WORKERS} x {SECTIONS}, {cont_reps} reps each ...",
                  file=sys.stderr)
            cont, finals = bench_contention(tools, tmp, cont_reps)
            print(f"[c] handoff: {handoff_reps} each ...", file=sys.stderr)
            hand = bench_handoff(tools, tmp, handoff_reps)
            print(f"[d] peak RSS: {rss_reps} runs ...", file=sys.stderr)
            rss = max(peak_rss_kib(tools[0].wrap("rss", ["true"]), tmp)
                      for _ in range(rss_reps)) / 1024
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    unc_ratio = median(unc["lockrun"]) / median(unc["redis-cli"])
    hand_ms = median(hand["lockrun"])
    total = WORKERS * SECTIONS
    rows = [
        ("uncontended `true` median (ms)", median(unc["lockrun"]), median(unc["redis-cli"]),
         f"ratio <= {TARGET_UNCONTENDED_RATIO}x", unc_ratio <= TARGET_UNCONTENDED_RATIO),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["redis-cli"]), "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["redis-cli"]), "-", None),
        ("  per critical section (ms)", median(cont["lockrun"]) / total,
         median(cont["redis-cli"]) / total, "-", None),
        ("handoff median (ms)", hand_ms, median(hand["redis-cli"]),
         f"lockrun <= {TARGET_HANDOFF_MS:g} ms", hand_ms <= TARGET_HANDOFF_MS),
        ("handoff p90 (ms)", p90(hand["lockrun"]), p90(hand["redis-cli"]), "-", None),
        ("peak RSS running `true` (MiB)", rss, None, f"lockrun <= {TARGET_RSS_MIB:g} MiB",
         rss <= TARGET_RSS_MIB),
    ]
    mode = "quick" if args.quick else "full"
    print(f"\nlockrun (redis backend) vs hand-written redis-cli SET NX PX / DEL -- {mode} run, "
          f"{os.cpu_count()} CPUs, runs interleaved\n")
    print_table(rows)
    print()
    lost = False
    for label, values in finals.items():
        if any(v != total for v in values):
            lost = True
            print(f"counter {label}: FAIL -- LOST UPDATE, final values {values} "
                  f"(expected {total})")
        else:
            print(f"counter {label}: ok ({total} in every rep)")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
