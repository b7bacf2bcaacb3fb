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

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import (SECTIONS, WORKERS, Broken, Iterations, Lockrun, Tool,  # noqa: E402
                      median, mib, p90)

TARGET_RATIO = 0.5
TARGET_RSS_MIB = 8.0

# This script's own iteration counts (it predates benchlib.QUICK and keeps its numbers).
QUICK = Iterations(warmup=3, iters=30, contention_reps=2, handoff_reps=6, rss_reps=3)
FULL = Iterations(warmup=10, iters=150, contention_reps=4, handoff_reps=20, rss_reps=10)


# --------------------------------------------------------------------------------------------
# The server.
# --------------------------------------------------------------------------------------------


class Etcd:
    """A private etcd member on free loopback ports, data in `tmp`."""

    def __init__(self, tmp: Path):
        self.client = benchlib.free_port()
        peer = benchlib.free_port()
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
            env=benchlib.ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


# --------------------------------------------------------------------------------------------
# The anchor: etcdctl lock.
# --------------------------------------------------------------------------------------------


class Etcdctl(Tool):
    """`etcdctl lock NAME -- COMMAND`. It always waits, so `wait` makes no difference."""

    label = "etcdctl"

    def __init__(self, endpoint: str):
        self.binary = shutil.which("etcdctl") or "etcdctl"
        self.endpoint = endpoint

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        return [self.binary, "--endpoints", self.endpoint, "lock", lock, "--", *command]


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = QUICK if args.quick else FULL
    # Stray ETCDCTL_* settings would change etcdctl; choose its v3 API explicitly.
    benchlib.scrub_env("ETCDCTL_")
    benchlib.ENV["ETCDCTL_API"] = "3"

    benchlib.require(["etcd", "etcdctl"], " (apt-get install etcd-server etcd-client)")
    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-etcd-") as tmp_name:
        tmp = Path(tmp_name)
        server = Etcd(tmp)  # Broken if it does not start
        tools = [Lockrun(binary, f"etcd://{server.endpoint}"), Etcdctl(server.endpoint)]
        print(f"lockrun: {binary}\netcd:    {server.endpoint} (data in {tmp}, removed "
              "afterwards)", file=sys.stderr)
        # Unlike benchlib.measure, this one also measures etcdctl's RSS.
        try:
            print(f"[a] uncontended: {n.warmup} warm-up + {n.iters} runs each ...",
                  file=sys.stderr)
            unc = benchlib.bench_uncontended(tools, n.warmup, n.iters)
            print(f"[b] contention: {WORKERS} procs x {SECTIONS} sections, "
                  f"{n.contention_reps} reps each ...", file=sys.stderr)
            cont, finals = benchlib.bench_contention(tools, tmp, n.contention_reps)
            print(f"[c] handoff: {n.handoff_reps} handoffs each ...", file=sys.stderr)
            hand = benchlib.bench_handoff(tools, tmp, n.handoff_reps)
            print(f"[d] peak RSS: {n.rss_reps} runs each ...", file=sys.stderr)
            rss, _ = benchlib.bench_rss(tools, tmp, n.rss_reps)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    unc_ratio = median(unc["lockrun"]) / median(unc["etcdctl"])
    cont_ratio = median(cont["lockrun"]) / median(cont["etcdctl"])
    hand_ok = median(hand["lockrun"]) <= median(hand["etcdctl"])
    rss_ok = mib(rss["lockrun"]) <= TARGET_RSS_MIB
    total = WORKERS * SECTIONS
    rows = [
        ("uncontended `true` median (ms)", median(unc["lockrun"]), median(unc["etcdctl"]),
         f"ratio <= {TARGET_RATIO}x", unc_ratio <= TARGET_RATIO),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["etcdctl"]), "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["etcdctl"]), f"ratio <= {TARGET_RATIO}x", cont_ratio <= TARGET_RATIO),
        ("  per critical section (ms)", median(cont["lockrun"]) / total,
         median(cont["etcdctl"]) / total, "-", None),
        ("handoff latency median (ms)", median(hand["lockrun"]), median(hand["etcdctl"]),
         "lockrun <= etcdctl", hand_ok),
        ("handoff latency p90 (ms)", p90(hand["lockrun"]), p90(hand["etcdctl"]), "-", None),
        ("peak RSS running `true` (MiB)", mib(rss["lockrun"]), mib(rss["etcdctl"]),
         f"lockrun <= {TARGET_RSS_MIB:g} MiB", rss_ok),
    ]
    benchlib.print_heading("lockrun (etcd backend) vs etcdctl lock", args.quick)
    benchlib.print_table(rows, "etcdctl")
    print()
    lost = benchlib.report_counters(finals)
    verdicts = [("uncontended ratio", unc_ratio <= TARGET_RATIO),
                ("contention ratio", cont_ratio <= TARGET_RATIO),
                ("handoff", hand_ok), ("lockrun RSS", rss_ok)]
    print("targets: " + ", ".join(f"{name} {'PASS' if ok else 'MISS'}" for name, ok in verdicts)
          + (", counters FAIL (LOST UPDATE)" if lost else ", counters ok"))
    return 1 if lost else 0


if __name__ == "__main__":
    benchlib.run_script(main)
