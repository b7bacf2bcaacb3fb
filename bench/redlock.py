#!/usr/bin/env python3
"""Benchmark: lockrun's redlock:// backend (3 and 5 masters) side by side with its redis://
backend on one of the same servers.

Redlock talks to every master at once (one request per master per round, in parallel), so its
cost over one Redis should be small: the same rounds, plus the fencing token's write-back round.

What it measures, all three in ONE run against the same private redis-servers, runs interleaved:

  a. uncontended cost    wall time of one `lockrun ... -- true`, median and p90 (ms); targets: the
                         ratio of the medians, redlock/redis, <= 1.3 with 3 masters, <= 1.5 with 5
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), and a check that the
                         counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: median <= 5 ms
  d. peak RSS            max resident set of lockrun running `true` (MiB); target <= 8 MiB

The five servers are started by this script on free loopback ports, each in a temporary directory
of its own, with persistence off, and stopped at the end. The single-Redis anchor is the first of
them.

Run (Python 3.11 standard library only, Linux only; needs redis-server):

    python3 bench/redlock.py            # builds lockrun with `cargo build --release`
    python3 bench/redlock.py --quick    # fewer iterations, a smoke run
    python3 bench/redlock.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a run
failing, a server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken, Iterations, Lockrun, median, p90  # noqa: E402

TARGET_RATIO = {3: 1.3, 5: 1.5}
TARGET_HANDOFF_MS = 5.0
TARGET_RSS_MIB = 8.0
MASTERS = 5

# Full runs (`--quick` uses benchlib.QUICK).
FULL = Iterations(warmup=20, iters=200, contention_reps=4, handoff_reps=20, rss_reps=10)


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
        self.port = benchlib.free_port()
        tmp.mkdir()
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


def labelled(binary: str, url: str, label: str) -> Lockrun:
    tool = Lockrun(binary, url)
    tool.label = label
    return tool


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = benchlib.QUICK if args.quick else FULL

    benchlib.require(["redis-server"], " (apt-get install redis-server)")
    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-redlock-") as tmp_name:
        tmp = Path(tmp_name)
        servers: list[Server] = []
        try:
            for i in range(MASTERS):
                servers.append(Server(tmp / f"m{i}"))
            hosts = [f"127.0.0.1:{s.port}" for s in servers]
            redis = labelled(binary, f"redis://{hosts[0]}", "redis")
            three = labelled(binary, "redlock://" + ",".join(hosts[:3]), "redlock-3")
            five = labelled(binary, "redlock://" + ",".join(hosts), "redlock-5")
            tools = [redis, three, five]
            print(f"lockrun: {binary}\nredis-servers on {', '.join(hosts)}", file=sys.stderr)
            print(f"[a] uncontended: {n.warmup} warm-up + {n.iters} runs each ...",
                  file=sys.stderr)
            unc = benchlib.bench_uncontended(tools, n.warmup, n.iters)
            print(f"[b] contention: {benchlib.WORKERS} x {benchlib.SECTIONS}, "
                  f"{n.contention_reps} reps each ...", file=sys.stderr)
            cont, finals = benchlib.bench_contention(tools, tmp, n.contention_reps)
            print(f"[c] handoff: {n.handoff_reps} each ...", file=sys.stderr)
            hand = benchlib.bench_handoff(tools, tmp, n.handoff_reps)
            print(f"[d] peak RSS: {n.rss_reps} runs each ...", file=sys.stderr)
            rss, _ = benchlib.bench_rss(tools, tmp, n.rss_reps)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            for server in servers:
                server.stop()

    total = benchlib.WORKERS * benchlib.SECTIONS
    rows: list[benchlib.Row] = []
    for masters, tool in ((3, three), (5, five)):
        lr = tool.label
        ratio = median(unc[lr]) / median(unc["redis"])
        hand_ms = median(hand[lr])
        rss_mib = benchlib.mib(rss[lr])
        rows += [
            (f"{lr}: uncontended `true` median (ms)", median(unc[lr]), median(unc["redis"]),
             f"ratio <= {TARGET_RATIO[masters]}x", ratio <= TARGET_RATIO[masters]),
            (f"{lr}: uncontended `true` p90 (ms)", p90(unc[lr]), p90(unc["redis"]), "-", None),
            (f"{lr}: contention {benchlib.WORKERS}x{benchlib.SECTIONS} total median (ms)",
             median(cont[lr]), median(cont["redis"]), "-", None),
            (f"{lr}:   per critical section (ms)", median(cont[lr]) / total,
             median(cont["redis"]) / total, "-", None),
            (f"{lr}: handoff median (ms)", hand_ms, median(hand["redis"]),
             f"<= {TARGET_HANDOFF_MS:g} ms", hand_ms <= TARGET_HANDOFF_MS),
            (f"{lr}: handoff p90 (ms)", p90(hand[lr]), p90(hand["redis"]), "-", None),
            (f"{lr}: peak RSS running `true` (MiB)", rss_mib, benchlib.mib(rss["redis"]),
             f"<= {TARGET_RSS_MIB:g} MiB", rss_mib <= TARGET_RSS_MIB),
        ]
    benchlib.print_heading(
        "lockrun redlock:// (3 and 5 masters) vs redis:// (one of them)", args.quick)
    benchlib.print_table(rows, "redis")
    print()
    return 1 if benchlib.report_counters(finals) else 0


if __name__ == "__main__":
    benchlib.run_script(main)
