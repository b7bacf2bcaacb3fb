#!/usr/bin/env python3
"""Benchmark: the postgres:// backend's cost per handoff as the line grows, directly, behind
PgBouncer (transaction pooling), and behind PgBouncer with `listen=` naming the server itself
(the waiters near their turn listen there: path "listen").

For each path to the server and each line length N in 10, 100 and 1,000: one lockrun holds a
name, N lockruns queue for it (`--wait`, running `true`), and once `status` shows all N in line
the holder lets go; the time until the last waiter has run and exited, divided by N, is the cost
of one handoff (release, wake-up, try, spawn, exit), timed from the first waiter's exit to the
last one's (the line moving, not the first wake-up after the long hold). The anchor is the 10-waiter figure: the
growth ratio at 100 and 1,000 waiters must stay <= 1.2 (no herd: a release wakes one waiter, and
every count the server makes is bounded). Also printed, per handoff, from pg_stat_statements:
the statements the server ran (tries, releases, looks at the line behind PgBouncer, heartbeats
of the waiters further back, which are per second, not per handoff), and how many rows they read.
Last, the handoff after a long hold (1.5-1.7 s, one waiter): from the holder's command ending to
the waiter's command starting, which behind PgBouncer, where a release wakes nobody, is bounded
by how often the next waiter looks; target <= 50 ms on every path. And the handoff after that,
two waiters each running only `date`: from the first one's command starting to the second's.

It starts what it needs: a private PostgreSQL cluster (initdb in a temporary directory, as the
`postgres` user when run as root; fsync=off, max_connections=1200, pg_stat_statements) and a
PgBouncer in front of it (pool_mode = transaction, 20 server connections, max_client_conn =
1500), on free loopback ports, both stopped at the end. Every size is run three times, the
sizes and paths interleaved, and the medians are reported, with the servers' CPU time per
handoff (PostgreSQL's processes and PgBouncer's, from /proc), which the machine's other load
disturbs less than wall time; and that CPU net of the line's own heartbeats (every waiter
tries again once a second: a load per second, measured while the line stands still, not per
handoff).

Run (Python 3.11 standard library only, Linux only; needs `apt-get install postgresql pgbouncer`
and room for ~1,000 lockrun processes):

    python3 bench/pg_scale.py            # builds lockrun with `cargo build --release`
    python3 bench/pg_scale.py --quick    # 10 and 100 waiters only
    python3 bench/pg_scale.py --bin target/release/lockrun

Exit status: 0 (a report, misses included); 1 if something is broken (a lockrun failing, a
server not starting). This is not a test.
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken  # noqa: E402
import postgres as pg  # noqa: E402  (its private PostgreSQL server)

SIZES = [10, 100, 1000]
QUICK_SIZES = [10, 100]
TARGET_GROWTH = 1.2
POOL_SIZE = 20
BATCH = 50
ROUNDS = 3
IDLE_S = 2.0
# The handoff after a long hold: the holder holds this long (plus up to LONG_HOLD_JITTER_S, so
# that the release falls anywhere between two of the waiter's looks), one waiter in line; the
# time from the holder's command ending to the waiter's command starting must stay within
# LONG_HOLD_TARGET_MS on every path (behind PgBouncer, where no release can wake anyone, it is
# bounded by how often the next waiter looks).
LONG_HOLD_S = 1.5
LONG_HOLD_JITTER_S = 0.2
LONG_HOLD_REPS = 10
LONG_HOLD_TARGET_MS = 50.0


class Servers:
    """A private PostgreSQL cluster and a PgBouncer in front of it."""

    def __init__(self, tmp: Path):
        # Room for a thousand direct lockruns, and statement statistics per kind.
        self.postgres = pg.Server(tmp, (
            "max_connections=1200", "shared_buffers=128MB",
            "shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"))
        self.bin, self.user, self.port = self.postgres.bin, self.postgres.user, self.postgres.port
        self.pg = self.postgres.proc
        self.bouncer: subprocess.Popen | None = None
        self.psql("CREATE EXTENSION pg_stat_statements")
        self.bouncer, self.bouncer_port = benchlib.start_pgbouncer(
            tmp, self.port, self.user, pool_size=POOL_SIZE)

    def url(self, path: str) -> str:
        """The URL for `path`: "direct", "pgbouncer", or "listen" (through PgBouncer, with
        `listen=` naming the server itself)."""
        port = self.port if path == "direct" else self.bouncer_port
        url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        return f"{url}?listen=127.0.0.1:{self.port}" if path == "listen" else url

    def psql_base(self, port: int) -> list[str]:
        return [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-F", "|", "-h", "127.0.0.1",
                "-p", str(port), "-U", "postgres", "-d", "postgres"]

    def psql(self, sql: str) -> str:
        out = subprocess.run([*self.psql_base(self.port), "-c", sql], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise Broken(f"psql failed on {sql!r}: {out.stderr.strip()}")
        return out.stdout.strip()

    def statements(self) -> dict[str, tuple[int, int]]:
        """Calls and buffer pages touched of lockrun's statements so far, by kind."""
        rows = self.psql(
            "SELECT CASE WHEN query LIKE '%acquire_v2%' THEN 'try' "
            "WHEN query LIKE '%release_v2%' THEN 'release' "
            "WHEN query LIKE '%force_release_v2%' THEN 'force' "
            "WHEN query LIKE '%peek_v2%' THEN 'look' "
            "WHEN query LIKE '%leave_v2%' THEN 'leave' "
            "WHEN query LIKE '%subscribe_v2%' THEN 'subscribe' "
            "WHEN query LIKE 'UPDATE%waiters%channel%' THEN 'listen' "
            "WHEN query LIKE 'UPDATE%leases%' THEN 'renew' ELSE 'other' END AS kind, "
            "sum(calls), sum(shared_blks_hit + shared_blks_read) "
            "FROM pg_stat_statements WHERE query LIKE '%lockrun%' GROUP BY kind")
        totals: dict[str, tuple[int, int]] = {}
        for line in rows.splitlines():
            kind, calls, blocks = line.split("|")
            totals[kind] = (int(calls), int(blocks))
        return totals

    def cpu_ms(self) -> float:
        """CPU time used so far by the servers: PostgreSQL's processes (with its exited
        backends, reaped by the postmaster) and PgBouncer."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        roots = {self.pg.pid} | ({self.bouncer.pid} if self.bouncer else set())
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid, ppid = int(entry), int(fields[1])
            if pid in roots or ppid == self.pg.pid:
                total += int(fields[11]) + int(fields[12])  # utime, stime
                if pid == self.pg.pid:
                    total += int(fields[13]) + int(fields[14])  # cutime, cstime
        return total * 1000 / ticks

    def stop(self) -> None:
        for proc in (self.bouncer, self.pg):
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait()


def wait_in_line(lockrun: list[str], name: str, n: int, held: bool = False) -> None:
    """Waits until `status` shows n waiters in line (and, with `held`, a holder)."""
    deadline = time.monotonic() + 180
    while True:
        out = subprocess.run([*lockrun, "status", name, "--json"], capture_output=True,
                             text=True, env=benchlib.ENV)
        shown = out.stdout.replace(" ", "")
        if (out.returncode == 0 and f'"waiters":{n},' in shown
                and (not held or '"held":true' in shown)):
            return
        if time.monotonic() > deadline:
            raise Broken(f"{n} waiters never all stood in line: {out.stdout[:200]}")
        time.sleep(0.1)


def hold_until_closed(binary: str, lockrun: list[str], name: str) -> tuple[int, int]:
    """Starts a lockrun that holds `name` until the returned pipe end is closed (its command
    reads its stdin); returns its pid and that end once `status` shows it holding."""
    r, w = os.pipe()
    holder = os.posix_spawn(binary, [*lockrun, "--name", name, "--", "sh", "-c",
                                     "read x || true"],
                            benchlib.ENV, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0)])
    os.close(r)
    try:
        wait_in_line(lockrun, name, 0, held=True)
    except BaseException:
        os.close(w)
        benchlib.kill_and_reap([holder])
        raise
    return holder, w


# (ms per handoff, server CPU ms per handoff, statements by kind, server CPU ms per handoff net
# of the line's heartbeats, server CPU ms per second the standing line costs)
Round = tuple[float, float, dict[str, tuple[int, int]], float, float]


def queue_and_hand_off(binary: str, url: str, name: str, n: int, servers: Servers) -> Round:
    """One round (see Round). The time
    runs from the first waiter's exit to the last one's, over n - 1 handoffs: the line moving,
    not the first wake-up after the long hold while the line formed."""
    lockrun = [binary, "--backend", url]
    holder, w = hold_until_closed(binary, lockrun, name)
    waiters: set[int] = set()
    try:
        # The line forms in batches, each in line before the next starts: a thousand
        # connections opened at once on a small machine is a different benchmark.
        for first in range(0, n, BATCH):
            for _ in range(first, min(n, first + BATCH)):
                waiters.add(benchlib.spawn(
                    [*lockrun, "--name", name, "--wait", "600s", "--progress", "0", "--",
                     "true"]))
            wait_in_line(lockrun, name, min(n, first + BATCH))
        time.sleep(1.0)  # every waiter has settled into its heartbeat; not measured
        # The line standing still: its heartbeats' own load, per second.
        idle_start, idle_cpu = time.perf_counter(), servers.cpu_ms()
        time.sleep(IDLE_S)
        idle_rate = (servers.cpu_ms() - idle_cpu) / (time.perf_counter() - idle_start)
        before = servers.statements()
        cpu_before = servers.cpu_ms()
        drain_start = time.perf_counter()
        os.close(w)
        w = -1
        exits: list[int] = []
        while waiters or holder:
            pid, status = os.wait()
            code = os.waitstatus_to_exitcode(status)
            if pid == holder:
                holder = 0
                if code != 0:
                    raise Broken(f"the holder exited {code}")
            elif pid in waiters:
                waiters.discard(pid)
                exits.append(time.perf_counter_ns())
                if code != 0:
                    raise Broken(f"a waiter exited {code}")
        cpu = servers.cpu_ms() - cpu_before
        drained_s = time.perf_counter() - drain_start
        after = servers.statements()
    finally:
        if w >= 0:
            os.close(w)
        benchlib.kill_and_reap([*waiters, holder])
    used = {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
            for k in after}
    # Net of the heartbeats: on average half the line still stands during the drain.
    net = max(0.0, cpu - idle_rate * drained_s / 2) / n
    return (exits[-1] - exits[0]) / 1e6 / (n - 1), cpu / n, used, net, idle_rate


def second_handoff_once(binary: str, url: str, name: str, tmp: Path, hold_s: float) -> float:
    """The handoff after the first one after a long hold: two waiters queue behind a holder
    that then holds `hold_s` more, each running only `date`; returns the ms from the first
    waiter's command starting to the second's (the first's release, the second learning of its
    turn, its try and its start)."""
    lockrun = [binary, "--backend", url]
    stamps = [benchlib.stamp_dir(tmp) / f"second.{i}" for i in (1, 2)]
    holder, w = hold_until_closed(binary, lockrun, name)
    waiters: list[int] = []
    try:
        for i, stamp in enumerate(stamps):
            waiters.append(benchlib.spawn(
                [*lockrun, "--name", name, "--wait", "60s", "--progress", "0", "--", "date",
                 "+%s%N"], stdout=str(stamp)))
            wait_in_line(lockrun, name, i + 1)
        time.sleep(hold_s)
        os.close(w)
        w = -1
        benchlib.wait_ok(holder, "the long holder")
        holder = 0
        for pid in waiters:
            benchlib.wait_ok(pid, "a waiter")
        waiters = []
    finally:
        if w >= 0:
            os.close(w)
        benchlib.kill_and_reap([*waiters, holder])
    first, second = (int(stamp.read_text()) for stamp in stamps)
    return (second - first) / 1e6


def main() -> int:
    args = benchlib.parse_args(__doc__)
    sizes = QUICK_SIZES if args.quick else SIZES
    rounds = 1 if args.quick else ROUNDS
    benchlib.scrub_env("PG")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    binary = benchlib.lockrun_binary(args.bin)
    paths = ["direct", "pgbouncer", "listen"]
    results: dict[tuple[str, int], list[Round]] = {(p, n): [] for p in paths for n in sizes}
    long_holds: dict[str, list[float]] = {p: [] for p in paths}
    seconds: dict[str, list[float]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="lockrun-bench-pgscale-") as tmp_name:
        servers = Servers(Path(tmp_name))
        try:
            print(f"lockrun: {binary}\npostgres ({servers.bin.parent.name}) on "
                  f"127.0.0.1:{servers.port}, pgbouncer on 127.0.0.1:{servers.bouncer_port}",
                  file=sys.stderr)
            benchlib.run_ok([binary, "--backend", servers.url("direct"), "--name", "setup", "--",
                             "true"])
            for r in range(rounds):
                # Interleaved, the order turning each round, so drift hits every size alike.
                order = [(p, n) for p in paths for n in sizes]
                for path, n in (order if r % 2 == 0 else order[::-1]):
                    print(f"[round {r + 1}/{rounds}, {path}] {n} queued waiters ...",
                          file=sys.stderr)
                    results[(path, n)].append(queue_and_hand_off(
                        binary, servers.url(path), f"scale/{path}/{n}/{r}", n,
                        servers))
            reps = max(3, LONG_HOLD_REPS // 3) if args.quick else LONG_HOLD_REPS
            for i in range(reps):
                for path in paths:
                    print(f"[long hold {i + 1}/{reps}, {path}] ...", file=sys.stderr)
                    tool = benchlib.Lockrun(binary, servers.url(path))
                    hold = LONG_HOLD_S + random.uniform(0, LONG_HOLD_JITTER_S)
                    long_holds[path].append(benchlib.handoff_once(tool, Path(tmp_name), hold))
                    print(f"[second handoff {i + 1}/{reps}, {path}] ...", file=sys.stderr)
                    seconds[path].append(second_handoff_once(
                        binary, servers.url(path), f"second/{path}/{i}",
                        Path(tmp_name), hold))
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            servers.stop()

    def med(path: str, n: int, i: int) -> float:
        return benchlib.median([round_[i] for round_ in results[(path, n)]])

    benchlib.print_heading(
        "lockrun (postgres backend): cost per handoff as the line grows", args.quick,
        f"(anchor: the same path with {sizes[0]} queued waiters; each waiter runs `true`; time "
        f"from the first waiter's exit to the last's, per handoff; median of {rounds} rounds)")
    rows: list[benchlib.Row] = []
    for path in paths:
        for i, what in ((0, "ms per handoff"), (1, "server CPU ms per handoff"),
                        (3, "  net of heartbeats")):
            base = med(path, sizes[0], i)
            for n in sizes:
                value = med(path, n, i)
                first = n == sizes[0]
                target = "-" if first else f"<= {TARGET_GROWTH:g}x"
                met = None if first or i != 0 else value <= base * TARGET_GROWTH
                rows.append((f"{path}: {what}, {n} waiting", value, base,
                             target if i == 0 else "-", met))
    benchlib.print_table(rows, f"{sizes[0]} waiting")
    print(f"\nserver statements per handoff (pg_stat_statements, median of {rounds} rounds; "
          "buffer pages touched per handoff in brackets):")
    kinds = ["try", "release", "look", "leave", "subscribe", "listen", "renew"]
    for path in paths:
        for n in sizes:
            parts = []
            for kind in kinds:
                calls = benchlib.median([r[2].get(kind, (0, 0))[0] for r in results[(path, n)]])
                pages = benchlib.median([r[2].get(kind, (0, 0))[1] for r in results[(path, n)]])
                if calls:
                    parts.append(f"{kind} {calls / n:.2f} [{pages / n:.0f}]")
            print(f"  {path:9} {n:5} waiting: " + ", ".join(parts))
    print("\n(tries include the heartbeats of the waiters further back, one per waiter per "
          "second, so\n they grow with the line times the time a handoff takes: load per "
          "second, not per handoff)")
    print("\nthe standing line's heartbeats, server CPU (median of rounds):")
    for path in paths:
        for n in sizes:
            rate = med(path, n, 4)
            print(f"  {path:9} {n:5} waiting: {rate:.0f} ms per second "
                  f"({rate / n:.2f} ms per waiter per second)")
    print(f"\nhandoff after a {LONG_HOLD_S:g}-{LONG_HOLD_S + LONG_HOLD_JITTER_S:g} s hold, one "
          f"waiter (holder's command ended -> waiter's command started; target <= "
          f"{LONG_HOLD_TARGET_MS:g} ms):")
    for path in paths:
        lat = long_holds[path]
        verdict = "PASS" if max(lat) <= LONG_HOLD_TARGET_MS else "MISS"
        print(f"  {path:9} median {benchlib.median(lat):.1f} ms, max {max(lat):.1f} ms over "
              f"{len(lat)} handoffs: {verdict}")
    print("\nthe handoff after that, when the first command after the long hold is very short "
          "(first waiter's\ncommand started -> second's; behind PgBouncer bounded by how often "
          "the waiter right behind\nthe next looked while the line stood still):")
    for path in paths:
        lat = seconds[path]
        verdict = "PASS" if max(lat) <= LONG_HOLD_TARGET_MS else "MISS"
        print(f"  {path:9} median {benchlib.median(lat):.1f} ms, max {max(lat):.1f} ms over "
              f"{len(lat)} handoffs: {verdict}")
    return 0


if __name__ == "__main__":
    benchlib.run_script(main)
