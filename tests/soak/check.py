#!/usr/bin/env python3
"""Checker for the lockrun chaos soak (soak.py, next to it): proves the invariants on a saved log.

    python3 tests/soak/check.py LOGDIR      # LOGDIR: one backend's log dir, or a dir of them

Exit status 0 only if no check found a violation (1 otherwise, 2 if the log is unusable).

The log directory of one backend holds (all times are CLOCK_REALTIME microseconds on one host):

  meta.json          {"backend": ..., "url": ..., "ttl_ms": granted TTL, "workers": W,
                      "fault_kinds": the kinds the chaos loop was configured to inject,
                      "faults_ended": when the chaos loop had stopped and undone every fault
                      (the workers then ran on for a while without faults), ...}
  sections.*.log     written by the critical sections themselves (one file per worker), lines
                       S RUN PID PGID TOKEN T0             first action: who am I, my token
                       R RUN TOKEN T STATUS VALUE          after the fenced read's reply
                       E RUN TOKEN T0 T1 VREAD VWRITTEN WSTATUS   last action (WSTATUS OK/REJ)
                       K RUN TOKEN T                       TERM received (lockrun stopping it)
                     T values as bash's $EPOCHREALTIME ("sec.usec") or plain integer microseconds
  runs.jsonl         one object per lockrun run, written by the worker loop:
                       {"run", "worker", "pid", "spawn", "exit", "status", "pgid",
                        "leftover": [{"pid", "comm", "state", "child": bool}, ...]}
                     (status in shell convention: 128+N when killed by signal N; "leftover" are
                     processes of the child's group still alive, and not dying, the moment the
                     lockrun was reaped, or for a killed lockrun once its watchdog had a moment)
  faults.jsonl       one object per fault injected: {"t", "kind", "run"?, ...}; kinds
                     "stop-lockrun" and "pause-holder" (t: when the lockrun was SIGSTOPped,
                     "holder": whether it held the lease then: true, false or "unknown") mark
                     the run as paused from t on; "kill-lockrun" and "shutdown-kill" as SIGKILLed
  store.jsonl        the fenced store's journal, in the store's own order:
                       {"seq", "t", "op": "R"|"W", "run", "token", "ok", "max", "old", "new"}
                     ("max" is the highest token accepted before this op; "old"/"new" the
                     value before/after an accepted write)
  store.final.json   {"value", "max"}: the store's state at the end

A paused holder is the one thing allowed to break exclusion and token order (contract, invariant
1: that is what fencing tokens are for), and only from the moment it was paused: a run's pause
window opens at a stop-lockrun or pause-holder fault that found it holding the lease (the fault
says so, or the run's section had already started) and lasts to the run's end. A lockrun paused
while it was still waiting gets no window: once resumed, it may only start its command on a
lease that is still valid (invariant 9).

The invariants (each breach is counted as a violation, by kind):

  token-not-rising   in start order, a section carries a token not above an earlier section's
                     token, unless its own run was paused as a holder before that earlier
                     section started (it took the lease first and its command began late)
  token-reused       two runs got the same token
  store-accepted-lower  the store accepted a token below one it had accepted before
  store-bad-reject   the store rejected a token that was not below its maximum (harness bug)
  overlap            two sections overlapped in time (a section lasts from its S to its last
                     recorded action), unless the overlap began inside the pause window of one
                     of the two runs
  lost-update        an accepted write did not write (value before) + 1, the final counter differs
                     from the number of accepted writes, or a write the section saw acknowledged
                     is not in the store's journal
  leftover-process   a process of the child's group was alive when its lockrun had exited on its
                     own, or a moment (the watchdog's sweep) after its lockrun was killed:
                     invariant 8, nothing outlives a dead lockrun, grandchildren included
  not-own-group      the child was not the leader of its own process group
  nothing-ran        no critical section completed (the soak proved nothing)
  no-recovery        sections completed, but none that started after the faults ended (or the
                     log does not say when they did): the lock did not come back once the
                     faults were over, which is a liveness failure no fault excuses
  fault-not-injected a fault kind configured for this backend (meta.json "fault_kinds") was
                     never injected, or the log does not say which kinds were configured: a
                     chaos loop that did nothing proves nothing either
"""

from __future__ import annotations

import bisect
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

STOP_KINDS = {"stop-lockrun", "pause-holder"}
KILL_KINDS = {"kill-lockrun", "shutdown-kill"}
SHOW = 5  # violations printed per kind


