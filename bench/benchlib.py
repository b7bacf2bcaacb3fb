"""Shared harness for the lockrun benchmark scripts in this folder.

Each `bench/*.py` script compares lockrun on one backend with an "anchor" tool (flock(1), a
hand-written redis-cli or psql lock, ...). The scripts own only what is specific to their backend:
starting its server, the anchor's commands, the targets and the rows of the table. This module
owns everything they have in common:

  * the lockrun binary: `cargo build --release` and finding the executable (or `--bin PATH`),
    and the common command line (`--quick`, `--bin`) with its iteration counts;
  * running processes cheaply (posix_spawn, with LOCKRUN_* scrubbed from the environment) and
    treating any failure as `Broken` (the numbers are meaningless: exit 1);
  * the tools being compared: the `Tool` interface, lockrun itself (`Lockrun`), and the
    "poll a CLI until it takes the lock" shell wrapper hand-written anchors use;
  * the measurements, with the two tools' runs interleaved so machine drift hits both equally:
    uncontended cost, contention (8 x 15 read-modify-writes and the lost-update check),
    handoff latency and peak RSS (via /usr/bin/time -f %M or wait4);
  * statistics (median, nearest-rank p90), free loopback ports, the user a private PostgreSQL
    runs as under root, and the report: the
    `metric | lockrun | ANCHOR | ratio | target` table with PASS/MISS and the counter lines.

Python 3.11 standard library only, Linux only. Import it from a script in this folder with

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import benchlib

The chaos soak (tests/soak/soak.py, a test, not a benchmark) imports it from here too, for free
ports, the scrubbed environment and finding or building lockrun.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import math
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, NoReturn

REPO_ROOT = Path(__file__).resolve().parent.parent
GNU_TIME = "/usr/bin/time"

# The contention test: WORKERS processes, each running SECTIONS critical sections on one name.
WORKERS = 8
SECTIONS = 15
# The critical section: a non-atomic increment of a counter file. Without mutual exclusion,
# concurrent sections lose updates and the total ends below WORKERS * SECTIONS.
RMW = 'n=$(cat "$1"); echo $((n+1)) > "$1"'
# How long the handoff holder keeps the lock once the waiter may start.
HOLD_AFTER_READY_S = 0.25


class Broken(Exception):
    """Something that makes the numbers meaningless (exit 1)."""


# --------------------------------------------------------------------------------------------
# Command line and the lockrun binary.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Iterations:
    """How many runs each measurement makes."""

    warmup: int  # uncontended runs per tool, not counted
    iters: int  # uncontended runs per tool, counted
    contention_reps: int  # contention rounds per tool
    handoff_reps: int  # handoffs per tool
    rss_reps: int  # peak-RSS runs per tool


# `--quick`: the same smoke run for every script.
QUICK = Iterations(warmup=5, iters=40, contention_reps=2, handoff_reps=6, rss_reps=3)


def parse_args(doc: str) -> argparse.Namespace:
    """The options every script takes: `--quick` and `--bin PATH`. The description is the
    first paragraph of the script's docstring."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--bin", metavar="PATH", help="lockrun binary to use (skips the build)")
    return ap.parse_args()


def build_lockrun() -> str:
    """`cargo build --release --quiet` in the repo root; the lockrun binary's path, as cargo
    reports it (so a CARGO_TARGET_DIR or a configured target dir is honoured)."""
    print(f"building lockrun (cargo build --release) in {REPO_ROOT} ...", file=sys.stderr)
    proc = subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "lockrun", "--message-format=json"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise Broken("cargo build --release failed (see above); pass --bin PATH to skip it")
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["target"]["name"] == "lockrun"):
            return msg["executable"]
    return str(REPO_ROOT / "target" / "release" / "lockrun")


def run_script(main: Callable[[], int]) -> NoReturn:
    """Runs a script's main() and exits with its status. A Broken that main() lets through
    (setup: a missing program, the build, the server) is printed as `bench: WHY`, exit 1."""
    try:
        status = main()
    except Broken as e:
        print(f"bench: {e}", file=sys.stderr)
        status = 1
    sys.exit(status)


