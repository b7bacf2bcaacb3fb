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

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken, Iterations, Lockrun, Tool, median  # noqa: E402

TARGET_UNCONTENDED_RATIO = 1.0
TARGET_HANDOFF_MS = 5.0
TARGET_RSS_MIB = 8.0

# Full runs (`--quick` uses benchlib.QUICK).
FULL = Iterations(warmup=20, iters=200, contention_reps=4, handoff_reps=20, rss_reps=10)


# ------------------------------------------------------------------------------------------------
# The server.
# ------------------------------------------------------------------------------------------------


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
# The anchor: SET NX PX / DEL with redis-cli.
# ------------------------------------------------------------------------------------------------


class RedisCli(Tool):
    """The hand-written lock: `redis-cli SET k v NX PX 15000` (retried every 10 ms to wait),
    the command, `redis-cli DEL k`."""

    label = "redis-cli"

    def __init__(self, port: int):
        self.port = port

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        cli = f"redis-cli -p {self.port}"
        return benchlib.polled_shell_lock(
            take=f"{cli} SET bench:{lock} v NX PX 15000", taken="OK",
            release=f"{cli} DEL bench:{lock}", command=command, wait=wait)


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = benchlib.QUICK if args.quick else FULL

    benchlib.require(["redis-server", "redis-cli"],
                     " (apt-get install redis-server redis-tools)")
    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-redis-") as tmp_name:
        tmp = Path(tmp_name)
        server = Server(tmp)  # Broken if it does not start
        try:
            lockrun = Lockrun(binary, f"redis://127.0.0.1:{server.port}")
            print(f"lockrun: {binary}\nredis-server on 127.0.0.1:{server.port}", file=sys.stderr)
            res = benchlib.measure(lockrun, RedisCli(server.port), tmp, n)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    unc_ratio = median(res.uncontended["lockrun"]) / median(res.uncontended["redis-cli"])
    rows = benchlib.server_rows(
        res, "redis-cli",
        uncontended_target=(f"ratio <= {TARGET_UNCONTENDED_RATIO}x",
                            unc_ratio <= TARGET_UNCONTENDED_RATIO),
        handoff_target_ms=TARGET_HANDOFF_MS, rss_target_mib=TARGET_RSS_MIB)
    benchlib.print_heading(
        "lockrun (redis backend) vs hand-written redis-cli SET NX PX / DEL", args.quick)
    benchlib.print_table(rows, "redis-cli")
    print()
    return 1 if benchlib.report_counters(res.finals) else 0


if __name__ == "__main__":
    benchlib.run_script(main)
