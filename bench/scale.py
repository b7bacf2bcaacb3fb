#!/usr/bin/env python3
"""Benchmark: lockrun's cost as the work grows, on every backend (issue 17). Not a test.

For each backend (file, redis, etcd, postgres — servers started here on free loopback ports, in a
temporary directory, stopped at the end):

  handoff      10, 100 and 1,000 waiters queued on one name behind a holder, each running
               `date +%s%N` into a file of its own; the holder lets go and the line drains. Per
               handoff: the median gap between consecutive starts (ms), its growth against 10
               waiters (target <= 1.2x), and the server's work per handoff (Redis: commands, from
               INFO; PostgreSQL: transactions, from pg_stat_database; etcd: requests and watch
               events, from its metrics) over the drain.
  names        1,000 lockruns, each holding a name of its own at once (--ttl 15s, renewing every
               5 s): how many got their name, the server's request rate while they hold (target
               about 1,000 / 5 s = 200 requests a second, plus nothing per idle holder), and the
               median lockrun RSS.

Run (Python 3.11 standard library only, Linux only; redis-server, etcd, PostgreSQL installed):

    python3 bench/scale.py                      # every backend; builds with cargo build --release
    python3 bench/scale.py --backend redis      # one backend
    python3 bench/scale.py --queues 10,100      # shorter lines (quicker)
    python3 bench/scale.py --bin target/release/lockrun

Exit status: 0 (a report, misses included); 1 if something broke (a waiter failed, a server did
not start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import Broken  # noqa: E402
import etcd_vs_etcdctl  # noqa: E402
import postgres as pg  # noqa: E402
import redis_vs_cli  # noqa: E402

TARGET_GROWTH = 1.2
NAMES = 1000
FILL_TIMEOUT_S = 240
DRAIN_TIMEOUT_S = 600
HOLD_WINDOW_S = 10.0


@dataclass
class Backend:
    """One backend under test: its URL and a counter of the work its server does."""

    label: str
    url: str
    work: Callable[[], float]  # a monotone count of server work (commands, transactions, ...)
    work_unit: str
    stop: Callable[[], None]


def redis_backend(tmp: Path) -> Backend:
    server = redis_vs_cli.Server(tmp)

    def commands() -> float:
        out = subprocess.run(
            ["redis-cli", "-p", str(server.port), "INFO", "stats"],
            capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("total_commands_processed:"):
                return float(line.split(":")[1])
        raise Broken("redis INFO has no total_commands_processed")

    return Backend("redis", f"redis://127.0.0.1:{server.port}", commands, "commands",
                   server.stop)


def postgres_backend(tmp: Path) -> Backend:
    # Every lockrun holds one connection, waiting or holding: room for the thousand names (and
    # the longest line) beside `status`; the default max_connections, 100, refused the probes.
    # PgBouncer in front of a small server is bench/pg_scale.py's.
    server = pg.Server(tmp, ("max_connections=1200", "shared_buffers=128MB"))

    def transactions() -> float:
        return float(server.psql(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'"))

    return Backend("postgres", server.url, transactions, "transactions", server.stop)


def etcd_backend(tmp: Path) -> Backend:
    server = etcd_vs_etcdctl.Etcd(tmp)

    def requests() -> float:
        with urllib.request.urlopen(f"http://{server.endpoint}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(("grpc_server_handled_total", "grpc_server_msg_received_total")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    return Backend("etcd", f"etcd://{server.endpoint}", requests, "requests", server.stop)


def file_backend(tmp: Path) -> Backend:
    return Backend("file", f"file://{tmp}/state", lambda: 0.0, "(no server)", lambda: None)


BACKENDS = {
    "file": file_backend,
    "redis": redis_backend,
    "etcd": etcd_backend,
    "postgres": postgres_backend,
}


def status(binary: str, url: str, name: str) -> dict:
    out = subprocess.run([binary, "--backend", url, "status", name, "--json"],
                                  capture_output=True, text=True, env=benchlib.ENV)
    if out.returncode != 0:
        raise Broken(f"status failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


@dataclass
class Drain:
    gap_ms: float
    p90_ms: float
    work: float  # server work per handoff


def drain(binary: str, backend: Backend, queued: int, tmp: Path) -> Drain:
    name = f"scale/{queued}"
    work = tmp / f"drain-{queued}"
    work.mkdir()
    ready, go = work / "ready", work / "go"
    argv = lambda command: [binary, "--backend", backend.url, "--name", name,  # noqa: E731
                            "--ttl", "15s", "--wait", "20m", "--progress", "0", "--", *command]
    hold = ': > "$1"; while [ ! -e "$2" ]; do sleep 0.005; done'
    holder = benchlib.spawn(argv(["sh", "-c", hold, "sh", str(ready), str(go)]), quiet=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{backend.label}: the holder never started")
        time.sleep(0.005)
    stamps = [work / f"w{i}" for i in range(queued)]
    waiters = []
    for s in stamps:
        waiters.append(benchlib.spawn(argv(["date", "+%s%N"]), stdout=str(s), quiet=True))
    deadline = time.monotonic() + FILL_TIMEOUT_S
    while status(binary, backend.url, name)["waiters"] < queued:
        if time.monotonic() > deadline:
            raise Broken(f"{backend.label}: {queued} waiters did not all queue in time")
        time.sleep(0.2)
    time.sleep(0.5)
    before = backend.work()
    go.touch()
    failed = benchlib.wait_all([holder] + waiters, f"{backend.label} runs", DRAIN_TIMEOUT_S)
    after = backend.work()
    if failed:
        raise Broken(f"{backend.label}: {failed} runs failed in the drain of {queued}")
    starts = sorted(int(s.read_text().strip()) for s in stamps)
    gaps = [(b - a) / 1e6 for a, b in zip(starts, starts[1:])]
    return Drain(statistics.median(gaps), benchlib.p90(gaps), (after - before) / queued)


@dataclass
class Held:
    got: int
    rate: float  # server work per second while every name is held
    rss_mib: float
    lost: int  # holders that did not end with status 0 (a lease lost while held)


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def many_names(binary: str, backend: Backend, tmp: Path, names: int) -> Held:
    work = tmp / "names"
    work.mkdir()
    # The holders block reading a FIFO until it is closed: a command that polled (a `sleep` a
    # few times a second each) would make a thousand holders fork thousands of processes a
    # second, and starve the lockruns of the CPU they renew with.
    go = work / "go"
    os.mkfifo(go)
    pids = []
    for i in range(names):
        ready = work / f"r{i}"
        pids.append(benchlib.spawn([
            binary, "--backend", backend.url, "--name", f"names/{i}", "--ttl", "15s",
            "--no-wait", "--", "sh", "-c", ': > "$1"; read line < "$2" || :',
            "sh", str(ready), str(go)], quiet=True))
    deadline = time.monotonic() + FILL_TIMEOUT_S
    while sum((work / f"r{i}").exists() for i in range(names)) < names:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    got = sum((work / f"r{i}").exists() for i in range(names))
    before, start = backend.work(), time.monotonic()
    time.sleep(HOLD_WINDOW_S)
    rate = (backend.work() - before) / (time.monotonic() - start)
    rss = statistics.median(rss_kib(p) for p in pids) / 1024
    try:
        os.close(os.open(go, os.O_WRONLY | os.O_NONBLOCK))  # end of file for every reader
    except OSError:
        pass  # no reader left
    lost = benchlib.wait_all(pids, f"{backend.label} holders", DRAIN_TIMEOUT_S)
    return Held(got, rate, rss, lost)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="all", choices=["all", *BACKENDS])
    parser.add_argument("--queues", default="10,100,1000")
    parser.add_argument("--names", type=int, default=NAMES, help="names held at once")
    parser.add_argument("--bin")
    args = parser.parse_args()
    benchlib.require(["redis-server", "redis-cli", "etcd"])
    binary = benchlib.lockrun_binary(args.bin)
    queues = [int(q) for q in args.queues.split(",")]
    labels = list(BACKENDS) if args.backend == "all" else [args.backend]
    table = []
    for label in labels:
        with tempfile.TemporaryDirectory(prefix=f"lockrun-scale-{label}-") as tmp:
            tmp_path = Path(tmp)
            os.chmod(tmp_path, 0o755)
            (tmp_path / "server").mkdir()
            backend = BACKENDS[label](tmp_path / "server")
            try:
                drains = {q: drain(binary, backend, q, tmp_path) for q in queues}
                held = many_names(binary, backend, tmp_path, args.names)
            finally:
                backend.stop()
        base = drains[queues[0]].gap_ms
        for q in queues:
            d = drains[q]
            growth = d.gap_ms / base if base else float("nan")
            verdict = "PASS" if q == queues[0] or growth <= TARGET_GROWTH else "MISS"
            table.append(f"| {label} | {q} | {d.gap_ms:.2f} | {d.p90_ms:.2f} | {growth:.2f}x "
                         f"{verdict} | {d.work:.1f} {backend.work_unit} |")
        table.append(f"| {label} | {args.names} names held | got {held.got}/{args.names}, "
                     f"{held.lost} failed | "
                     f"{held.rate:.0f} {backend.work_unit}/s | RSS {held.rss_mib:.1f} MiB | |")
        print(f"{label}: done", file=sys.stderr)
    print("| backend | queued | handoff median ms | p90 ms | growth vs first | server work / handoff |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    benchlib.run_script(main)
