#!/usr/bin/env python3
"""Benchmark: lockrun's mysql:// backend on MariaDB, with a hand-written mysql-client lock beside it.

There is no standard command-line lock tool for MySQL, so the baseline is what people write by
hand with the standard client:

    mariadb -e "INSERT INTO bench_lock VALUES ('k')"  ;  COMMAND  ;  mariadb -e "DELETE FROM ..."

(the INSERT retried every 10 ms while the name is taken). It has no expiry, no renewal, no fencing
token, no owner check and no fairness; it is the cost floor of "two statements around a command"
done with the standard client, and is shown for scale only: no target is a ratio to it.

What it measures, both tools in ONE run against ONE private MariaDB server, runs interleaved:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms); target: the
                         lockrun median <= 10 ms on loopback
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), and a check that the
                         counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: lockrun median
                         <= 10 ms (the waiter is woken by the release, not by a timer)
  d. peak RSS            max resident set of lockrun running `true` (MiB); target <= 8 MiB

The server is made by this script with mariadb-install-db in a temporary directory, started on a
free loopback port, and killed at the end. Both tools reach it over TCP: lockrun with a mysql://
URL, the client with -h 127.0.0.1. Commits are flushed once a second
(innodb_flush_log_at_trx_commit=2), so that the figures are lockrun's and not the disk's: each
tool commits twice per run, and an fsync costs ~10 ms on a small VM. `--durable` flushes every
commit, as the token guarantee wants (both tools pay for it the same).

Run (Python 3.11 standard library only, Linux only; needs `apt-get install mariadb-server`):

    python3 bench/mysql.py            # builds lockrun with `cargo build --release`
    python3 bench/mysql.py --quick    # fewer iterations, a smoke run
    python3 bench/mysql.py --bin target/release/lockrun   # skip the build
    python3 bench/mysql.py --durable  # innodb_flush_log_at_trx_commit=1

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a tool
failing, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (the shared harness, next to this script)
from benchlib import Broken, Iterations, Lockrun, Tool, median  # noqa: E402
from mariadb_server import DATABASE, MariaDB  # noqa: E402

TARGET_UNCONTENDED_MS = 10.0
TARGET_HANDOFF_MS = 10.0
TARGET_RSS_MIB = 8.0

# Full runs (`--quick` uses benchlib.QUICK).
FULL = Iterations(warmup=20, iters=200, contention_reps=4, handoff_reps=20, rss_reps=10)


class Client(Tool):
    """The hand-written lock: `mariadb -e "INSERT INTO bench_lock ..."` (retried every 10 ms to
    wait, while the name is taken), the command, `mariadb -e "DELETE FROM bench_lock ..."`."""

    label = "client"

    def __init__(self, server: MariaDB):
        client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
        self.base = (f"{client} --no-defaults -h 127.0.0.1 -P {server.port} -uroot "
                     f"--batch --skip-column-names {DATABASE}")

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        return benchlib.polled_shell_lock(
            take=(f"{self.base} -e \"INSERT IGNORE INTO bench_lock VALUES ('{lock}'); "
                  f"SELECT ROW_COUNT()\""), taken="1",
            release=f"{self.base} -e \"DELETE FROM bench_lock WHERE name = '{lock}'\"",
            command=command, wait=wait)


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary to use (skips the build)")
    ap.add_argument("--durable", action="store_true",
                    help="flush every commit (innodb_flush_log_at_trx_commit=1)")
    args = ap.parse_args()
    n = benchlib.QUICK if args.quick else FULL
    # MYSQL_* variables (MYSQL_HOST, MYSQL_PWD, ...) would redirect the client: keep them out.
    benchlib.scrub_env("MYSQL")

    binary = benchlib.lockrun_binary(args.bin)

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-mysql-") as tmp_name:
        tmp = Path(tmp_name)
        server = MariaDB(tmp, durable=args.durable)  # Broken if it cannot be made
        try:
            server.start()
            server.sql(f"CREATE TABLE {DATABASE}.bench_lock (name VARCHAR(200) PRIMARY KEY) "
                       "ENGINE=InnoDB")
            lockrun = Lockrun(binary, server.url)
            version = server.sql("SELECT VERSION()")
            print(f"lockrun: {binary}\nMariaDB {version} on 127.0.0.1:{server.port} "
                  f"(innodb_flush_log_at_trx_commit={server.flush})", file=sys.stderr)
            # The tables are created on first use; that one-off cost is not what is measured.
            benchlib.run_ok(lockrun.wrap("setup", ["true"]))
            res = benchlib.measure(lockrun, Client(server), tmp, n)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            server.stop()

    unc_ms = median(res.uncontended["lockrun"])
    rows = benchlib.server_rows(
        res, "client",
        uncontended_target=(f"lockrun <= {TARGET_UNCONTENDED_MS:g} ms",
                            unc_ms <= TARGET_UNCONTENDED_MS),
        handoff_target_ms=TARGET_HANDOFF_MS, rss_target_mib=TARGET_RSS_MIB)
    benchlib.print_heading(
        "lockrun (mysql backend, MariaDB) vs a hand-written mariadb-client INSERT / DELETE pair",
        args.quick,
        "(there is no standard CLI lock for MySQL: the client pair is a cost floor for scale, "
        "without expiry, renewal, fencing or fairness)")
    benchlib.print_table(rows, "client pair")
    print()
    return 1 if benchlib.report_counters(res.finals) else 0


if __name__ == "__main__":
    benchlib.run_script(main)