def require(programs: list[str], hint: str = "") -> None:
    """Broken unless every program (a path, or a name on PATH) is there and executable."""
    for program in programs:
        if shutil.which(program) is None:
            raise Broken(f"{program} is missing{hint}")


def lockrun_binary(bin_arg: str | None) -> str:
    """The lockrun executable: `--bin PATH` if given, else a fresh release build."""
    binary = str(Path(bin_arg).resolve()) if bin_arg else build_lockrun()
    if not os.access(binary, os.X_OK):
        raise Broken(f"{binary} is not an executable")
    return binary


# --------------------------------------------------------------------------------------------
# Processes.
# --------------------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """The environment for the tools: ours minus LOCKRUN_* (a stray LOCKRUN_VERBOSE or
    LOCKRUN_WAIT in the caller's shell would change what lockrun does)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}


ENV = clean_env()


# The DynamoDB server the tests, the soak and bench/dynamodb.py run (installed by scripts/test.sh
# with `npm ci` in tools/dynalite).
DYNALITE = REPO_ROOT / "tools" / "dynalite" / "node_modules" / ".bin" / "dynalite"


def local_aws_env(base: dict[str, str]) -> dict[str, str]:
    """`base` with none of the caller's AWS settings, and instead dummy credentials and a region
    that a private DynamoDB (dynalite) accepts, and no instance metadata service: nothing but the
    loopback server is ever asked."""
    env = {k: v for k, v in base.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="lockrun-local", AWS_SECRET_ACCESS_KEY="lockrun-local",
               AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE="/nonexistent/lockrun/config",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent/lockrun/credentials")
    return env


def start_dynalite(port: int, data: Path, log) -> subprocess.Popen:
    """Starts dynalite on 127.0.0.1:`port` with its LevelDB store in `data` (kept across
    restarts), in a process group of its own; the caller waits until the port accepts."""
    if not os.access(DYNALITE, os.X_OK):
        raise Broken(f"dynalite is not installed at {DYNALITE} (run scripts/test.sh, or "
                     "npm ci --prefix tools/dynalite)")
    return subprocess.Popen(
        [str(DYNALITE), "--host", "127.0.0.1", "--port", str(port), "--path", str(data),
         "--createTableMs", "100"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def start_pgbouncer(conf: Path, server_port: int, user: str | None, pool_size: int = 20,
                    max_client_conn: int = 1500) -> tuple[subprocess.Popen, int]:
    """Starts a PgBouncer in transaction pooling on a free loopback port, in front of the
    PostgreSQL server on 127.0.0.1:`server_port`, configured as lockrun's README says (lockrun's
    startup options ignored, a second between logins to a restarting server); its configuration,
    user list and log in `conf`, run as `user` (PgBouncer refuses root), in a process group of
    its own. Returns the process and its port once the port accepts."""
    program = "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else "pgbouncer"
    require([program], " (apt-get install pgbouncer)")
    port = free_port()
    (conf / "users.txt").write_text('"postgres" ""\n')
    ini = conf / "pgbouncer.ini"
    ini.write_text(
        f"[databases]\n* = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {conf / 'users.txt'}\npool_mode = transaction\n"
        f"max_client_conn = {max_client_conn}\ndefault_pool_size = {pool_size}\n"
        f"server_login_retry = 1\nignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {conf / 'pgbouncer.log'}\n")
    proc = subprocess.Popen([program, str(ini)], user=user, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while not accepts(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise Broken(f"pgbouncer on port {port} did not start (see {conf / 'pgbouncer.log'})")
        time.sleep(0.02)
    return proc, port


def accepts(port: int) -> bool:
    """Whether something on 127.0.0.1:`port` accepts a connection."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def scrub_env(prefix: str) -> None:
    """Also drops the variables starting with `prefix` from what the tools see (e.g. PG*,
    which would redirect psql)."""
    for key in [k for k in ENV if k.startswith(prefix)]:
        del ENV[key]


def spawn(argv: list[str], stdout: str | None = None, quiet: bool = False) -> int:
    """Starts argv with posix_spawn (much cheaper than subprocess, so the harness adds as
    little as possible to what is measured); stdout optionally redirected to a file, stderr to
    /dev/null when `quiet` (a thousand waiters' messages are noise). A bare program name is
    looked up on PATH. Returns the pid."""
    actions = []
    if quiet:
        actions.append((os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0))
    if stdout is not None:
        actions.append((os.POSIX_SPAWN_OPEN, 1, stdout,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    path = argv[0] if "/" in argv[0] else (shutil.which(argv[0]) or argv[0])
    return os.posix_spawn(path, argv, ENV, file_actions=actions)


def wait_all(pids: list[int], what: str, timeout_s: float) -> int:
    """Reaps every pid; returns how many failed (exit status other than 0); Broken, after
    killing the rest, if they did not all finish within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    failures = 0
    left = set(pids)
    while left:
        for pid in list(left):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                left.discard(pid)
                failures += os.waitstatus_to_exitcode(status) != 0
        if left and time.monotonic() > deadline:
            kill_and_reap(left)
            raise Broken(f"{len(left)} {what} did not finish within {timeout_s:.0f} s")
        time.sleep(0.01)
    return failures


def kill_and_reap(pids: Iterable[int]) -> None:
    """SIGKILLs and reaps each of `pids` (this process's children; 0 stands for none) that has
    not been reaped yet."""
    for pid in pids:
        if pid:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def wait_ok(pid: int, what: str) -> None:
    """Waits for pid and raises Broken unless it exited 0."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise Broken(f"{what} exited with status {code}")


def run_ok(argv: list[str], stdout: str | None = None) -> None:
    """Runs argv to completion; Broken unless it exited 0."""
    wait_ok(spawn(argv, stdout), " ".join(argv))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for a private server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_postgres_shm(data: Path) -> None:
    """Removes the System V shared memory segment that a killed postmaster leaves behind (named on
    the seventh line of the cluster's postmaster.pid: key and id). The kernel allows only 4,096
    (kernel.shmmni); leaked ones pile up over runs until no cluster can start."""
    try:
        line = (data / "postmaster.pid").read_text().splitlines()[6]
        shmid = int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmctl(ctypes.c_int(shmid), ctypes.c_int(0), None)  # 0 = IPC_RMID


def postgres_user(*owned: Path) -> str | None:
    """The user a private PostgreSQL (or PgBouncer) runs as: None unless we are root, which they
    refuse to run as; then postgres, else nobody, made the owner of the `owned` directories."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        for path in owned:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return name
    raise Broken("running as root, but there is no postgres or nobody user")


# --------------------------------------------------------------------------------------------
# The tools being compared.
# --------------------------------------------------------------------------------------------


class Tool:
    """One side of a comparison: a label (its column and its key in every result dict) and a
    way to run a command while holding a named lock."""

    label: str

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        """argv that runs `command` while holding the lock called `lock`. `wait=False` says
        the lock is known to be free (the uncontended runs), so a tool may skip its wait
        loop; tools that wait natively ignore it."""
        raise NotImplementedError


class Lockrun(Tool):
    """lockrun itself, on the backend given as a URL (file://DIR, redis://HOST:PORT, ...)."""

    label = "lockrun"

    def __init__(self, binary: str, backend: str):
        self.binary = binary
        self.backend = backend

    def wrap(self, lock: str, command: list[str], wait: bool = True) -> list[str]:
        return [self.binary, "--backend", self.backend, "--name", lock, "--", *command]


def polled_shell_lock(take: str, taken: str, release: str, command: list[str],
                      wait: bool) -> list[str]:
    """argv for the lock people write by hand around a command in sh, with a server's CLI:

        TAKE ; COMMAND ; RELEASE          (exit status: COMMAND's)

    `take` is a shell command that prints `taken` when it got the lock; to wait, it is retried
    every 10 ms until it does. Uncontended (`wait=False`) it is exactly the one-liner, run once.
    `take`'s and `release`'s output is discarded."""
    acquire = (f'until [ "$({take})" = {taken} ]; do sleep 0.01; done' if wait
               else f"{take} >/dev/null")
    script = f'{acquire}; "$@"; s=$?; {release} >/dev/null; exit $s'
    return ["/bin/sh", "-c", script, "sh", *command]


def interleaved(tools: list[Tool], n: int) -> Iterator[tuple[int, Tool]]:
    """Yields (iteration, tool) with the tools alternating, and which one goes first also
    alternating, so neither always runs right after the other."""
    for i in range(n):
        for tool in (tools if i % 2 == 0 else tools[::-1]):
            yield i, tool


# --------------------------------------------------------------------------------------------
# Statistics.
# --------------------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    """90th percentile, nearest-rank (an actual observed value)."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def mib(kib: float) -> float:
    return kib / 1024


# --------------------------------------------------------------------------------------------
# a. Uncontended per-run wall time of `TOOL ... -- true`.
# --------------------------------------------------------------------------------------------


def bench_uncontended(tools: list[Tool], warmup: int, iters: int) -> dict[str, list[float]]:
    """Per tool: `iters` wall times (ms), after `warmup` runs that are not counted."""
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    for i, tool in interleaved(tools, warmup + iters):
        argv = tool.wrap("uncontended", ["true"], wait=False)
        start = time.perf_counter_ns()
        run_ok(argv)
        if i >= warmup:
            times[tool.label].append((time.perf_counter_ns() - start) / 1e6)
    return times


# --------------------------------------------------------------------------------------------
# b. Contention: WORKERS processes x SECTIONS read-modify-write sections on one name.
# --------------------------------------------------------------------------------------------


def contention_once(tool: Tool, tmp: Path) -> tuple[float, int]:
    """One round: returns (total wall ms, final counter value)."""
    counter = tmp / f"counter-{tool.label}"
    counter.write_text("0\n")
    # Each worker is a shell looping SECTIONS times over `TOOL ... -- sh -c RMW sh COUNTER`.
    section = tool.wrap("contended", ["sh", "-c", RMW, "sh", str(counter)])
    loop = f'i=0; while [ $i -lt {SECTIONS} ]; do "$@" || exit 1; i=$((i+1)); done'
    worker = ["/bin/sh", "-c", loop, "worker", *section]
    start = time.perf_counter_ns()
    pids = [spawn(worker) for _ in range(WORKERS)]
    failures = []
    for pid in pids:  # reap every worker before reporting any failure
        try:
            wait_ok(pid, f"{tool.label} contention worker")
        except Broken as e:
            failures.append(str(e))
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    if failures:
        raise Broken("; ".join(failures))
    return elapsed_ms, int(counter.read_text().strip() or "0")


def bench_contention(tools: list[Tool], tmp: Path, reps: int, warmup: bool = False
                     ) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Per tool: `reps` total wall times (ms) and final counter values. With `warmup`, one
    uncounted round per tool first (page cache, state files). A lost update is announced on
    stderr as it happens; `report_counters` reports it in the output."""
    times: dict[str, list[float]] = {t.label: [] for t in tools}
    finals: dict[str, list[int]] = {t.label: [] for t in tools}
    if warmup:
        for tool in tools:
            contention_once(tool, tmp)
    for _, tool in interleaved(tools, reps):
        ms, final = contention_once(tool, tmp)
        times[tool.label].append(ms)
        finals[tool.label].append(final)
        if final != WORKERS * SECTIONS:
            print(f"!!! FAIL: {tool.label}: counter ended at {final}, expected "
                  f"{WORKERS * SECTIONS}: LOST UPDATE (two holders at once)", file=sys.stderr)
    return times, finals


# --------------------------------------------------------------------------------------------
# c. Handoff latency: holder's child's last action -> waiter's child's first action.
# --------------------------------------------------------------------------------------------


def stamp_dir(tmp: Path) -> Path:
    """Where handoff timestamps are written: a memory filesystem when there is one, so that the
    waiter's first write never waits for a journal commit of the disk the state lives on (that
    would measure the filesystem, not the handoff; it hit both tools, at random)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        own = shm / f"lockrun-bench-{os.getpid()}"
        if not own.is_dir():
            own.mkdir()
            atexit.register(shutil.rmtree, own, True)
        return own
    return tmp


def handoff_once(tool: Tool, tmp: Path, hold_s: float = HOLD_AFTER_READY_S) -> float:
    """One handoff after the holder has held for `hold_s` once its command started; returns
    its latency in ms."""
    ready, a_end, b_start = (stamp_dir(tmp) / f"handoff.{x}" for x in ("ready", "a", "b"))
    for f in (ready, a_end, b_start):
        f.unlink(missing_ok=True)
    # Holder: signal "I hold it", keep it a while, and make `date` the very last thing the
    # child does (exec, so no shell runs after it). Its stdout (the timestamp) goes to a_end.
    holder_cmd = ["sh", "-c", f': > "$1"; sleep {hold_s}; exec date +%s%N',
                  "sh", str(ready)]
    holder = spawn(tool.wrap("handoff", holder_cmd), stdout=str(a_end))
    deadline = time.monotonic() + 10
    while not ready.exists():
        if time.monotonic() > deadline:
            raise Broken(f"{tool.label}: handoff holder never started its command")
        time.sleep(0.001)
    # Waiter: its command *is* `date` (no shell in front), stdout to b_start. It blocks until
    # the holder lets go; the holder still has hold_s to go, plenty to get queued.
    waiter = spawn(tool.wrap("handoff", ["date", "+%s%N"]), stdout=str(b_start))
    wait_ok(holder, f"{tool.label} handoff holder")
    wait_ok(waiter, f"{tool.label} handoff waiter")
    # Both stamps are CLOCK_REALTIME on the same host: fine for a sub-second difference.
    return (int(b_start.read_text()) - int(a_end.read_text())) / 1e6


def bench_handoff(tools: list[Tool], tmp: Path, reps: int) -> dict[str, list[float]]:
    """Per tool: `reps` handoff latencies (ms)."""
    lat: dict[str, list[float]] = {t.label: [] for t in tools}
    for _, tool in interleaved(tools, reps):
        lat[tool.label].append(handoff_once(tool, tmp))
    return lat


# --------------------------------------------------------------------------------------------
# d. Peak RSS of a tool process while it runs `true`.
# --------------------------------------------------------------------------------------------


def peak_rss_kib(argv: list[str], tmp: Path) -> tuple[int, str]:
    """(max RSS in KiB of the process started by argv, how it was measured). With GNU time,
    `%M` is the ru_maxrss that time(1) gets from wait4 on its child; without it we call wait4
    ourselves on the tool's pid. Either way the value is max(tool, its waited-for children):
    the child here is `true`, far smaller than any tool, so the figure is the tool's own."""
    if os.access(GNU_TIME, os.X_OK):
        out = tmp / "time.out"
        run_ok([GNU_TIME, "-f", "%M", "-o", str(out), *argv])
        return int(out.read_text().split()[-1]), "/usr/bin/time -f %M"
    pid = spawn(argv)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Broken(f"{argv} failed")
    return usage.ru_maxrss, "os.wait4 ru_maxrss"  # KiB on Linux


def bench_rss(tools: list[Tool], tmp: Path, reps: int) -> tuple[dict[str, int], str]:
    """(per tool: the highest peak RSS in KiB over `reps` runs of `true`, how measured)."""
    peaks: dict[str, int] = {t.label: 0 for t in tools}
    method = ""
    for _, tool in interleaved(tools, reps):
        kib, method = peak_rss_kib(tool.wrap("rss", ["true"]), tmp)
        peaks[tool.label] = max(peaks[tool.label], kib)
    return peaks, method


# --------------------------------------------------------------------------------------------
# The usual sequence for a server backend, and its table rows.
# --------------------------------------------------------------------------------------------


@dataclass
class Results:
    """What `measure` found; dicts are keyed by tool label, times in ms."""

    uncontended: dict[str, list[float]]
    contention: dict[str, list[float]]
    finals: dict[str, list[int]]  # final counter value of every contention round
    handoff: dict[str, list[float]]
    rss_mib: float  # lockrun's peak RSS running `true`


def measure(lockrun: Tool, anchor: Tool, tmp: Path, n: Iterations) -> Results:
    """a. uncontended, b. contention, c. handoff (both tools, interleaved), then d. peak RSS
    (lockrun only), with progress on stderr. Raises Broken."""
    tools = [lockrun, anchor]
    print(f"[a] uncontended: {n.warmup} warm-up + {n.iters} runs each ...", file=sys.stderr)
    unc = bench_uncontended(tools, n.warmup, n.iters)
    print(f"[b] contention: {WORKERS} x {SECTIONS}, {n.contention_reps} reps each ...",
          file=sys.stderr)
    cont, finals = bench_contention(tools, tmp, n.contention_reps)
    print(f"[c] handoff: {n.handoff_reps} each ...", file=sys.stderr)
    hand = bench_handoff(tools, tmp, n.handoff_reps)
    print(f"[d] peak RSS: {n.rss_reps} runs ...", file=sys.stderr)
    rss, _ = bench_rss([lockrun], tmp, n.rss_reps)
    return Results(unc, cont, finals, hand, mib(rss[lockrun.label]))


# A table row: (metric, lockrun value, anchor value or None, target text, met? or None).
Row = tuple[str, float, float | None, str, bool | None]


def server_rows(res: Results, anchor: str, uncontended_target: tuple[str, bool],
                handoff_target_ms: float, rss_target_mib: float) -> list[Row]:
    """The table rows for `measure`'s results. `uncontended_target` is the (text, met?) of
    the script's own target on the uncontended median; the handoff and RSS targets are on
    lockrun's handoff median and peak RSS."""
    lr = "lockrun"
    total = WORKERS * SECTIONS
    hand_ms = median(res.handoff[lr])
    return [
        ("uncontended `true` median (ms)", median(res.uncontended[lr]),
         median(res.uncontended[anchor]), *uncontended_target),
        ("uncontended `true` p90 (ms)", p90(res.uncontended[lr]), p90(res.uncontended[anchor]),
         "-", None),
        (f"contention {WORKERS}x{SECTIONS} total median (ms)", median(res.contention[lr]),
         median(res.contention[anchor]), "-", None),
        ("  per critical section (ms)", median(res.contention[lr]) / total,
         median(res.contention[anchor]) / total, "-", None),
        ("handoff median (ms)", hand_ms, median(res.handoff[anchor]),
         f"lockrun <= {handoff_target_ms:g} ms", hand_ms <= handoff_target_ms),
        ("handoff p90 (ms)", p90(res.handoff[lr]), p90(res.handoff[anchor]), "-", None),
        ("peak RSS running `true` (MiB)", res.rss_mib, None,
         f"lockrun <= {rss_target_mib:g} MiB", res.rss_mib <= rss_target_mib),
    ]


# --------------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------------


def print_heading(title: str, quick: bool, note: str | None = None) -> None:
    """`TITLE -- quick run, N CPUs, runs interleaved`, an optional note line, a blank line."""
    mode = "quick" if quick else "full"
    print(f"\n{title} -- {mode} run, {os.cpu_count()} CPUs, runs interleaved")
    if note:
        print(note)
    print()


def fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def print_table(rows: list[Row], anchor: str) -> None:
    """Prints `metric | lockrun | ANCHOR | ratio | target`. A row is (metric, lockrun value,
    anchor value or None when not measured, target text, met?); met None = informational,
    otherwise PASS or MISS is appended to the target."""
    header = ("metric", "lockrun", anchor, "ratio", "target")
    lines = []
    for metric, lr, base, target, met in rows:
        ratio = "-" if not base else f"{lr / base:.2f}x"
        verdict = "" if met is None else (" PASS" if met else " MISS")
        lines.append((metric, fmt(lr), "-" if base is None else fmt(base), ratio,
                      target + verdict))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(5)]

    def show(r: tuple[str, ...]) -> None:
        # metric left-aligned, numbers right-aligned, target as is (last: no padding).
        print(" | ".join(c.ljust(w) if i == 0 else c.rjust(w) if i < 4 else c
                         for i, (c, w) in enumerate(zip(r, widths))))

    show(header)
    print("-+-".join("-" * w for w in widths))
    for r in lines:
        show(r)


def report_counters(finals: dict[str, list[int]]) -> bool:
    """Prints one `counter TOOL: ...` line per tool; True if any round lost an update."""
    total = WORKERS * SECTIONS
    lost = False
    for label, values in finals.items():
        if any(v != total for v in values):
            lost = True
            print(f"counter {label}: FAIL -- LOST UPDATE, final values {values} "
                  f"(expected {total})")
        else:
            print(f"counter {label}: ok ({total} in every rep)")
    return lost