def usec(text: str) -> int:
    """A time stamp: bash's $EPOCHREALTIME ("1764500000.123456") or integer microseconds."""
    if "." in text:
        sec, frac = text.split(".", 1)
        return int(sec) * 1_000_000 + int((frac + "000000")[:6])
    return int(text)


@dataclass
class Section:
    run: str
    pid: int = 0
    pgid: int = 0
    token: int = 0
    t0: int = 0
    last: int = 0  # time of the last recorded action
    read_status: str | None = None
    ended: bool = False
    vread: int | None = None
    vwritten: int | None = None
    wstatus: str | None = None
    killed: bool = False  # the section recorded a TERM (lockrun stopping it)


@dataclass
class Report:
    """What the checker found on one backend's log."""

    name: str
    counts: dict = field(default_factory=dict)
    exits: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    info: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def violate(self, kind: str, text: str) -> None:
        self.violations[kind].append(text)

    @property
    def total_violations(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def print(self, out=None) -> None:
        out = out or sys.stdout
        p = lambda *a: print(*a, file=out)  # noqa: E731
        p(f"== {self.name}")
        for key, value in self.counts.items():
            p(f"  {key}: {value}")
        p("  exits by status: " + (", ".join(f"{s}: {n}" for s, n in sorted(
            self.exits.items(), key=lambda kv: str(kv[0]))) or "none"))
        p("  faults injected: " + (", ".join(f"{k}: {n}" for k, n in sorted(
            self.faults.items())) or "none") + f" (total {sum(self.faults.values())})")
        for kind, items in sorted(self.info.items()):
            p(f"  note: {kind}: {len(items)}")
            for text in items[:SHOW]:
                p(f"      {text}")
        p(f"  violations: {self.total_violations}")
        for kind, items in sorted(self.violations.items()):
            p(f"  !!! VIOLATION {kind}: {len(items)}")
            for text in items[:SHOW]:
                p(f"      {text}")
            if len(items) > SHOW:
                p(f"      ... and {len(items) - SHOW} more")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line torn by the harness' own death: not evidence of anything
    return out


def read_sections(logdir: Path, rep: Report) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    for path in sorted(logdir.glob("sections*.log")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            f = line.split()
            if not f:
                continue
            try:
                if f[0] == "S" and len(f) >= 6:
                    s = sections.setdefault(f[1], Section(f[1]))
                    s.pid, s.pgid, s.token = int(f[2]), int(f[3]), int(f[4])
                    s.t0 = usec(f[5])
                    s.last = max(s.last, s.t0)
                elif f[0] == "R" and len(f) >= 5:
                    s = sections.setdefault(f[1], Section(f[1]))
                    s.last = max(s.last, usec(f[3]))
                    s.read_status = f[4]
                    if len(f) >= 6 and f[5].lstrip("-").isdigit():
                        s.vread = int(f[5])
                elif f[0] == "K" and len(f) >= 4:
                    s = sections.setdefault(f[1], Section(f[1]))
                    s.last = max(s.last, usec(f[3]))
                    s.killed = True
                elif f[0] == "E" and len(f) >= 8:
                    s = sections.setdefault(f[1], Section(f[1]))
                    s.last = max(s.last, usec(f[4]))
                    s.ended = True
                    s.vread = int(f[5]) if f[5].lstrip("-").isdigit() else None
                    s.vwritten = int(f[6]) if f[6].lstrip("-").isdigit() else None
                    s.wstatus = f[7]
            except ValueError:
                # A section killed mid-line leaves a torn line; it is not a claim of anything.
                rep.info["torn section log lines"].append(f"{path.name}:{lineno}: {line!r}")
    # A section whose S line was lost (torn) cannot be placed in time: leave it out.
    return {r: s for r, s in sections.items() if s.t0}


def pause_windows(faults: list[dict], sections: dict[str, Section],
                  rep: Report) -> dict[str, int]:
    """When each run's pause window opens: the earliest stop-lockrun or pause-holder fault that
    found the run holding its lease. A fault that found it waiting opens nothing."""
    opens: dict[str, int] = {}
    for f in faults:
        run = f.get("run")
        if f.get("kind") not in STOP_KINDS or not run:
            continue
        t = int(f["t"])
        s = sections.get(run)
        holder = f.get("holder", False)
        if holder == "unknown":
            rep.info["pauses that could not tell holder from waiter (counted as holder)"] \
                .append(f"run {run} paused at {t}")
        elif not holder and (s is None or t < s.t0):
            rep.info["lockruns paused while waiting (no exemption)"].append(
                f"run {run} paused at {t}")
            continue
        opens[run] = min(t, opens.get(run, t))
    return opens


def check_dir(logdir: Path) -> Report:
    logdir = Path(logdir)
    meta = json.loads((logdir / "meta.json").read_text()) if (logdir / "meta.json").exists() \
        else {}
    rep = Report(meta.get("backend", logdir.name))
    runs = read_jsonl(logdir / "runs.jsonl")
    faults = read_jsonl(logdir / "faults.jsonl")
    store = read_jsonl(logdir / "store.jsonl")
    final_path = logdir / "store.final.json"
    final = json.loads(final_path.read_text()) if final_path.exists() else None
    sections = read_sections(logdir, rep)

    stopped = {f["run"] for f in faults if f.get("kind") in STOP_KINDS and f.get("run")}
    paused = pause_windows(faults, sections, rep)
    killed = {f["run"] for f in faults if f.get("kind") in KILL_KINDS and f.get("run")}
    for f in faults:
        rep.faults[f.get("kind", "?")] += 1
    for r in runs:
        rep.exits[r.get("status")] += 1

    # ---- tokens: unique, and rising in start order ----------------------------------------------
    by_token: dict[int, list[str]] = defaultdict(list)
    for s in sections.values():
        by_token[s.token].append(s.run)
    for token, owners in by_token.items():
        if len(owners) > 1:
            rep.violate("token-reused", f"token {token} given to runs {sorted(owners)}")
    ordered = sorted(sections.values(), key=lambda s: (s.t0, s.run))
    # A section must carry a token above every section that started before it. The one excuse:
    # its own run took the lease first and was paused as a holder before the other started.
    starts = [s.t0 for s in ordered]
    top: list[Section] = []  # top[i]: the highest-token section among ordered[:i + 1]
    for s in ordered:
        top.append(s if not top or s.token > top[-1].token else top[-1])
    for i, s in enumerate(ordered):
        if i == 0:
            continue
        best = top[i - 1]
        if best.token < s.token:
            continue
        limit = min(i, bisect.bisect_left(starts, paused[s.run])) if s.run in paused else i
        rival = top[limit - 1] if limit > 0 else None
        if rival is not None and rival.token >= s.token:
            rep.violate("token-not-rising",
                        f"run {s.run} started at {s.t0} with token {s.token}, after run "
                        f"{rival.run} (started {rival.t0}) had token {rival.token}"
                        + (f"; run {s.run} was paused only at {paused[s.run]}"
                           if s.run in paused else ""))
        else:
            rep.info["token drops by a run paused as a holder (allowed)"].append(
                f"run {s.run} token {s.token} (paused at {paused[s.run]}) started after run "
                f"{best.run} token {best.token}")

    # ---- the fenced store ---------------------------------------------------------------------
    highest: int | None = None
    value = 0
    accepted_writes = 0
    rejected = Counter()
    accepted_by_run: dict[str, dict] = {}
    for op in sorted(store, key=lambda o: o["seq"]):
        token = int(op["token"])
        if op["ok"]:
            if highest is not None and token < highest:
                rep.violate("store-accepted-lower",
                            f"store op #{op['seq']} {op['op']} by run {op.get('run')} accepted "
                            f"token {token} after accepting {highest}")
            highest = token if highest is None else max(highest, token)
            if op["op"] == "W":
                accepted_writes += 1
                accepted_by_run[op.get("run")] = op
                if int(op["new"]) != value + 1:
                    rep.violate("lost-update",
                                f"store op #{op['seq']}: run {op.get('run')} (token {token}) "
                                f"wrote {op['new']} over {value}: an update was lost")
                value = int(op["new"])
        else:
            rejected[op["op"]] += 1
            if highest is None or token >= highest:
                rep.violate("store-bad-reject",
                            f"store op #{op['seq']} rejected token {token} with max {highest}")
    if final is not None:
        if int(final["value"]) != accepted_writes:
            rep.violate("lost-update",
                        f"final counter {final['value']} != {accepted_writes} accepted writes")
        if int(final["value"]) != value:
            rep.violate("lost-update",
                        f"final counter {final['value']} != {value}, the journal's last value")
    for s in sections.values():
        if s.ended and s.wstatus == "OK":
            op = accepted_by_run.get(s.run)
            if op is None or int(op["token"]) != s.token or int(op["new"]) != s.vwritten:
                rep.violate("lost-update",
                            f"run {s.run} saw its write of {s.vwritten} (token {s.token}) "
                            f"acknowledged, but the store's journal has {op}")

    # ---- overlap, outside the pause windows --------------------------------------------------
    def in_window(run: str, t: int) -> bool:
        return run in paused and t >= paused[run]

    active: list[Section] = []  # earlier sections, by start, that last past the current start
    for s in ordered:
        active = [a for a in active if a.last > s.t0]
        for a in active:
            # The overlap of a and s begins at s.t0: excused only inside a pause window.
            if in_window(a.run, s.t0) or in_window(s.run, s.t0):
                rep.info["overlaps inside a pause window (allowed)"].append(
                    f"run {s.run} (token {s.token}) beside run {a.run} (token {a.token})")
                continue
            why = "; ".join(f"run {r} was paused only at {paused[r]}"
                            for r in (a.run, s.run) if r in paused)
            rep.violate("overlap",
                        f"run {s.run} (token {s.token}) started at {s.t0}, "
                        f"{(a.last - s.t0) / 1000:.3f} ms before run {a.run} "
                        f"(token {a.token}, started {a.t0}) made its last recorded "
                        f"action at {a.last}" + (f" ({why})" if why else ""))
        active.append(s)

    # ---- process groups -----------------------------------------------------------------------
    for s in sections.values():
        if s.pid and s.pgid != s.pid:
            rep.violate("not-own-group", f"run {s.run}: child pid {s.pid} in group {s.pgid}")
    for r in runs:
        for proc in r.get("leftover") or []:
            text = (f"run {r['run']} (lockrun pid {r.get('pid')}, exit {r.get('status')}): "
                    f"pid {proc.get('pid')} ({proc.get('comm')}, state {proc.get('state')}) "
                    f"of group {r.get('pgid')} still alive after lockrun exited")
            rep.violate("leftover-process", text)

    # ---- the chaos loop did its job ------------------------------------------------------------
    configured = meta.get("fault_kinds")
    if not isinstance(configured, list) or not configured:
        rep.violate("fault-not-injected",
                    f"meta.json names no fault kinds ({configured!r}): cannot tell whether the "
                    f"chaos loop injected anything")
    else:
        for kind in configured:
            if rep.faults[kind] == 0:
                rep.violate("fault-not-injected",
                            f"no {kind} fault was injected (configured: {', '.join(configured)})")

    completed = sum(1 for s in sections.values() if s.ended)
    ended = meta.get("faults_ended")
    after = sorted(s.t0 for s in sections.values() if s.ended and isinstance(ended, int)
                   and s.t0 >= ended)
    if completed == 0:
        rep.violate("nothing-ran", "no critical section completed")
    elif not isinstance(ended, int):
        rep.violate("no-recovery", f"meta.json does not say when the faults ended "
                                   f"({ended!r}): cannot tell whether the lock came back")
    elif not after:
        rep.violate("no-recovery", "no critical section that started after the faults ended "
                                   "completed: the lock did not come back")
    rep.counts = {
        "runs": len(runs),
        "sections started / completed": f"{len(sections)} / {completed}",
        "runs stopped (SIGSTOP; as holders) / SIGKILLed":
            f"{len(stopped)} ({len(paused)}) / {len(killed)}",
        "sections stopped by TERM": sum(1 for s in sections.values() if s.killed),
        "store ops": len(store),
        "accepted writes": accepted_writes,
        "final counter": final["value"] if final is not None else "(missing)",
        "stale ops rejected by the store": (f"{sum(rejected.values())} (reads {rejected['R']}, "
                                            f"writes {rejected['W']})"),
        "after the faults: first section started":
            f"{(after[0] - ended) / 1e6:.2f} s later" if after else "never",
    }
    if final is None:
        rep.violate("lost-update", "store.final.json is missing: the final counter is unknown")
    return rep


def logdirs(root: Path) -> list[Path]:
    root = Path(root)
    if (root / "meta.json").exists() or (root / "runs.jsonl").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "meta.json").exists())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check.py LOGDIR", file=sys.stderr)
        return 2
    dirs = logdirs(Path(argv[0]))
    if not dirs:
        print(f"soak check: no soak log under {argv[0]}", file=sys.stderr)
        return 2
    total = 0
    for d in dirs:
        rep = check_dir(d)
        rep.print()
        total += rep.total_violations
    print(f"soak check: {total} violation(s)")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
