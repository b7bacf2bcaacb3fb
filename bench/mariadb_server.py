"""A private MariaDB server for the benchmark and the soak (Debian's `mariadb-server`, never the
system service): `mariadb-install-db` into a temporary directory, `mariadbd` on a free loopback
port with its socket beside it (with `--user=root` when run as root), ready when it sends its
greeting, a database `lockrun` created, killed with SIGKILL on stop.

Python 3.11 standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import benchlib
from benchlib import Broken

DATABASE = "lockrun"
# Small InnoDB files: the data directory is about 20 MB and made in a few seconds.
SMALL = ["--innodb-log-file-size=4M", "--innodb-data-file-path=ibdata1:4M:autoextend",
         "--innodb-autoextend-increment=1", "--innodb-undo-tablespaces=0",
         "--innodb-buffer-pool-size=64M", "--skip-name-resolve"]


def mariadbd() -> str:
    for path in ("/usr/sbin/mariadbd", "/usr/bin/mariadbd"):
        if Path(path).exists():
            return path
    raise Broken("no mariadbd (apt-get install mariadb-server)")


class MariaDB:
    """One server in `tmp`. `durable`: commits flushed at once (innodb_flush_log_at_trx_commit=1,
    the setting the token guarantee wants); otherwise flushed once a second, for speed."""

    def __init__(self, tmp: Path, durable: bool = True):
        benchlib.require(["mariadb-install-db", "mariadb"], "apt-get install mariadb-server")
        self.tmp = tmp
        self.dir = tmp / "mariadb"
        self.dir.mkdir()
        self.port = benchlib.free_port()
        self.proc: subprocess.Popen | None = None
        self.flush = "1" if durable else "2"
        root = ["--user=root"] if os.geteuid() == 0 else []
        # A tmpdir of its own: a starting server deletes every `#sql*` file in its tmpdir, which
        # in a shared /tmp would be another running server's temporary tables.
        (self.dir / "tmp").mkdir(exist_ok=True)
        init = subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.dir / 'data'}",
             f"--tmpdir={self.dir / 'tmp'}",
             "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-log-bin",
             *SMALL, *root],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if init.returncode != 0:
            raise Broken(f"mariadb-install-db failed: {init.stderr.strip()[-500:]}")

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def greets(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.settimeout(1)
                greeting = s.recv(5)
                return len(greeting) == 5 and greeting[4] == 10
        except OSError:
            return False

    def start(self) -> None:
        root = ["--user=root"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(
            [mariadbd(), "--no-defaults", f"--datadir={self.dir / 'data'}",
             f"--tmpdir={self.dir / 'tmp'}", f"--socket={self.dir / 'mysqld.sock'}", f"--pid-file={self.dir / 'mysqld.pid'}",
             f"--log-error={self.dir / 'mysqld.log'}", f"--port={self.port}",
             "--bind-address=127.0.0.1", "--skip-log-bin", *SMALL,
             f"--innodb-flush-log-at-trx-commit={self.flush}",
             "--innodb-temp-data-file-path=ibtmp1:1M:autoextend", "--innodb-use-native-aio=0",
             "--performance-schema=0", "--max-connections=500", *root],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while not self.greets():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "mysqld.log").read_text(errors="replace")[-1000:]
                self.stop()
                raise Broken(f"mariadbd did not start on port {self.port}: {log}")
            time.sleep(0.02)
        self.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")

    def client_argv(self, sql: str) -> list[str]:
        """The `mariadb` client running `sql` as root over the socket (`mysql`, if that is the
        only client name installed)."""
        client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
        return [client, "--no-defaults", f"--socket={self.dir / 'mysqld.sock'}", "-uroot",
                "--batch", "--skip-column-names", "-e", sql]

    def sql(self, sql: str) -> str:
        out = subprocess.run(self.client_argv(sql), capture_output=True, text=True)
        if out.returncode != 0:
            raise Broken(f"mariadb failed on {sql!r}: {out.stderr.strip()}")
        return out.stdout.strip()

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
