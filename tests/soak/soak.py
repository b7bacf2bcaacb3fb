#!/usr/bin/env python3
"""Chaos soak: W workers loop lockrun on ONE name while a chaos loop injects faults; a checker
(check.py, next to this script) then proves the invariants on the log.

Per backend (file, redis, redlock, etcd, postgres, pgbouncer — PostgreSQL behind PgBouncer with
waiters listening at the server itself —, mysql, zk, dynamodb; the servers are started by this
script on free loopback ports in a temporary directory, as the benchmarks in bench/ do):

  * W workers (default 6) each loop `lockrun --backend URL --name soak --ttl T -- SECTION`.
  * SECTION is a small bash script (one process, plus one `sleep`): it records its pid, process
    group and $FENCING_TOKEN, reads the counter through the fenced store, sleeps a little, and
    writes value+1 through the fenced store; every step is time-stamped ($EPOCHREALTIME, no fork)
    into the worker's section log.
  * The fenced store is a tiny TCP service in this process (like a database row): a read or a
    write carrying a token below the highest token it has accepted is rejected; otherwise it is
    accepted and the token becomes the highest. The read is fenced too, as a database would fence
    the whole read-modify-write: with only the write fenced, a paused holder that read before the
    takeover and wrote before the new holder's write would lose an update that no lock prevents.
    It journals every request in its own order.
  * The chaos loop, at random intervals: SIGKILLs a random running lockrun (kill-lockrun);
    SIGSTOPs one for longer than the granted TTL, then SIGCONTs it (stop-lockrun); pauses a
    holder like a VM pause, lockrun and its child's whole group, and resumes the child first
    (pause-holder: the stale holder races to write with its old token); on networked backends
    SIGKILLs and restarts the server (server-restart; Redis runs with an append-only file
    flushed on every write, as a Redis holding locks should) or SIGSTOPs it for a while
    (server-pause: every connection blackholed, open but silent; there is no separate TCP
    proxy). Redlock's three masters are never restarted all at once: a minority (one master) is
    SIGKILLed and restarted (minority-restart: the holders ride through), or a majority (two)
    is (majority-restart: holders stop if the outage outlasts their stop point, and nobody gets
    the lock meanwhile); server-pause freezes all three. Faults are logged by kind; a stopped lockrun's fault says whether it held the lease
    (the checker excuses only a paused holder, and only from the pause on). The loop starts with
    one fault of each kind (FAULTS), so that a short run injects every kind: the checker fails a
    soak in which a configured kind never fired.
  * After every lockrun exits, its worker checks /proc for processes of the child's group that are
    still alive (and not dying).
  * When the chaos stops (every pause undone, the server up), the workers go on until a section
    that started after that moment completes, for up to RECOVERY_TTLS leases (at least
    RECOVERY_MIN seconds): the lock must come back once the faults are over, whatever they left
    behind (a killed holder's session, a waiter SIGSTOPped in the line). meta.json then records
    the moment ("faults_ended"), and the checker fails a soak in which nothing ran after it.

Run (Python 3.11 standard library only, Linux only; bash, redis-server, etcd, PostgreSQL,
mariadb-server, Debian's zookeeper jar with a JRE, and dynalite as scripts/test.sh installs it):

    python3 tests/soak/soak.py                     # all backends, 60 s each, cargo build --release
    python3 tests/soak/soak.py --backend redis --seconds 30 --bin target/debug/lockrun
    python3 tests/soak/soak.py --ci --backend all --bin target/debug/lockrun   # 10 s each, TTL 2s
    python3 tests/soak/check.py LOGDIR             # re-check a kept log

The logs are kept (`--logdir DIR`, or a temporary directory that is removed only when the run is
clean). Exit status: 0 only if the checker found no violation on any backend; 1 otherwise or if
something broke.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The benchmarks' harness (free ports, the scrubbed environment, finding or building lockrun) is
# shared, not copied: it stays in bench/ with the benchmarks, and the soak imports it from there.
sys.path.append(str(HERE.parent.parent / "bench"))
import benchlib  # noqa: E402
import mariadb_server  # noqa: E402
import check as soak_check  # noqa: E402
from benchlib import Broken  # noqa: E402

BACKENDS = ["file", "redis", "redlock", "etcd", "postgres", "pgbouncer", "mysql", "zk",
            "dynamodb"]
NAME = "soak"
TTL = "1s"  # requested lease (etcd raises it to its minimum, 2 s); --ttl
CI_TTL = "2s"  # --ci: more slack for a loaded CI machine (a lockrun starved past its lease
               # while its child runs would be a real overlap, but not what CI should test)
BASH = shutil.which("bash") or "/bin/bash"
MAX_PAUSED = 2  # stop-lockrun / pause-holder faults in progress at once
# The chaos loop's faults and their weights in its random mix. The checker fails a backend's soak
# unless every kind configured for it was injected, so the loop begins with each kind once, in
# this order (the one that needs a holder first, the longest, a server pause, last), at a quicker
# pace: a 10 s CI run gets all of them. Then it draws from the weighted mix for the rest of the run.
FAULTS = [("pause-holder", 3), ("stop-lockrun", 3), ("kill-lockrun", 4), ("server-restart", 1),
          ("minority-restart", 1), ("majority-restart", 1), ("server-pause", 2)]
SERVER_FAULTS = {"server-restart", "minority-restart", "majority-restart", "server-pause"}
# Backends of several independent servers (redlock) restart some of them, never all at once.
QUORUM_FAULTS = {"minority-restart", "majority-restart"}
FIRST_ROUND_GAP = (0.1, 0.4)  # seconds between faults while some kind has not fired yet
GAP = (0.2, 1.0)  # seconds between faults afterwards


def fault_mix(networked: bool, quorum: bool = False) -> list[tuple[str, int]]:
    """The fault kinds (with weights) for a backend: no server faults without a server; on a
    backend of several servers where a quorum decides, restarts of a minority and of a majority
    instead of restarting the one server."""
    def applies(kind: str) -> bool:
        if kind in SERVER_FAULTS and not networked:
            return False
        if kind == "server-restart":
            return not quorum
        return quorum or kind not in QUORUM_FAULTS
    return [(kind, weight) for kind, weight in FAULTS if applies(kind)]
# After the chaos: how long the workers may take to complete a section (the lock must come back).
# A killed holder's lease lasts up to a TTL, and a server restarted just before the end may give
# every session it restores a whole TTL again (ZooKeeper does).
RECOVERY_TTLS = 5
RECOVERY_MIN = 10.0
CI_SECONDS = 10  # per backend with --ci (9 backends: 90 s of soak, plus start-up and drain)

SECTION = r"""# lockrun soak critical section (bash). Args: RUN LOG STORE_PORT WORK_SECONDS
run=$1 log=$2 tok=$FENCING_TOKEN
# Stopped by lockrun (TERM to the group, on a lost lease): record when, as the last action.
trap 'echo "K $run $tok $EPOCHREALTIME" >> "$log"; exit 143' TERM
read -r _ _ _ _ pg _ < /proc/$$/stat
t0=$EPOCHREALTIME
echo "S $run $$ $pg $tok $t0" >> "$log"
exec 3<>"/dev/tcp/127.0.0.1/$3" || exit 90
echo "R $run $tok" >&3
read -r st v <&3
echo "R $run $tok $EPOCHREALTIME $st $v" >> "$log"
if [ "$st" != OK ]; then
  echo "E $run $tok $t0 $EPOCHREALTIME - - NOREAD" >> "$log"
  exit 0
