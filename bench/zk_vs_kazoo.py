#!/usr/bin/env python3
"""Benchmark: lockrun's zk:// backend side by side with a kazoo `Lock` script doing the same.

kazoo is the ZooKeeper client a Python shop would use; its `Lock` recipe is the classic one
(ephemeral sequential znodes, a watch on the predecessor). The anchor is the script such a shop
would write around a command: connect, take `client.Lock("/kazoo-bench/NAME")`, run the command,
release, close the session. It never stops the command when its session dies.

What it measures, both tools in ONE run against ONE private ZooKeeper (standalone, Debian's jar,
default tick of 2 s, every write synced as in production), runs interleaved so that machine drift
hits both equally:

  a. uncontended cost    wall time of one `TOOL ... -- true`, median and p90 (ms); target: the
                         lockrun/kazoo ratio of the medians <= 0.5, absolute ms reported
  b. contention          8 processes x 15 critical sections on ONE name, each a read-modify-write
                         of a counter file; total wall time (median of reps), and a check that the
                         counter ends at 120 (anything else = lost update)
  c. handoff latency     from the holder's command's last action (`date +%s%N`) to the waiter's
                         command's first action, median and p90 (ms); target: lockrun's median
                         <= 10 ms. Run as root, lockrun moves each command into a cgroup of its
                         own (so its watchdog can kill the whole tree), and that write to
                         cgroup.procs costs about 10 ms here; so, as root, lockrun's handoff is
                         also measured as an unprivileged user (setpriv nobody), where no cgroup
                         is made: the difference is the cgroup, the rest is the backend
  d. queue scaling       a holder, N waiters queued behind it (each running `true`), then the
                         holder lets go: wall time until the last waiter is done, per handoff
                         (ms), for N = 10 and N = 100; target: lockrun's per-handoff cost at 100
                         <= 1.2x that at 10 (no herd: each release wakes one waiter)
  e. peak RSS            max resident set of each tool running `true` (MiB); target: lockrun
                         <= 8 MiB

kazoo is installed with pip into a private virtual environment (~/.cache/lockrun-bench/kazoo,
made on first use), and this script re-runs itself under that environment's Python. The server is
started by this script on a free loopback port, in a temporary directory, and stopped at the end.

Run (Linux; Debian's zookeeper package and a JRE; PyPI reachable on the first run):

    python3 bench/zk_vs_kazoo.py            # builds lockrun with `cargo build --release`
    python3 bench/zk_vs_kazoo.py --quick    # fewer iterations, a smoke run
    python3 bench/zk_vs_kazoo.py --bin target/release/lockrun   # skip the build

Exit status: 0 (it is a report, misses included); 1 if something is broken: a lost update, a tool
failing, the server not starting, or the build failing. This is not a test.
"""

from __future__ import annotations

import os
import shutil
import socket
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
TARGET_HANDOFF_MS = 10.0
TARGET_GROWTH = 1.2
TARGET_RSS_MIB = 8.0
JAR = "/usr/share/java/zookeeper.jar"
VENV = Path.home() / ".cache" / "lockrun-bench" / "kazoo"
QUEUES = (10, 100)

FULL = Iterations(warmup=10, iters=100, contention_reps=3, handoff_reps=20, rss_reps=5)
QUICK = Iterations(warmup=3, iters=30, contention_reps=1, handoff_reps=6, rss_reps=3)
# Runs per tool and queue length (full, --quick): a handoff is a few ms, so a short queue needs
# more runs for a steady median.
QUEUE_REPS = {(10, False): 9, (100, False): 3, (10, True): 3, (100, True): 1}

# The anchor, as a Python shop would write it (run by the venv's Python).
KAZOO_LOCK = '''\
import subprocess, sys
from kazoo.client import KazooClient
hosts, name, *command = sys.argv[1:]
client = KazooClient(hosts=hosts)
client.start()
try:
    with client.Lock("/kazoo-bench/" + name, "bench"):
        status = subprocess.call(command)
finally:
    client.stop()
    client.close()
sys.exit(status)
'''


def ensure_kazoo() -> None:
    """Re-runs this script under a virtual environment that has kazoo, making it if needed."""
    try:
        import kazoo  # noqa: F401
        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if os.environ.get("LOCKRUN_BENCH_IN_VENV"):
        raise Broken(f"kazoo is not importable in {VENV}")
    if not python.exists():
        print(f"installing kazoo into {VENV} (pip) ...", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if subprocess.run([str(python), "-c", "import kazoo"], stderr=subprocess.DEVNULL).returncode:
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "kazoo"])
        if done.returncode != 0:
            raise Broken("pip install kazoo failed")
    os.environ["LOCKRUN_BENCH_IN_VENV"] = "1"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


