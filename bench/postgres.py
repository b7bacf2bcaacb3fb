#!/usr/bin/env python3
"""Benchmark: lockrun's postgres:// backend, with a hand-written psql lock beside it.

There is no standard command-line lock tool for PostgreSQL (nothing like flock(1) or a redis-cli
one-liner that people agree on), so the baseline is what people write by hand:

    psql -c "INSERT INTO bench_lock VALUES ('k')"  ;  COMMAND  ;  psql -c "DELETE FROM bench_lock ..."

(the INSERT retried every 10 ms while the name is taken). It has no expiry, no renewal, no fencing
token, no owner check and no fairness; it is the cost floor of "two statements around a command"
done with the standard client, and is shown for scale only: no target is a ratio to it.

What it measures, both tools in ONE run against ONE private PostgreSQL cluster, runs interleaved:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms); target: the
                         lockrun median <= 10 ms on loopback
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), and a check that the
                         counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: lockrun median <= 5 ms
  d. peak RSS            max resident set of lockrun running `true` (MiB); target <= 8 MiB

The cluster is made by this script with initdb in a temporary directory (as the `postgres` user
when run as root), started on a free loopback port with fsync=off, and stopped at the end.

Run (Python 3.11 standard library only, Linux only; needs the PostgreSQL server binaries under
/usr/lib/postgresql/*/bin, i.e. `apt-get install postgresql`):

    python3 bench/postgres.py            # builds lockrun with `cargo build --release`
    python3 bench/postgres.py --quick    # fewer iterations, a smoke run
    python3 bench/postgres.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a tool
failing, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pwd
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

TARGET_UNCONTENDED_MS = 10.0
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


def bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if not found:
        raise Broken("no PostgreSQL server under /usr/lib/postgresql/*/bin "
                     "(apt-get install postgresql)")
    return Path(found[-1]).parent


class Server:
    """A private cluster, ready when pg_isready says so."""

    def __init__(self, tmp: Path):
        self.bin = bin_dir()
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root.
            for name in ("postgres", "nobody"):
                try:
                    entry = pwd.getpwnam(name)
                except KeyError:
                    continue
                self.user = name
                os.chown(tmp, entry.pw_uid, entry.pw_gid)
                break
            else:
                raise Broken("running as root, but there is no postgres or nobody user")
        data = tmp / "data"
        init = subprocess.run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-sync"],
            user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if init.returncode != 0:
            raise Broken(f"initdb failed: {init.stderr.strip()}")
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={tmp}",
             "-c", "fsync=off"],
            user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 20
        while subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1",
                              "-p", str(self.port)]).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Broken(f"postgres did not start on port {self.port}")
            time.sleep(0.02)
        self.psql("CREATE TABLE bench_lock (name text PRIMARY KEY)")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def psql_base(self) -> list[str]:
        return [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-h", "127.0.0.1",
                "-p", str(self.port), "-U", "postgres", "-d", "postgres"]

    def psql_argv(self, sql: str) -> list[str]:
        return [*self.psql_base(), "-c", sql]

    def psql(self, sql: str) -> str:
        out = subprocess.run(self.psql_argv(sql), capture_output=True, text=True)
        if out.returncode != 0:
            raise Broken(f"psql failed on {sql!r}: {out.stderr.strip()}")
        return out.stdout.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()


# ------------------------------------------------------------------------------------------------
# The two tools, as "a prefix that runs COMMAND under lock NAME".
# ------------------------------------------------------------------------------------------------


@dataclass
class Tool:
    label: str
    lockrun: str
    server: Server

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        if self.label == "lockrun":
            return [self.lockrun, "--backend", self.server.url, "--name", lock, "--", *command]
        psql = " ".join(self.server.psql_base())
        take = (f"{psql} -c \"INSERT INTO bench_lock VALUES ('{lock}') "
                f"ON CONFLICT DO NOTHING RETURNING 1\"")
        drop = f"{psql} -c \"DELETE FROM bench_lock WHERE name = '{lock}'\" >/dev/null"
        # Uncontended: exactly the hand-written pair. Waiting: the INSERT retried every 10 ms.
        acquire = (f"until [ \"$({take})\" = 1 ]; do sleep 0.01; done" if wait
                   else f"{take} >/dev/null")
        script = f'{acquire}; "$@"; s=$?; {drop}; exit $s'
        return ["/bin/sh", "-c", script, "sh", *command]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("LOCKRUN_") and not k.startswith("PG")}


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
    header = ("metric", "lockrun", "psql pair", "ratio", "target")
    lines = []
    for metric, lr, base, target, met in rows:
        ratio = "-" if not base else f"{lr / base:.2f}x"
        verdict = "" if met is None else (" PASS" if met else " MISS")
        lines.append((metric, fmt(lr), "-" if base is None else fmt(base), ratio,
                      target + verdict))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]
    for r in [header, None, *lines]:
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

    try:
        binary = str(Path(args.bin).resolve()) if args.bin else build_lockrun()
    except Broken as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-pg-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            server = Server(tmp)
        except Broken as e:
            print(f"bench: {e}", file=sys.stderr)
            return 1
        try:
            tools = [Tool("lockrun", binary, server), Tool("psql", binary, server)]
            print(f"lockrun: {binary}\npostgres ({server.bin.parent.name}) on "
                  f"127.0.0.1:{server.port}", file=sys.stderr)
            # The schema is created on first use; that one-off cost is not what is measured.
            run_ok(tools[0].wrap("setup", ["true"]))
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

    unc_ms = median(unc["lockrun"])
    hand_ms = median(hand["lockrun"])
    total = WORKERS * SECTIONS
    rows = [
        ("uncontended `true` median (ms)", unc_ms, median(unc["psql"]),
         f"lockrun <= {TARGET_UNCONTENDED_MS:g} ms", unc_ms <= TARGET_UNCONTENDED_MS),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["psql"]), "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["psql"]), "-", None),
        ("  per critical section (ms)", median(cont["lockrun"]) / total,
         median(cont["psql"]) / total, "-", None),
        ("handoff median (ms)", hand_ms, median(hand["psql"]),
         f"lockrun <= {TARGET_HANDOFF_MS:g} ms", hand_ms <= TARGET_HANDOFF_MS),
        ("handoff p90 (ms)", p90(hand["lockrun"]), p90(hand["psql"]), "-", None),
        ("peak RSS running `true` (MiB)", rss, None, f"lockrun <= {TARGET_RSS_MIB:g} MiB",
         rss <= TARGET_RSS_MIB),
    ]
    mode = "quick" if args.quick else "full"
    print(f"\nlockrun (postgres backend) vs a hand-written psql INSERT / DELETE pair -- {mode} "
          f"run, {os.cpu_count()} CPUs, runs interleaved")
    print("(there is no standard CLI lock for PostgreSQL: the psql pair is a cost floor for "
          "scale, without expiry, renewal, fencing or fairness)\n")
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