fi
sleep "$4"
w=$((v + 1))
echo "W $run $tok $w" >&3
read -r ws _ <&3
echo "E $run $tok $t0 $EPOCHREALTIME $v $w $ws" >> "$log"
"""


def now_us() -> int:
    return time.time_ns() // 1000


# ------------------------------------------------------------------------------------------------
# The fenced store.
# ------------------------------------------------------------------------------------------------


class FencedStore:
    """A counter that accepts a read or write only with a token >= the highest it accepted.
    Protocol, one line each way: `R RUN TOKEN` -> `OK VALUE` | `REJ MAX`;
    `W RUN TOKEN VALUE` -> `OK VALUE` | `REJ MAX`."""

    def __init__(self, logdir: Path):
        self.lock = threading.Lock()
        self.value = 0
        self.max: int | None = None
        self.seq = 0
        self.journal = open(logdir / "store.jsonl", "w")
        self.logdir = logdir
        store = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    for raw in self.rfile:
                        if not raw.endswith(b"\n"):
                            return  # a request torn by the client's death: never applied
                        reply = store.request(raw.decode(errors="replace").split())
                        self.wfile.write(reply.encode() + b"\n")
                        self.wfile.flush()
                except OSError:
                    return  # the section was killed (connection reset)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def request(self, f: list[str]) -> str:
        if len(f) < 3 or f[0] not in ("R", "W") or (f[0] == "W" and len(f) < 4):
            return "ERR"
        try:
            token = int(f[2])
            new = int(f[3]) if f[0] == "W" else None
        except ValueError:
            return "ERR"
        with self.lock:
            self.seq += 1
            entry = {"seq": self.seq, "t": now_us(), "op": f[0], "run": f[1], "token": token,
                     "max": self.max}
            ok = self.max is None or token >= self.max
            entry["ok"] = ok
            if ok:
                self.max = token
                if f[0] == "W":
                    entry["old"], entry["new"] = self.value, new
                    self.value = new
                reply = f"OK {self.value}"
            else:
                reply = f"REJ {self.max}"
            self.journal.write(json.dumps(entry) + "\n")
            return reply

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            self.journal.close()
            (self.logdir / "store.final.json").write_text(
                json.dumps({"value": self.value, "max": self.max}) + "\n")


# ------------------------------------------------------------------------------------------------
# The servers (each in its own session, so that pause and kill reach every process of it).
# ------------------------------------------------------------------------------------------------


def answer(port: int, request: bytes) -> bytes:
    """What a server on loopback `port` first answers to `request`: empty if nothing accepts the
    connection or answers within a second."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(request)
            return s.recv(4096)
    except OSError:
        return b""