class ZooKeeper:
    """A private standalone ZooKeeper on a free loopback port, data in `tmp`."""

    def __init__(self, tmp: Path):
        self.port = benchlib.free_port()
        (tmp / "zk").mkdir()
        cfg = tmp / "zoo.cfg"
        cfg.write_text(f"tickTime=2000\ndataDir={tmp / 'zk'}\nclientPort={self.port}\n"
                       "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                       "maxClientCnxns=0\n4lw.commands.whitelist=srvr\n")
        self.log = open(tmp / "zookeeper.log", "wb")
        self.proc = subprocess.Popen(
            ["java", "-cp", JAR, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not self.serving():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Broken(f"zookeeper did not start (see {tmp / 'zookeeper.log'})")
            time.sleep(0.05)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serving(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                return b"Mode: " in s.recv(4096)
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


class Kazoo(Tool):
    """The kazoo `Lock` script around the command. It always waits."""

    label = "kazoo"

    def __init__(self, script: Path, endpoint: str):
        self.script = str(script)
        self.endpoint = endpoint

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        return [sys.executable, self.script, self.endpoint, lock, *command]


class Unprivileged(Tool):
    """lockrun run as `nobody` (no cgroup for the command), for the handoff only."""

    label = "unprivileged"

    def __init__(self, inner: Tool):
        self.inner = inner

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        return ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                *self.inner.wrap(lock, command, wait)]


class Counter:
    """Counts the znodes under a lock's node, with a kazoo session of the bench's own."""

    def __init__(self, endpoint: str):
        from kazoo.client import KazooClient
        self.client = KazooClient(hosts=endpoint)
        self.client.start()

    def children(self, path: str) -> int:
        try:
            return len(self.client.get_children(path))
        except Exception:  # noqa: BLE001  (no node yet: nobody queued)
            return 0

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def queue_once(tool: Tool, n: int, tmp: Path, counter: Counter, path: str) -> float:
    """A holder, `n` waiters queued behind it, then the release: ms per handoff until the last
    waiter is done."""
    stamps = benchlib.stamp_dir(tmp)
    ready, release = stamps / "queue.ready", stamps / "queue.release"
    for f in (ready, release):
        f.unlink(missing_ok=True)
    hold = f': > "{ready}"; while [ ! -e "{release}" ]; do sleep 0.002; done'
    holder = benchlib.spawn(tool.wrap("queue", ["sh", "-c", hold]))
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: the queue's holder never ran")
        time.sleep(0.005)
    waiters = [benchlib.spawn(tool.wrap("queue", ["true"])) for _ in range(n)]
    deadline = time.monotonic() + 120
    while counter.children(path) < n + 1:
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: {n} waiters never all queued")
        time.sleep(0.05)
    started = time.monotonic()
    release.touch()
    benchlib.wait_ok(holder, f"{tool.label} queue holder")
    for pid in waiters:
        benchlib.wait_ok(pid, f"{tool.label} queued waiter")
    return (time.monotonic() - started) * 1000 / n


def bench_queues(tools: list[Tool], tmp: Path, counter: Counter, quick: bool
                 ) -> dict[tuple[str, int], list[float]]:
    """Per (tool, N): per-handoff ms of each run."""
    paths = {"lockrun": "/lockrun/queue", "kazoo": "/kazoo-bench/queue"}
    out: dict[tuple[str, int], list[float]] = {}
    for n in QUEUES:
        for _, tool in benchlib.interleaved(tools, QUEUE_REPS[(n, quick)]):
            out.setdefault((tool.label, n), []).append(
                queue_once(tool, n, tmp, counter, paths[tool.label]))
    return out


def main() -> int:
    """Runs the benchmark and prints the report; the exit status. Setup failures raise Broken."""
    args = benchlib.parse_args(__doc__)
    n = QUICK if args.quick else FULL
    if not Path(JAR).exists():
        raise Broken(f"{JAR} is missing (apt-get install zookeeper default-jre-headless)")
    benchlib.require(["java"], " (apt-get install default-jre-headless)")
    ensure_kazoo()
    binary = benchlib.lockrun_binary(args.bin)
    # Waiters say who holds the name after a second (--progress); not in a benchmark's output.
    benchlib.ENV["LOCKRUN_PROGRESS"] = "0"

    with tempfile.TemporaryDirectory(prefix="lockrun-bench-zk-") as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "kazoo_lock.py"
        script.write_text(KAZOO_LOCK)
        server = ZooKeeper(tmp)  # Broken if it does not start
        tools = [Lockrun(binary, f"zk://{server.endpoint}"), Kazoo(script, server.endpoint)]
        print(f"lockrun: {binary}\nkazoo:   {sys.executable}\nzookeeper: {server.endpoint} "
              f"(data in {tmp}, removed afterwards)", file=sys.stderr)
        counter = Counter(server.endpoint)
        try:
            print(f"[a] uncontended: {n.warmup} warm-up + {n.iters} runs each ...",
                  file=sys.stderr)
            unc = benchlib.bench_uncontended(tools, n.warmup, n.iters)
            print(f"[b] contention: {WORKERS} procs x {SECTIONS} sections, "
                  f"{n.contention_reps} reps each ...", file=sys.stderr)
            cont, finals = benchlib.bench_contention(tools, tmp, n.contention_reps)
            print(f"[c] handoff: {n.handoff_reps} handoffs each ...", file=sys.stderr)
            hand = benchlib.bench_handoff(tools, tmp, n.handoff_reps)
            unprivileged = None
            if os.geteuid() == 0 and shutil.which("setpriv"):
                # The unprivileged holder writes its "ready" stamp itself.
                os.chmod(benchlib.stamp_dir(tmp), 0o1777)
                print(f"[c'] handoff as nobody (no cgroup): {n.handoff_reps} handoffs ...",
                      file=sys.stderr)
                unprivileged = benchlib.bench_handoff([Unprivileged(tools[0])], tmp,
                                                      n.handoff_reps)["unprivileged"]
            reps = " and ".join(str(QUEUE_REPS[(q, args.quick)]) for q in QUEUES)
            print(f"[d] queues of {' and '.join(map(str, QUEUES))} waiters, {reps} runs each "
                  "...", file=sys.stderr)
            queues = bench_queues(tools, tmp, counter, args.quick)
            print(f"[e] peak RSS: {n.rss_reps} runs each ...", file=sys.stderr)
            rss, _ = benchlib.bench_rss(tools, tmp, n.rss_reps)
        except Broken as e:
            print(f"\n!!! BROKEN: {e}", file=sys.stderr)
            return 1
        finally:
            counter.close()
            server.stop()

    unc_ratio = median(unc["lockrun"]) / median(unc["kazoo"])
    cont_ratio = median(cont["lockrun"]) / median(cont["kazoo"])
    hand_ok = median(hand["lockrun"]) <= TARGET_HANDOFF_MS
    small, large = QUEUES

    def per(tool: str, size: int) -> float:
        return median(queues[(tool, size)])

    growth = {t.label: per(t.label, large) / per(t.label, small) for t in tools}
    growth_ok = growth["lockrun"] <= TARGET_GROWTH
    rss_ok = mib(rss["lockrun"]) <= TARGET_RSS_MIB
    total = WORKERS * SECTIONS
    rows = [
        ("uncontended `true` median (ms)", median(unc["lockrun"]), median(unc["kazoo"]),
         f"ratio <= {TARGET_RATIO}x", unc_ratio <= TARGET_RATIO),
        ("uncontended `true` p90 (ms)", p90(unc["lockrun"]), p90(unc["kazoo"]), "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(cont["lockrun"]),
         median(cont["kazoo"]), "-", None),
        ("  per critical section (ms)", median(cont["lockrun"]) / total,
         median(cont["kazoo"]) / total, "-", None),
        ("handoff latency median (ms)", median(hand["lockrun"]), median(hand["kazoo"]),
         f"lockrun <= {TARGET_HANDOFF_MS:g} ms", hand_ok),
        ("handoff latency p90 (ms)", p90(hand["lockrun"]), p90(hand["kazoo"]), "-", None),
    ]
    if unprivileged:
        rows += [
            ("  as nobody (no cgroup) median (ms)", median(unprivileged), median(hand["kazoo"]),
             f"lockrun <= {TARGET_HANDOFF_MS:g} ms", median(unprivileged) <= TARGET_HANDOFF_MS),
            ("  as nobody (no cgroup) p90 (ms)", p90(unprivileged), p90(hand["kazoo"]), "-",
             None),
        ]
    rows += [
        (f"per handoff, {small} queued (ms)", per("lockrun", small), per("kazoo", small), "-",
         None),
        (f"per handoff, {large} queued (ms)", per("lockrun", large), per("kazoo", large), "-",
         None),
        (f"  growth {small} -> {large} (x)", growth["lockrun"], growth["kazoo"],
         f"lockrun <= {TARGET_GROWTH}x", growth_ok),
        ("peak RSS running `true` (MiB)", mib(rss["lockrun"]), mib(rss["kazoo"]),
         f"lockrun <= {TARGET_RSS_MIB:g} MiB", rss_ok),
    ]
    benchlib.print_heading("lockrun (zk backend) vs a kazoo Lock script", args.quick)
    benchlib.print_table(rows, "kazoo")
    print(f"\ncontention ratio (lockrun/kazoo): {cont_ratio:.2f}x")
    lost = benchlib.report_counters(finals)
    verdicts = [("uncontended ratio", unc_ratio <= TARGET_RATIO), ("handoff", hand_ok)]
    if unprivileged:
        verdicts.append(("handoff without cgroup", median(unprivileged) <= TARGET_HANDOFF_MS))
    verdicts += [
                 ("queue growth", growth_ok), ("lockrun RSS", rss_ok)]
    print("targets: " + ", ".join(f"{name} {'PASS' if ok else 'MISS'}" for name, ok in verdicts)
          + (", counters FAIL (LOST UPDATE)" if lost else ", counters ok"))
    return 1 if lost else 0


if __name__ == "__main__":
    benchlib.run_script(main)
