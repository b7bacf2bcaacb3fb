#!/usr/bin/env python3
"""Benchmark: lockrun's dynamodb:// backend against dynalite, with a hand-written curl lock beside it.

There is no standard command-line lock for DynamoDB, so the baseline is what people write by hand
with the standard HTTP client:

    curl PutItem (ConditionExpression attribute_not_exists)  ;  COMMAND  ;  curl DeleteItem

(the PutItem retried every 10 ms while the name is taken). It has no expiry, no renewal, no fencing
token, no owner check and no fairness; it is the cost floor of "two requests around a command", shown
for scale only: no target is a ratio to it.

What it measures, against ONE private dynalite (the DynamoDB API on LevelDB) on a free loopback
port, runs interleaved:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms)
  b. contention          8 processes x 15 critical sections on ONE name (a read-modify-write of a
                         counter file); total wall time, and a check that the counter ends at 120
  c. handoff latency     from the holder's command's last action to the waiter's command's first
                         action, median and p90 (ms); target: lockrun median <= one re-check of
                         the head of the line (100 ms, jittered +-25%: 125 ms)
  d. peak RSS            max resident set of lockrun running `true` (MiB); target <= 10 MiB
  e. requests            counted by a proxy that reads each request's X-Amz-Target: per
                         uncontended run (target: exactly 2, both UpdateItem: the claim and the
                         release), and per second while waiting (the head of the line, the
                         waiters behind it), so that the cost of a run can be priced

Run (Python 3.11 standard library only, Linux only; needs Node.js and dynalite as scripts/test.sh
installs it into tools/dynalite, and curl):

    python3 bench/dynamodb.py            # builds lockrun with `cargo build --release`
    python3 bench/dynamodb.py --quick    # fewer iterations, a smoke run
    python3 bench/dynamodb.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a tool
failing, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken, Iterations, Lockrun, Tool, median  # noqa: E402

TARGET_HANDOFF_MS = 125.0
TARGET_RSS_MIB = 10.0
TARGET_REQUESTS = 2
TABLE = "locks"

# Full runs (`--quick` uses benchlib.QUICK).
FULL = Iterations(warmup=20, iters=200, contention_reps=4, handoff_reps=20, rss_reps=10)
COUNTED_RUNS = 20
WAIT_SECONDS = 5.0
WAITERS = 5


# ------------------------------------------------------------------------------------------------
# The server, and a proxy that counts requests by operation.
# ------------------------------------------------------------------------------------------------


class Server:
    """A private dynalite, ready when its port accepts connections."""

    def __init__(self, tmp: Path):
        self.port = benchlib.free_port()
        self.log = open(tmp / "dynalite.log", "ab")
        self.proc = benchlib.start_dynalite(self.port, tmp / "data", self.log)
        deadline = time.monotonic() + 20
        while not benchlib.accepts(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Broken(f"dynalite did not start on port {self.port}")
            time.sleep(0.02)

    def url(self, port: int | None = None) -> str:
        return f"dynamodb://{TABLE}?endpoint=http://127.0.0.1:{port or self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class CountingProxy:
    """Forwards 127.0.0.1:port to the server and counts requests by their X-Amz-Target."""

    TARGET = re.compile(rb"X-Amz-Target: DynamoDB_20120810\.(\w+)", re.IGNORECASE)

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def take(self) -> Counter:
        """The counts so far, and a fresh start."""
        with self.lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self.pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, False), daemon=True).start()

    def pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        tail = b""
        try:
            while data := src.recv(65536):
                if requests:
                    window = tail + data
                    found = self.TARGET.findall(window)
                    # A header split across reads is seen once, in the window that completes it.
                    already = self.TARGET.findall(tail)
                    with self.lock:
                        for op in found[len(already):]:
                            self.counts[op.decode()] += 1
                    tail = window[-64:]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


# ------------------------------------------------------------------------------------------------
# The anchor: a conditional PutItem / DeleteItem with curl.
# ------------------------------------------------------------------------------------------------


class Curl(Tool):
    """The hand-written lock: a PutItem conditional on the key not existing (retried every 10 ms
    to wait, while the name is taken), the command, a DeleteItem."""

    label = "curl"

    def __init__(self, port: int):
        self.port = port

    def call(self, target: str, body: dict) -> str:
        headers = [
            "Content-Type: application/x-amz-json-1.0",
            f"X-Amz-Target: DynamoDB_20120810.{target}",
            "X-Amz-Date: 20200101T000000Z",
            "Authorization: AWS4-HMAC-SHA256 Credential=bench/20200101/us-east-1/dynamodb/"
            "aws4_request, SignedHeaders=host;x-amz-date, Signature=00",
        ]
        flags = " ".join(f"-H '{h}'" for h in headers)
        return (f"curl -s -o /dev/null -w '%{{http_code}}' -X POST {flags} "
                f"-d '{json.dumps(body)}' http://127.0.0.1:{self.port}/")

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        key = {"pk": {"S": f"curl#{lock}"}}
        take = self.call("PutItem", {"TableName": TABLE, "Item": key,
                                     "ConditionExpression": "attribute_not_exists(pk)"})
        release = self.call("DeleteItem", {"TableName": TABLE, "Key": key})
        return benchlib.polled_shell_lock(take=take, taken="200", release=release,
                                          command=command, wait=wait)


# ------------------------------------------------------------------------------------------------
# e. Requests.
# ------------------------------------------------------------------------------------------------


def count_uncontended(lockrun: Lockrun, proxy: CountingProxy) -> Counter:
    """Requests per run of `lockrun ... -- true` on a free name, by operation (totals over
    COUNTED_RUNS runs)."""
    proxy.take()
    for _ in range(COUNTED_RUNS):
        benchlib.run_ok(lockrun.wrap("counted", ["true"]))
    return proxy.take()


def count_waiting(lockrun: Lockrun, proxy: CountingProxy, tmp: Path) -> tuple[Counter, Counter]:
    """Requests per second while one holder holds for WAIT_SECONDS: with one waiter (the head of
    the line), then with WAITERS waiters."""
    rates = []
    for waiters in (1, WAITERS):
        ready = tmp / f"held-{waiters}"
        holder = benchlib.spawn(lockrun.wrap(
            f"wait{waiters}", ["sh", "-c", f': > "{ready}"; sleep {WAIT_SECONDS + 1}']))
        while not ready.exists():
            time.sleep(0.005)
        pids = [benchlib.spawn(lockrun.wrap(f"wait{waiters}", ["true"])) for _ in range(waiters)]
        time.sleep(1)  # the joins are not steady state
        proxy.take()
        time.sleep(WAIT_SECONDS - 1)
        counts = proxy.take()
        benchlib.wait_ok(holder, "the holder")
        for pid in pids:
            benchlib.wait_ok(pid, "a waiter")
        rates.append(Counter({op: n / (WAIT_SECONDS - 1) for op, n in counts.items()}))
    return rates[0], rates[1]


def show(counts: Counter, per: float) -> str:
    return ", ".join(f"{op} {n / per:.2f}" for op, n in sorted(counts.items())) or "none"


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = benchlib.QUICK if args.quick else FULL
    benchlib.require(["node", "curl"])
    # Dummy credentials for the private server; none of the caller's AWS settings.
    local = benchlib.local_aws_env(benchlib.ENV)
    benchlib.ENV.clear()
    benchlib.ENV.update(local)
    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-dynamodb-") as tmp_name:
        tmp = Path(tmp_name)
        server = Server(tmp)
        try:
            lockrun = Lockrun(binary, server.url())
            print(f"lockrun: {binary}\ndynalite on 127.0.0.1:{server.port}", file=sys.stderr)
            # The table is created on first use; that one-off cost is not what is measured.
            benchlib.run_ok(lockrun.wrap("setup", ["true"]))
            res = benchlib.measure(lockrun, Curl(server.port), tmp, n)
            print("[e] requests: counted through a proxy ...", file=sys.stderr)
            proxy = CountingProxy(server.port)
            counted = Lockrun(binary, server.url(proxy.port))
            per_run = count_uncontended(counted, proxy)
            head, line = count_waiting(counted, proxy, tmp)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    requests = sum(per_run.values()) / COUNTED_RUNS
    writes = per_run["UpdateItem"] / COUNTED_RUNS
    rows = benchlib.server_rows(res, "curl", uncontended_target=("-", None),
                                handoff_target_ms=TARGET_HANDOFF_MS,
                                rss_target_mib=TARGET_RSS_MIB)
    rows.append(("requests per uncontended run", requests, 2.0,
                 f"lockrun == {TARGET_REQUESTS} (both writes)",
                 requests == TARGET_REQUESTS and writes == TARGET_REQUESTS))
    benchlib.print_heading(
        "lockrun (dynamodb backend, against dynalite) vs a hand-written curl PutItem / "
        "DeleteItem pair", args.quick,
        "(there is no standard CLI lock for DynamoDB: the curl pair is a cost floor for scale, "
        "without expiry, renewal, fencing or fairness)")
    benchlib.print_table(rows, "curl pair")
    print()
    print(f"requests per uncontended run, by operation: {show(per_run, COUNTED_RUNS)}")
    print(f"requests per second, 1 holder + 1 waiter (the head of the line): {show(head, 1)}")
    print(f"requests per second, 1 holder + {WAITERS} waiters: {show(line, 1)}")
    lost = benchlib.report_counters(res.finals)
    return 1 if lost else 0


if __name__ == "__main__":
    benchlib.run_script(main)