class Backend:
    kind = "?"
    networked = True
    quorum = False  # several servers, a majority decides (see QUORUM_FAULTS)

    def url(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """The environment lockrun runs with against this backend."""
        return base

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc is not None:
            proc.wait()

    def close(self) -> None:
        """Stops everything this backend started, for good (after the soak)."""
        self.stop()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def launch(self, argv: list[str], ready, what: str, **popen) -> None:
        """Starts the server in a session of its own (so that pause and kill reach every process
        of it) and waits until `ready()`."""
        self.proc = subprocess.Popen(argv, start_new_session=True, **popen)
        self.wait_ready(ready, what)

    def wait_ready(self, ready, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Broken(f"{what} did not start")
            time.sleep(0.02)


class FileBackend(Backend):
    kind = "file"
    networked = False

    def __init__(self, tmp: Path):
        self.dir = tmp / "state"
        self.proc = None

    def url(self) -> str:
        return f"file://{self.dir}"

    def start(self) -> None:
        pass


class RedisBackend(Backend):
    kind = "redis"

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = benchlib.free_port()
        self.proc = None

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def ping(self) -> bool:
        return answer(self.port, b"*1\r\n$4\r\nPING\r\n").startswith(b"+PONG")

    def start(self) -> None:
        self.launch(
            # Persistent, as a Redis that holds locks should be: an empty restart drops every
            # lease, and another run may then start before the old holder's next renewal notices
            # (fencing still rejects its writes, but the soak checks exclusion too). Empty
            # restarts are drilled by tests/redis.rs.
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.tmp)],
            self.ping, f"redis-server on port {self.port}",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class RedlockBackend(Backend):
    """Three independent redis-servers (each persistent, as RedisBackend), one redlock:// URL."""

    kind = "redlock"
    quorum = True
    MASTERS = 3

    def __init__(self, tmp: Path):
        self.masters = []
        for i in range(self.MASTERS):
            (tmp / f"m{i}").mkdir()
            self.masters.append(RedisBackend(tmp / f"m{i}"))

    def url(self) -> str:
        return "redlock://" + ",".join(f"127.0.0.1:{m.port}" for m in self.masters)

    def start(self) -> None:
        for master in self.masters:
            master.start()

    def stop(self) -> None:
        for master in self.masters:
            master.stop()

    def signal(self, sig: int) -> None:
        for master in self.masters:
            master.signal(sig)


class EtcdBackend(Backend):
    kind = "etcd"

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.client = benchlib.free_port()
        self.peer = benchlib.free_port()
        self.proc = None
        self.log = open(tmp / "etcd.log", "ab")

    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client}"

    def healthy(self) -> bool:
        return b'"health":"true"' in answer(self.client, b"GET /health HTTP/1.0\r\n\r\n")

    def start(self) -> None:
        client = f"http://127.0.0.1:{self.client}"
        peer = f"http://127.0.0.1:{self.peer}"
        self.launch(
            ["etcd", "--name", "soak", "--data-dir", str(self.tmp / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"soak={peer}"],
            self.healthy, f"etcd on port {self.client} (see {self.tmp}/etcd.log)",
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)


class PostgresBackend(Backend):
    kind = "postgres"

    def __init__(self, tmp: Path):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                       key=lambda p: int(Path(p).parent.parent.name))
        if not found:
            raise Broken("no PostgreSQL under /usr/lib/postgresql/*/bin (apt-get install "
                         "postgresql)")
        self.bin = Path(found[-1]).parent
        self.port = benchlib.free_port()
        self.proc = None
        self.dir = tmp / "pg"
        self.dir.mkdir()
        self.user = benchlib.postgres_user(self.dir)
        if self.user is not None:
            os.chmod(tmp, 0o711)  # so that the server's user reaches its directory
        init = subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres",
             "-A", "trust", "-E", "UTF8", "--no-sync"],
            user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if init.returncode != 0:
            raise Broken(f"initdb failed: {init.stderr.strip()}")

    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def ready(self) -> bool:
        return subprocess.run([str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p",
                               str(self.port)], env=benchlib.ENV).returncode == 0

    def start(self) -> None:
        # The killed server's System V segment goes (see benchlib.remove_postgres_shm) before
        # its postmaster.pid, which names it.
        benchlib.remove_postgres_shm(self.dir / "data")
        (self.dir / "data" / "postmaster.pid").unlink(missing_ok=True)
        self.launch(
            [str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
             "-c", "fsync=off", "-c", "max_connections=200",
             # Shared memory in the data directory: a restarted (SIGKILLed) server must not
             # leave segments in /dev/shm.
             "-c", "dynamic_shared_memory_type=mmap"],
            self.ready, f"postgres on port {self.port}",
            user=self.user, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        super().stop()
        benchlib.remove_postgres_shm(self.dir / "data")


class PgBouncerBackend(PostgresBackend):
    """PostgreSQL behind a PgBouncer in transaction pooling, with `listen=` naming the server
    itself, so waiters near their turn listen there. The faults hit the server; PgBouncer stays
    up through them, as it would in front of a restarting server (`server_login_retry = 1`, as
    README says)."""

    kind = "pgbouncer"

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.bouncer = None
        self.bouncer_port = 0

    def url(self) -> str:
        return (f"postgres://postgres@127.0.0.1:{self.bouncer_port}/postgres"
                f"?listen=127.0.0.1:{self.port}")

    def start(self) -> None:
        super().start()
        if self.bouncer is None:
            self.bouncer, self.bouncer_port = benchlib.start_pgbouncer(
                self.dir, self.port, self.user)

    def close(self) -> None:
        if self.bouncer is not None:
            self.bouncer.kill()  # a no-op once it exited
            self.bouncer.wait()
        super().close()


class MySqlBackend(Backend):
    """MariaDB with commits flushed at once, as a server holding locks should run."""

    kind = "mysql"

    def __init__(self, tmp: Path):
        self.server = mariadb_server.MariaDB(tmp, durable=True)

    @property
    def proc(self):
        return self.server.proc

    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.server.start()



class ZkBackend(Backend):
    """A standalone ZooKeeper from Debian's jar: tick 500 ms (sessions of 1 to 10 s), admin server
    off, every write synced (forceSync, as an ensemble that holds locks should), ready when `srvr`
    reports a mode."""
    kind = "zk"
    JAR = "/usr/share/java/zookeeper.jar"

    def __init__(self, tmp: Path):
        if not Path(self.JAR).exists() or shutil.which("java") is None:
            raise Broken(f"no {self.JAR} or no java (apt-get install zookeeper "
                         "default-jre-headless)")
        self.tmp = tmp
        self.port = benchlib.free_port()
        self.proc = None
        self.log = open(tmp / "zookeeper.log", "ab")
        (tmp / "zk").mkdir()
        (tmp / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={tmp / 'zk'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n"
            "4lw.commands.whitelist=srvr\n")

    def url(self) -> str:
        return f"zk://127.0.0.1:{self.port}"

    def serving(self) -> bool:
        return b"Mode: " in answer(self.port, b"srvr")

    def start(self) -> None:
        self.launch(
            ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.JAR,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.tmp / "zoo.cfg")],
            self.serving, f"zookeeper on port {self.port} (see {self.tmp}/zookeeper.log)",
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)


