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

import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken, Iterations, Lockrun, Tool, median  # noqa: E402

TARGET_UNCONTENDED_MS = 10.0
TARGET_HANDOFF_MS = 5.0
TARGET_RSS_MIB = 8.0

# Full runs (`--quick` uses benchlib.QUICK).
FULL = Iterations(warmup=20, iters=200, contention_reps=4, handoff_reps=20, rss_reps=10)


# ------------------------------------------------------------------------------------------------
# The server.
# ------------------------------------------------------------------------------------------------


def bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if not found:
        raise Broken("no PostgreSQL server under /usr/lib/postgresql/*/bin "
                     "(apt-get install postgresql)")
    return Path(found[-1]).parent


class Server:
    """A private cluster, ready when pg_isready says so; `settings` are more `-c NAME=VALUE`."""

    def __init__(self, tmp: Path, settings: tuple[str, ...] = ()):
        self.bin = bin_dir()
        self.port = benchlib.free_port()
        self.user = benchlib.postgres_user(tmp)
        data = self.data = tmp / "data"
        init = subprocess.run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-sync"],
            user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if init.returncode != 0:
            raise Broken(f"initdb failed: {init.stderr.strip()}")
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={tmp}",
             "-c", "fsync=off", "-c", "dynamic_shared_memory_type=mmap",
             *(arg for setting in settings for arg in ("-c", setting))],
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
        benchlib.remove_postgres_shm(self.data)


# ------------------------------------------------------------------------------------------------
# The anchor: INSERT / DELETE with psql.
# ------------------------------------------------------------------------------------------------


class Psql(Tool):
    """The hand-written lock: `psql -c "INSERT INTO bench_lock ..."` (retried every 10 ms to
    wait, while the name is taken), the command, `psql -c "DELETE FROM bench_lock ..."`."""

    label = "psql"

    def __init__(self, server: Server):
        self.server = server

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        psql = " ".join(self.server.psql_base())
        return benchlib.polled_shell_lock(
            take=(f"{psql} -c \"INSERT INTO bench_lock VALUES ('{lock}') "
                  f"ON CONFLICT DO NOTHING RETURNING 1\""), taken="1",
            release=f"{psql} -c \"DELETE FROM bench_lock WHERE name = '{lock}'\"",
            command=command, wait=wait)


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = benchlib.QUICK if args.quick else FULL
    # PG* variables (PGHOST, PGUSER, ...) would redirect psql: keep them from the tools.
    benchlib.scrub_env("PG")

    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-pg-") as tmp_name:
        tmp = Path(tmp_name)
        server = Server(tmp)  # Broken if it does not start
        try:
            lockrun = Lockrun(binary, server.url)
            print(f"lockrun: {binary}\npostgres ({server.bin.parent.name}) on "
                  f"127.0.0.1:{server.port}", file=sys.stderr)
            # The schema is created on first use; that one-off cost is not what is measured.
            benchlib.run_ok(lockrun.wrap("setup", ["true"]))
            res = benchlib.measure(lockrun, Psql(server), tmp, n)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    unc_ms = median(res.uncontended["lockrun"])
    rows = benchlib.server_rows(
        res, "psql",
        uncontended_target=(f"lockrun <= {TARGET_UNCONTENDED_MS:g} ms",
                            unc_ms <= TARGET_UNCONTENDED_MS),
        handoff_target_ms=TARGET_HANDOFF_MS, rss_target_mib=TARGET_RSS_MIB)
    benchlib.print_heading(
        "lockrun (postgres backend) vs a hand-written psql INSERT / DELETE pair", args.quick,
        "(there is no standard CLI lock for PostgreSQL: the psql pair is a cost floor for "
        "scale, without expiry, renewal, fencing or fairness)")
    benchlib.print_table(rows, "psql pair")
    print()
    return 1 if benchlib.report_counters(res.finals) else 0


if __name__ == "__main__":
    benchlib.run_script(main)
