#!/usr/bin/env python3
"""Benchmark: per-handoff cost of lockrun's etcd:// backend as the line grows (10, 100 and 1,000
queued waiters on one name), side by side with `etcdctl lock` (etcd's own lock recipe).

For each queue length Q and each tool: a holder takes NAME, Q waiters queue behind it (each
running `date +%s%N` into a file of its own, so its start is stamped by the command itself),
the holder lets go and the line drains. It reports, per handoff:

  time            the median gap between two consecutive waiters' start stamps (ms), and the
                  growth against 10 waiters; target: lockrun's growth <= 1.2x at 100 and 1,000;
                  also the p90 gap and the mean (span of the starts / handoffs), which show the
                  tail: a thousand waiting processes keep leases alive on a shared machine
  watch events    events etcd sent to watchers (etcd_debugging_mvcc_events_total): a herd
                  shows as events growing with Q
  requests        unary requests etcd handled plus watch creations/cancellations (gRPC
                  metrics), keep-alives not counted
  etcd CPU        CPU time of the etcd process (user + system, /proc/PID/stat), in ms
  keep-alives     lease keep-alives received; background work of the queued waiters (each
                  renews its lease every TTL/3 while it waits), proportional to Q times the
                  drain time, not to the handoffs: shown apart

Server figures are diffed over the drain only (from the holder's release to the last waiter's
exit) and divided by Q. The anchor, `etcdctl lock`, runs at 10 and 100 waiters; at 1,000 only
with --anchor-1000 (a thousand etcdctl processes take about 17 GB).

The etcd member is started by this script on free loopback ports, in a temporary directory, and
stopped at the end (never one that happens to run on the machine).

Run (Python 3.11 standard library only, Linux only; needs Debian's etcd-server and etcd-client):

    python3 bench/etcd_scale.py            # builds lockrun with `cargo build --release`
    python3 bench/etcd_scale.py --quick    # one round per queue length, a smoke run
    python3 bench/etcd_scale.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a waiter failing, a
waiter that never ran, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken  # noqa: E402
from etcd_vs_etcdctl import Etcd  # noqa: E402  (the private etcd member)

QUEUES = (10, 100, 1000)
TARGET_GROWTH = 1.2
# How long a queue may take to fill, and to drain.
FILL_TIMEOUT_S = 120
DRAIN_TIMEOUT_S = 300


# --------------------------------------------------------------------------------------------
# The tools: how each names its keys and runs a command under the lock.
# --------------------------------------------------------------------------------------------


class Tool:
    label: str

    def argv(self, name: str, command: list[str]) -> list[str]:
        raise NotImplementedError

    def prefix(self, name: str) -> str:
        """The etcd key prefix under which each holder and waiter of NAME has one key."""
        raise NotImplementedError


class Lockrun(Tool):
    label = "lockrun"

    def __init__(self, binary: str, endpoint: str):
        self.binary = binary
        self.url = f"etcd://{endpoint}"

    def argv(self, name: str, command: list[str]) -> list[str]:
        return [self.binary, "-q", "--backend", self.url, "--name", name, "--", *command]

    def prefix(self, name: str) -> str:
        return f"lockrun/{name}/#holders/"


class Etcdctl(Tool):
    label = "etcdctl"

    def __init__(self, endpoint: str):
        self.binary = shutil.which("etcdctl") or "etcdctl"
        self.endpoint = endpoint

    def argv(self, name: str, command: list[str]) -> list[str]:
        return [self.binary, "--endpoints", self.endpoint, "lock", name, "--", *command]

    def prefix(self, name: str) -> str:
        return f"{name}/"


# --------------------------------------------------------------------------------------------
# Talking to etcd from outside: key counts (JSON gateway), metrics, CPU time.
# --------------------------------------------------------------------------------------------


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def count_keys(endpoint: str, prefix: str) -> int:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": b64(prefix), "range_end": b64(end), "count_only": True}).encode()
    req = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return int(json.loads(resp.read()).get("count", 0))


def metrics(endpoint: str) -> dict[str, float]:
    """The counters this benchmark reports, summed over label sets."""
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {"events": 0.0, "requests": 0.0, "watch_msgs": 0.0, "keepalives": 0.0,
           "writes": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, value = line.rsplit(" ", 1)
        v = float(value)
        if key == "etcd_debugging_mvcc_events_total":
            out["events"] += v
        elif key in ("etcd_mvcc_put_total", "etcd_mvcc_delete_total"):
            out["writes"] += v
        elif key.startswith("grpc_server_handled_total{") and 'grpc_type="unary"' in key:
            out["requests"] += v
        elif key.startswith("grpc_server_msg_received_total{"):
            if 'grpc_method="Watch"' in key:
                out["watch_msgs"] += v
            elif 'grpc_method="LeaseKeepAlive"' in key:
                out["keepalives"] += v
    return out


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------
# One drain.
# --------------------------------------------------------------------------------------------


def wait_all(pids: list[int], what: str, timeout_s: float) -> None:
    """Reaps every pid; Broken if one failed or they did not all finish in time."""
    failures = benchlib.wait_all(pids, what, timeout_s)
    if failures:
        raise Broken(f"{failures} {what} failed")


def settle(endpoint: str, quiet_s: float = 0.5, timeout_s: float = 60) -> None:
    """Waits until etcd has seen no write for `quiet_s` (every waiter done joining)."""
    deadline = time.monotonic() + timeout_s
    last = metrics(endpoint)["writes"]
    since = time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
        now = metrics(endpoint)["writes"]
        if now != last:
            last, since = now, time.monotonic()


@dataclass
class Drain:
    """What one drain of Q waiters measured; per-handoff figures."""

    gap_ms: float  # median gap between consecutive starts
    p90_ms: float  # 90th percentile of those gaps
    mean_ms: float  # span of the starts / (Q - 1)
    events: float
    requests: float
    keepalives: float
    cpu_ms: float


def drain_once(tool: Tool, server: Etcd, queued: int, tag: str, tmp: Path) -> Drain:
    name = f"scale-{tool.label}-{queued}-{tag}"
    work = tmp / name
    work.mkdir()
    ready, go = work / "ready", work / "go"
    holder = benchlib.spawn(tool.argv(name, [
        "sh", "-c", ': > "$1"; while [ ! -e "$2" ]; do sleep 0.005; done', "sh",
        str(ready), str(go)]), quiet=True)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: the holder never started")
        time.sleep(0.005)
    stamps = [work / f"w{i}" for i in range(queued)]
    waiters = [benchlib.spawn(tool.argv(name, ["date", "+%s%N"]), stdout=str(s), quiet=True)
               for s in stamps]
    deadline = time.monotonic() + FILL_TIMEOUT_S
    while count_keys(server.endpoint, tool.prefix(name)) < queued + 1:
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: {queued} waiters did not all queue in time")
        time.sleep(0.1)
    settle(server.endpoint)
    before, cpu_before = metrics(server.endpoint), cpu_ms(server.proc.pid)
    go.touch()
    wait_all([holder], f"{tool.label} holder", DRAIN_TIMEOUT_S)
    wait_all(waiters, f"{tool.label} waiters", DRAIN_TIMEOUT_S)
    after, cpu_after = metrics(server.endpoint), cpu_ms(server.proc.pid)
    starts = []
    for s in stamps:
        text = s.read_text().strip()
        if not text:
            raise Broken(f"{tool.label}: a waiter never ran its command")
        starts.append(int(text))
    starts.sort()
    gaps = [(b - a) / 1e6 for a, b in zip(starts, starts[1:])]
    per = lambda key: (after[key] - before[key]) / queued  # noqa: E731
    return Drain(
        gap_ms=statistics.median(gaps),
        p90_ms=benchlib.p90(gaps),
        mean_ms=(starts[-1] - starts[0]) / 1e6 / (queued - 1),
        events=per("events"),
        requests=per("requests") + per("watch_msgs"),
        keepalives=per("keepalives"),
        cpu_ms=(cpu_after - cpu_before) / queued,
    )


def median_drain(drains: list[Drain]) -> Drain:
    pick = lambda attr: statistics.median(getattr(d, attr) for d in drains)  # noqa: E731
    return Drain(*(pick(f) for f in Drain.__dataclass_fields__))


# --------------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------------


def rows(results: dict[tuple[str, int], Drain], queues: tuple[int, ...]) -> list[benchlib.Row]:
    out: list[benchlib.Row] = []
    lr = lambda q: results[("lockrun", q)]  # noqa: E731
    ec = lambda q: results.get(("etcdctl", q))  # noqa: E731
    for q in queues:
        anchor = ec(q)
        out.append((f"per handoff, {q} queued: median gap (ms)", lr(q).gap_ms,
                    anchor.gap_ms if anchor else None, "-", None))
    for q in queues[1:]:
        growth = lr(q).gap_ms / lr(queues[0]).gap_ms
        anchor = ec(q)
        anchor_growth = anchor.gap_ms / ec(queues[0]).gap_ms if anchor and ec(queues[0]) else None
        out.append((f"  growth {queues[0]} -> {q} queued (x)", growth, anchor_growth,
                    f"lockrun <= {TARGET_GROWTH}x", growth <= TARGET_GROWTH))
    for label, attr in (("p90 gap", "p90_ms"), ("mean (span / handoffs)", "mean_ms")):
        for q in queues:
            anchor = ec(q)
            out.append((f"per handoff, {q} queued: {label} (ms)", getattr(lr(q), attr),
                        getattr(anchor, attr) if anchor else None, "-", None))
    for label, attr in (("watch events sent", "events"), ("requests (no keep-alives)", "requests"),
                        ("etcd CPU (ms)", "cpu_ms"), ("background keep-alives", "keepalives")):
        for q in queues:
            anchor = ec(q)
            out.append((f"{label} per handoff, {q} queued", getattr(lr(q), attr),
                        getattr(anchor, attr) if anchor else None, "-", None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round per queue length")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary to use (skips the build)")
    ap.add_argument("--queues", metavar="N,N,...", default=",".join(map(str, QUEUES)),
                    help="queue lengths to measure, the first being the baseline "
                    f"(default {','.join(map(str, QUEUES))})")
    ap.add_argument("--anchor-1000", action="store_true",
                    help="also run etcdctl lock with 1,000 waiters (about 17 GB of memory)")
    args = ap.parse_args()
    queues = tuple(int(q) for q in args.queues.split(","))
    if len(queues) < 2 or min(queues) < 2:
        raise Broken("--queues needs at least two lengths, each at least 2")
    rounds = 1 if args.quick else 3
    benchlib.scrub_env("ETCDCTL_")
    benchlib.ENV["ETCDCTL_API"] = "3"
    benchlib.require(["etcd", "etcdctl"], " (apt-get install etcd-server etcd-client)")
    binary = benchlib.lockrun_binary(args.bin)

    results: dict[tuple[str, int], Drain] = {}
    with tempfile.TemporaryDirectory(prefix="lockrun-bench-etcd-scale-") as tmp_name:
        tmp = Path(tmp_name)
        stamps = benchlib.stamp_dir(tmp)
        server = Etcd(tmp)
        print(f"lockrun: {binary}\netcd:    {server.endpoint} (data in {tmp}, removed "
              "afterwards)", file=sys.stderr)
        tools: list[Tool] = [Lockrun(binary, server.endpoint), Etcdctl(server.endpoint)]
        try:
            for queued in queues:
                for tool in tools:
                    if tool.label == "etcdctl" and queued >= 1000 and not args.anchor_1000:
                        continue
                    drains = []
                    for r in range(rounds):
                        print(f"[{tool.label}] {queued} queued, round {r + 1}/{rounds} ...",
                              file=sys.stderr)
                        drains.append(drain_once(tool, server, queued, str(r), stamps))
                    results[(tool.label, queued)] = median_drain(drains)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    benchlib.print_heading(
        "lockrun (etcd backend) vs etcdctl lock: per-handoff cost as the line grows",
        args.quick,
        f"medians of {rounds} round(s); each waiter runs `date +%s%N`; the gaps between "
        "consecutive starts are the handoffs")
    benchlib.print_table(rows(results, queues), "etcdctl")
    return 0


if __name__ == "__main__":
    benchlib.run_script(main)