class DynamodbBackend(Backend):
    kind = "dynamodb"

    def __init__(self, tmp: Path):
        self.port = benchlib.free_port()
        self.data = tmp / "dynalite"
        self.log = open(tmp / "dynalite.log", "ab")
        self.proc = None

    def url(self) -> str:
        return f"dynamodb://locks?endpoint=http://127.0.0.1:{self.port}"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        return benchlib.local_aws_env(base)

    def start(self) -> None:
        # The LevelDB store survives a restart (a SIGKILL loses nothing written).
        self.proc = benchlib.start_dynalite(self.port, self.data, self.log)
        self.wait_ready(lambda: benchlib.accepts(self.port), f"dynalite on port {self.port}")


BACKEND_CLASSES = {"file": FileBackend, "redis": RedisBackend, "redlock": RedlockBackend,
                   "etcd": EtcdBackend, "postgres": PostgresBackend,
                   "pgbouncer": PgBouncerBackend, "mysql": MySqlBackend,
                   "zk": ZkBackend, "dynamodb": DynamodbBackend}


# ------------------------------------------------------------------------------------------------
# /proc helpers.
# ------------------------------------------------------------------------------------------------


def proc_stat(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat, with the comm as field 1 (spaces kept)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    left, right = text.find("("), text.rfind(")")
    return [text[:left].strip(), text[left + 1:right], *text[right + 2:].split()]


def dying(pid: str, stat: list[str]) -> bool:
    """Dead (zombie), exiting (PF_EXITING), or with SIGKILL pending (a fatal signal: the kernel
    queues SIGKILL for a process that a default-action signal is about to kill)."""
    if stat[2] in ("Z", "X", "x"):
        return True
    if int(stat[8]) & 0x4:  # PF_EXITING
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & 0x100:
                    return True
    except OSError:
        return True
    return False


# How long after a lockrun was killed its command's tree may live on: the watchdog's sweep.
WATCHDOG_GRACE = 2.0


def group_survivors(pgid: int | None, marker: list[str]) -> list[dict]:
    """Alive, not dying processes in group pgid (or, when the pgid is unknown, whose command line
    carries the arguments `marker` in a row: the run id and the log the section gets, which
    together no other run has, whatever soaks run beside this one)."""
    found = []
    needle = ("\0" + "\0".join(marker) + "\0").encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = proc_stat(pid)
        if stat is None:
            continue
        if pgid is not None:
            if int(stat[4]) != pgid:
                continue
        else:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle not in f.read():
                        continue
            except OSError:
                continue
        if not dying(pid, stat):
            found.append({"pid": int(pid), "comm": stat[1], "state": stat[2],
                          "child": pgid is not None and int(pid) == pgid})
    return found


def wait_stopped(pid: int, timeout: float = 1.0) -> None:
    """Until the kernel has stopped pid (SIGSTOP is delivered asynchronously), it is gone or
    exiting, or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = proc_stat(str(pid))
        if stat is None or stat[2] in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)


def children_of(pid: int) -> list[int]:
    """The command a lockrun started, if any: its children but its watchdog (`lockrun-watch`,
    which a waiter forks too, so a child alone does not make a holder)."""
    kids: list[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            kids += [int(x) for x in Path(path).read_text().split()]
        except OSError:
            pass
    return [kid for kid in kids if not is_watchdog(kid)]


def is_watchdog(pid: int) -> bool:
    stat = proc_stat(str(pid))
    return stat is not None and stat[1] == "lockrun-watch"


# ------------------------------------------------------------------------------------------------
# One backend's soak.
# ------------------------------------------------------------------------------------------------


class Soak:
    def __init__(self, binary: str, backend: Backend, logdir: Path, seconds: float,
                 workers: int, rng: random.Random, ttl: str):
        self.ttl = ttl
        self.binary = binary
        self.backend = backend
        self.logdir = logdir
        self.seconds = seconds
        self.workers = workers
        self.rng = rng
        self.lock = threading.Lock()
        self.running: dict[int, tuple[str, int]] = {}  # worker -> (run, lockrun pid)
        self.paused: set[int] = set()  # lockrun pids the chaos has stopped
        self.paused_groups: dict[int, list[int]] = {}  # lockrun pid -> its paused child groups
        self.stop = threading.Event()  # the workers stop (after the recovery)
        self.calm = threading.Event()  # the chaos loop stops
        self.faults_ended: int | None = None  # when it had, every fault undone (µs)
        self.recovered = threading.Event()  # a section started after that has completed
        self.faults = open(logdir / "faults.jsonl", "w")
        self.runs = open(logdir / "runs.jsonl", "w")
        self.fault_count: Counter = Counter()
        self.section = logdir / "section.sh"
        self.section.write_text(SECTION)
        self.env = backend.environment(dict(benchlib.ENV, LC_ALL="C"))
        self.ttl_ms = 0
        self.errors: list[str] = []
        self.resumers: list[threading.Thread] = []
        self.fault_mix = fault_mix(backend.networked, backend.quorum)

    # -- logging ---------------------------------------------------------------------------------

    def fault(self, kind: str, t: int | None = None, **info) -> None:
        with self.lock:
            self.fault_count[kind] += 1
            self.faults.write(json.dumps({"t": t or now_us(), "kind": kind, **info}) + "\n")
            self.faults.flush()

    # -- workers ---------------------------------------------------------------------------------

    def argv(self, run: str, log: Path) -> list[str]:
        # Mostly short sections; some span several renewals, so that server faults and pauses
        # land while a command runs (and lease loss must stop it mid-section).
        work = (f"{self.rng.uniform(0.3, 1.2):.3f}" if self.rng.random() < 0.15
                else f"0.0{self.rng.randint(1, 5)}")
        return [self.binary, "--backend", self.backend.url(), "--name", NAME,
                "--ttl", self.ttl, "--", BASH, str(self.section), run, str(log),
                str(self.store.port), work]

    def worker(self, w: int) -> None:
        try:
            self.work(w)
        except Exception as e:  # a harness failure must not pass as a quiet, smaller soak
            self.errors.append(f"worker {w}: {e!r}")
            self.stop.set()
            self.calm.set()

    def work(self, w: int) -> None:
        log = self.logdir / f"sections.w{w}.log"
        log.touch()
        stderr = str(self.logdir / f"lockrun.w{w}.stderr")
        seq = 0
        offset = 0
        while not self.stop.is_set():
            seq += 1
            run = f"w{w}.{seq}"
            actions = [(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                       (os.POSIX_SPAWN_OPEN, 2, stderr,
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)]
            spawned = now_us()
            with self.lock:
                pid = os.posix_spawn(self.binary, self.argv(run, log), self.env,
                                     file_actions=actions)
                self.running[w] = (run, pid)
            # Wait without reaping, so the chaos loop never signals a reaped (reusable) pid.
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            with self.lock:
                del self.running[w]
                self.paused.discard(pid)
                _, status = os.waitpid(pid, 0)
            exited = now_us()
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            with open(log) as f:
                f.seek(offset)
                new = f.read()
                offset += len(new.encode())
            pgid = None
            for line in new.splitlines():
                parts = line.split()
                if len(parts) >= 4 and parts[0] == "S" and parts[1] == run:
                    pgid = int(parts[3]) if parts[3].isdigit() else None
                if len(parts) >= 8 and parts[0] == "E" and self.after_faults(parts[3]):
                    self.recovered.set()
            survivors = group_survivors(pgid, [run, str(log)])
            # A lockrun killed by a signal leaves its command's tree to the watchdog, which stops
            # it a moment later (invariant 8); and the watchdog itself (`lockrun-watch`, a fork
            # that carries lockrun's arguments, so it is found by the run's marker when no
            # command started) exits a moment after lockrun does: give either that moment.
            deadline = time.monotonic() + WATCHDOG_GRACE
            while survivors and time.monotonic() < deadline:
                time.sleep(0.01)
                survivors = group_survivors(pgid, [run, str(log)])
            with self.lock:
                self.runs.write(json.dumps({
                    "run": run, "worker": w, "pid": pid, "spawn": spawned, "exit": exited,
                    "status": code, "pgid": pgid, "leftover": survivors}) + "\n")
            if code == 69:  # the server is down (being restarted): do not spin
                time.sleep(0.1)

    def after_faults(self, stamp: str) -> bool:
        """Whether a section's start ($EPOCHREALTIME) came after the faults had ended."""
        with self.lock:
            ended = self.faults_ended
        try:
            return ended is not None and round(float(stamp) * 1e6) >= ended
        except ValueError:
            return False  # a torn line

    # -- chaos -----------------------------------------------------------------------------------

    def pick(self, holders_first: bool) -> tuple[str, int, list[int]] | None:
        """A running, not paused lockrun: (run, pid, its children); a holder (one with a child)
        when there is one and holders_first."""
        with self.lock:
            cands = [(r, p) for r, p in self.running.values() if p not in self.paused]
        if not cands:
            return None
        self.rng.shuffle(cands)
        if holders_first:
            for run, pid in cands:
                kids = children_of(pid)
                if kids:
                    return run, pid, kids
        run, pid = cands[0]
        return run, pid, children_of(pid)

    def holds(self, pid: int) -> bool | str:
        """Whether lockrun `pid` holds the lease, as `lockrun status` sees it ("unknown" when
        the backend cannot say)."""
        try:
            out = subprocess.run(
                [self.binary, "status", NAME, "--backend", self.backend.url(), "--json"],
                env=self.env, capture_output=True, text=True, timeout=2)
            holders = json.loads(out.stdout)["holders"] if out.returncode == 0 else None
            return any(h["pid"] == pid for h in holders) if holders is not None else "unknown"
        except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
            return "unknown"

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def resume(self, kind: str, pid: int, kids: list[int], pause: float,
               head_start: float) -> None:
        """Ends a stop-lockrun or pause-holder fault after `pause` seconds."""
        self.sleep(pause)
        if kind == "pause-holder":  # the stale child wakes first and races to write
            for kid in kids:
                try:
                    os.killpg(kid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.sleep(head_start)
        with self.lock:
            # Else abort() already let it go, or it died while stopped (a kill; or the SIGHUP the
            # kernel sends an orphaned process group with a stopped member, when the soak runs
            # detached from its shell) and its worker reaped it: never signal a reusable pid.
            if pid in self.paused:
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)
            self.paused_groups.pop(pid, None)

    def abort(self) -> None:
        """On an interrupt: wake and kill every lockrun (their children die with them), so
        nothing is left stopped or running."""
        self.stop.set()
        self.calm.set()
        with self.lock:
            for groups in self.paused_groups.values():
                for kid in groups:
                    try:
                        os.killpg(kid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            for run, pid in self.running.values():
                self.faults.write(json.dumps({"t": now_us(), "kind": "shutdown-kill",
                                              "run": run, "pid": pid}) + "\n")
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
            self.paused.clear()
            self.paused_groups.clear()

    def chaos(self) -> None:
        ttl = self.ttl_ms / 1000
        kinds = [kind for kind, _ in self.fault_mix]
        weights = [weight for _, weight in self.fault_mix]
        due = deque(kinds)  # the first round: each kind once (see FAULTS)
        while not self.calm.wait(self.rng.uniform(*(FIRST_ROUND_GAP if due else GAP))):
            first_round = bool(due)
            kind = due.popleft() if first_round else self.rng.choices(kinds, weights)[0]
            try:
                done = self.inject(kind, ttl, patient=first_round)
            except Exception as e:  # Broken (a server that did not come back), or a bug
                self.errors.append(f"chaos {kind}: {e}")
                self.stop.set()
                self.calm.set()
                break
            if done in due:
                due.remove(done)
            if first_round and done != kind:
                due.append(kind)  # it found nothing to hit: try it again after the others
        for t in self.resumers:  # every pause is undone before the chaos loop returns
            t.join()

    def inject(self, kind: str, ttl: float, patient: bool = False) -> str | None:
        """Injects a fault of `kind` and returns the kind injected (a pause-holder that finds no
        holder becomes a stop-lockrun), or None when there was nothing to hit. `patient`: wait
        up to a TTL, not half a second, for a holder to pause."""
        if kind == "kill-lockrun":
            with self.lock:  # under the lock: the pid cannot be reaped meanwhile
                cands = [(r, p) for r, p in self.running.values() if p not in self.paused]
                if not cands:
                    return None
                run, pid = self.rng.choice(cands)
                self.faults.write(json.dumps({"t": now_us(), "kind": kind, "run": run,
                                              "pid": pid}) + "\n")
                self.fault_count[kind] += 1
                os.kill(pid, signal.SIGKILL)
            return kind
        elif kind in ("stop-lockrun", "pause-holder"):
            with self.lock:
                if len(self.paused) >= MAX_PAUSED:
                    return None
            target = self.pick(holders_first=True)
            # A holder is between sections only briefly: wait a little for one to pause.
            deadline = time.monotonic() + (ttl if patient else 0.5)
            while (kind == "pause-holder" and (target is None or not target[2])
                   and time.monotonic() < deadline and not self.calm.is_set()):
                time.sleep(0.01)
                target = self.pick(holders_first=True)
            if target is None:
                return None
            run, pid, kids = target
            if kind == "pause-holder" and not kids:
                kind = "stop-lockrun"
            pause = ttl + self.rng.uniform(0.5, 1.5)
            # The stale child's head start before its lockrun wakes (and kills it at once).
            head_start = self.rng.uniform(0.005, 0.3)
            with self.lock:
                if all(p != pid for _, p in self.running.values()):
                    return None  # exited meanwhile
                self.paused.add(pid)
                stopped_at = now_us()
                os.kill(pid, signal.SIGSTOP)
                if kind == "pause-holder":
                    self.paused_groups[pid] = kids
                    for kid in kids:
                        try:
                            os.killpg(kid, signal.SIGSTOP)
                        except ProcessLookupError:
                            pass
            # Holder or waiter? The checker excuses a paused holder only (from this moment on).
            # A stopped lockrun cannot start its command: a child now means it held the lease.
            wait_stopped(pid)
            holder: bool | str = bool(children_of(pid))
            t = threading.Thread(target=self.resume, args=(kind, pid, kids, pause, head_start),
                                 daemon=True)
            self.resumers.append(t)
            t.start()
            if not holder:  # it may have taken the lease and been stopped before the spawn
                holder = self.holds(pid)
            self.fault(kind, t=stopped_at, run=run, pid=pid, seconds=round(pause, 3),
                       holder=holder)
            return kind
        elif kind == "server-pause":
            pause = self.rng.uniform(0.3, 2 * ttl)
            self.fault(kind, seconds=round(pause, 3))
            self.backend.signal(signal.SIGSTOP)
            self.sleep(pause)
            self.backend.signal(signal.SIGCONT)
            return kind
        elif kind == "server-restart":
            self.fault(kind)
            self.backend.stop()
            self.sleep(self.rng.uniform(0.0, 0.5))
            self.backend.start()
            return kind
        elif kind in QUORUM_FAULTS:
            masters = self.backend.masters
            n = len(masters)
            count = (n - 1) // 2 if kind == "minority-restart" else n // 2 + 1
            which = sorted(self.rng.sample(range(len(masters)), count))
            self.fault(kind, masters=which)
            for i in which:
                masters[i].stop()
            self.sleep(self.rng.uniform(0.0, 0.5))
            for i in which:
                masters[i].start()
            return kind
        raise ValueError(f"unknown fault kind {kind}")

    # -- the whole run ---------------------------------------------------------------------------

    def probe_ttl(self) -> int:
        """One uncontended run that prints the granted TTL (and creates the schema, etc.)."""
        out = subprocess.run(
            [self.binary, "--backend", self.backend.url(), "--name", NAME, "--ttl",
             self.ttl, "--", "/bin/sh", "-c", 'echo "$LOCKRUN_TTL_MS"'],
            env=self.env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise Broken(f"probe run on {self.backend.url()} failed ({out.returncode}): "
                         f"{out.stderr.strip()}")
        return int(out.stdout.strip())

    def run(self) -> float:
        self.ttl_ms = self.probe_ttl()
        self.store = FencedStore(self.logdir)
        meta = {"backend": self.backend.kind, "url": self.backend.url(), "ttl_ms": self.ttl_ms,
                "workers": self.workers, "seconds": self.seconds, "binary": self.binary,
                "fault_kinds": [kind for kind, _ in self.fault_mix]}
        (self.logdir / "meta.json").write_text(json.dumps(meta) + "\n")
        print(f"soak {self.backend.kind}: {self.workers} workers x {self.seconds:g} s on "
              f"{self.backend.url()}, granted TTL {self.ttl_ms} ms, logs in {self.logdir}",
              file=sys.stderr)
        started = time.monotonic()
        workers = [threading.Thread(target=self.worker, args=(w,), daemon=True)
                   for w in range(self.workers)]
        for t in workers:
            t.start()
        chaos = threading.Thread(target=self.chaos, daemon=True)
        chaos.start()
        try:
            self.stop.wait(self.seconds)
            self.calm.set()
            chaos.join()  # every pause is undone, the server is up
            with self.lock:
                self.faults_ended = now_us()
            meta["faults_ended"] = self.faults_ended
            (self.logdir / "meta.json").write_text(json.dumps(meta) + "\n")
            if not self.stop.is_set():  # (a harness error ends the soak at once)
                self.recovered.wait(max(RECOVERY_MIN, RECOVERY_TTLS * self.ttl_ms / 1000))
            self.stop.set()
            # End promptly: SIGTERM every lockrun (a waiter gives up, exit 143; a holder
            # forwards it to its command's group and exits 143 too: one more path checked).
            with self.lock:
                for _, pid in self.running.values():
                    os.kill(pid, signal.SIGTERM)
        except BaseException:
            self.abort()
            for t in workers:
                t.join(5)
            raise
        # Workers finish their current run; a lockrun still there after a generous grace is
        # killed (and recorded as such) so the soak always ends.
        deadline = time.monotonic() + max(15.0, 5 * self.ttl_ms / 1000)
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            hung = list(self.running.values())
            for run, pid in hung:
                self.faults.write(json.dumps({"t": now_us(), "kind": "shutdown-kill",
                                              "run": run, "pid": pid}) + "\n")
                self.fault_count["shutdown-kill"] += 1
                os.kill(pid, signal.SIGKILL)
        for t in workers:
            t.join(10)
        elapsed = time.monotonic() - started
        self.store.close()
        self.faults.close()
        self.runs.close()
        if hung:
            print(f"soak {self.backend.kind}: {len(hung)} lockrun(s) still running "
                  f"{max(15.0, 5 * self.ttl_ms / 1000):g} s after the end were killed: "
                  f"{hung}", file=sys.stderr)
        return elapsed


class Interrupted(Exception):
    pass


def interrupted(signum: int, _frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="all", choices=BACKENDS + ["all"])
    ap.add_argument("--seconds", type=float, default=60.0, help="per backend (default 60)")
    ap.add_argument("--ci", action="store_true",
                    help=f"CI preset: {CI_SECONDS} s per backend (about two minutes for all of them)")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--ttl", help=f"requested lease (default {TTL}; {CI_TTL} with --ci)")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary (default: a release build)")
    ap.add_argument("--logdir", metavar="DIR", help="keep the logs here (default: a temp dir, "
                    "removed when the run is clean)")
    ap.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    args = ap.parse_args()
    seconds = CI_SECONDS if args.ci else args.seconds
    ttl = args.ttl or (CI_TTL if args.ci else TTL)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    backends = BACKENDS if args.backend == "all" else [args.backend]

    benchlib.scrub_env("PG")
    needs = {"file": [], "redis": ["redis-server"], "redlock": ["redis-server"], "etcd": ["etcd"],
             "postgres": [], "pgbouncer": [], "mysql": ["mariadb-install-db"], "zk": ["java"],
             "dynamodb": ["node"]}
    benchlib.require(["bash", "sleep"] + [p for b in backends for p in needs[b]])
    binary = benchlib.lockrun_binary(args.bin)

    root = Path(args.logdir) if args.logdir else Path(
        tempfile.mkdtemp(prefix="lockrun-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"lockrun: {binary}\nseed: {seed}\nlogs: {root}", file=sys.stderr)
    total = 0
    broken = False
    began = time.monotonic()
    for i, kind in enumerate(backends):
        logdir = root / kind
        if logdir.exists():
            shutil.rmtree(logdir)
        logdir.mkdir()
        tmp = Path(tempfile.mkdtemp(prefix=f"lockrun-soak-{kind}-"))
        backend = None
        try:
            backend = BACKEND_CLASSES[kind](tmp)
            backend.start()
            soak = Soak(binary, backend, logdir, seconds, args.workers,
                        random.Random(seed + i), ttl)
            elapsed = soak.run()
            if soak.errors:
                raise Broken("; ".join(soak.errors))
        except Broken as e:
            print(f"soak {kind}: BROKEN: {e}", file=sys.stderr)
            broken = True
            continue
        except Interrupted as e:
            print(f"soak {kind}: interrupted by {e}; logs in {root}", file=sys.stderr)
            return 130
        finally:
            if backend is not None:
                backend.close()
            shutil.rmtree(tmp, ignore_errors=True)
        rep = soak_check.check_dir(logdir)
        rep.name = f"{kind} ({elapsed:.1f} s, {args.workers} workers, TTL {soak.ttl_ms} ms)"
        rep.print()
        sys.stdout.flush()
        total += rep.total_violations
    print(f"soak: {total} violation(s) on {', '.join(backends)} in "
          f"{time.monotonic() - began:.1f} s (seed {seed})")
    if total == 0 and not broken and not args.logdir:
        shutil.rmtree(root, ignore_errors=True)
    elif not args.logdir:
        print(f"soak: logs kept in {root} (python3 tests/soak/check.py {root})")
    return 1 if total or broken else 0


if __name__ == "__main__":
    benchlib.run_script(main)
