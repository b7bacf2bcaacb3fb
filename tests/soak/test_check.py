#!/usr/bin/env python3
"""Tests for check.py (the soak's checker, next to this file): each invariant it checks can fail on
a synthetic log, and a clean log passes. Run: python3 tests/soak/test_check.py (or python3 -m
unittest tests/soak/test_check.py)."""

from __future__ import annotations

import contextlib
import io
import os
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check as soak_check  # noqa: E402

T = 1_796_000_000_000_000  # a base time, in microseconds


def stamp(us: int) -> str:
    """As bash's $EPOCHREALTIME writes it."""
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


class Log:
    """A synthetic soak log of one backend, built section by section, as a clean soak would
    write it unless a test bends it."""

    def __init__(self) -> None:
        self.sections: list[str] = []
        self.runs: list[dict] = []
        self.faults: list[dict] = []
        self.store: list[dict] = []
        self.value = 0
        self.max: int | None = None
        self.final: dict | None = None
        self.final_written = True  # False: the soak died before writing store.final.json
        # The chaos was configured with kill-lockrun only, and it killed a waiter before the
        # first section (a test about the chaos itself changes these).
        self.fault_kinds: list[str] | None = ["kill-lockrun"]
        self.kill_waiter("w9.0", t=T - 1_000_000)
        # ...and the faults ended before the first section (None: the log does not say).
        self.faults_ended: int | None = T - 500_000

    def op(self, op: str, run: str, token: int, t: int, new: int | None = None,
           force: bool | None = None) -> bool:
        ok = (self.max is None or token >= self.max) if force is None else force
        entry = {"seq": len(self.store) + 1, "t": t, "op": op, "run": run, "token": token,
                 "max": self.max, "ok": ok}
        if ok:
            self.max = token if self.max is None else max(self.max, token)
            if op == "W":
                entry["old"], entry["new"] = self.value, new
                self.value = new
        self.store.append(entry)
        return ok

    def section(self, run: str, token: int, start: int, length: int = 30_000,
                pid: int | None = None, pgid: int | None = None, status: int = 0,
                write: int | None = None, leftover: list[dict] | None = None,
                read: bool = True, complete: bool = True) -> None:
        """One lockrun run with its critical section: S, fenced read, fenced write, E (with
        read=False it was killed before its read: S only; with complete=False, after it)."""
        pid = pid or 10_000 + len(self.runs) * 10
        pgid = pgid or pid
        end = start + length
        self.sections.append(f"S {run} {pid} {pgid} {token} {stamp(start)}")
        read_ok = read and self.op("R", run, token, start + 1000)
        vread = self.value
        if read:
            self.sections.append(f"R {run} {token} {stamp(start + 1000)} "
                                 f"{'OK' if read_ok else 'REJ'} {vread}")
        if read and complete:
            if read_ok:
                new = vread + 1 if write is None else write
                ok = self.op("W", run, token, end - 1000, new)
                self.sections.append(f"E {run} {token} {stamp(start)} {stamp(end)} {vread} "
                                     f"{new} {'OK' if ok else 'REJ'}")
            else:
                self.sections.append(f"E {run} {token} {stamp(start)} {stamp(end)} - - NOREAD")
        self.runs.append({"run": run, "worker": 0, "pid": pid - 1, "spawn": start - 5000,
                          "exit": end + 2000, "status": status, "pgid": pgid,
                          "leftover": leftover or []})

    def fault(self, kind: str, run: str | None, t: int, holder: bool | str | None = None
              ) -> None:
        """A fault at time t; for a pause, `holder` says whether the lockrun held its lease."""
        self.faults.append({"t": t, "kind": kind, **({"run": run} if run else {}),
                            **({"holder": holder} if holder is not None else {})})

    def kill_waiter(self, run: str, t: int) -> None:
        """A kill-lockrun fault that hit a lockrun still waiting (it ran no section)."""
        self.runs.append({"run": run, "worker": 5, "pid": 9_000 + len(self.runs),
                          "spawn": t - 5000, "exit": t + 100, "status": 137, "pgid": None,
                          "leftover": []})
        self.fault("kill-lockrun", run, t=t)

    def write(self, d: Path) -> Path:
        meta = {"backend": "synthetic", "ttl_ms": 1000}
        if self.fault_kinds is not None:
            meta["fault_kinds"] = self.fault_kinds
        if self.faults_ended is not None:
            meta["faults_ended"] = self.faults_ended
        (d / "meta.json").write_text(json.dumps(meta))
        (d / "sections.w0.log").write_text("".join(s + "\n" for s in self.sections))
        for name, rows in (("runs", self.runs), ("faults", self.faults),
                           ("store", self.store)):
            (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        final = self.final if self.final is not None else {"value": self.value, "max": self.max}
        if self.final_written:
            (d / "store.final.json").write_text(json.dumps(final))
        return d


def clean_log() -> Log:
    """Five sections, one after another, tokens rising, every write accepted."""
    log = Log()
    for i in range(5):
        log.section(f"w{i % 2}.{i}", token=10 + i, start=T + i * 100_000)
    return log


class SoakCheckTest(unittest.TestCase):
    def check(self, log: Log) -> soak_check.Report:
        with tempfile.TemporaryDirectory() as tmp:
            rep = soak_check.check_dir(log.write(Path(tmp)))
        rep.print(io.StringIO())  # the report itself must not break on any finding
        return rep

    def assertViolation(self, rep: soak_check.Report, kind: str, *also: str) -> None:
        """Violations of these kinds and no other (so no test passes on an unrelated one)."""
        self.assertEqual(set(rep.violations), {kind, *also}, dict(rep.violations))

    def test_clean_log_passes(self) -> None:
        rep = self.check(clean_log())
        self.assertEqual(rep.total_violations, 0, dict(rep.violations))
        self.assertEqual(rep.counts["accepted writes"], 5)
        self.assertEqual(rep.counts["runs"], 6)

    def test_clean_log_with_expected_chaos_passes(self) -> None:
        # A paused holder (stopped past its lease) overlaps the next holder and carries a
        # lower token; its stale write is rejected. A lockrun is SIGKILLed and its watchdog
        # stops the command's tree. None of that breaks a promise.
        log = Log()
        log.section("w0.1", token=10, start=T)
        log.section("w1.1", token=11, start=T + 100_000, length=400_000, complete=False,
                    status=76)
        log.fault("pause-holder", "w1.1", t=T + 150_000, holder=True)  # after its read
        log.section("w2.1", token=12, start=T + 300_000)
        log.op("W", "w1.1", 11, T + 450_000, new=99)  # the stale write: rejected
        log.sections.append(f"E w1.1 11 {stamp(T + 100_000)} {stamp(T + 460_000)} 1 99 REJ")
        log.section("w3.1", token=13, start=T + 600_000, status=137)
        log.fault("kill-lockrun", "w3.1", t=T + 610_000)
        log.fault_kinds = ["kill-lockrun", "pause-holder"]
        rep = self.check(log)
        self.assertEqual(rep.total_violations, 0, dict(rep.violations))
        self.assertIn("1 (reads 0, writes 1)", rep.counts["stale ops rejected by the store"])

    # (a) a stale write accepted after a higher token
    def test_stale_write_accepted(self) -> None:
        log = clean_log()
        log.op("W", "w9.1", 3, T + 900_000, new=log.value + 1, force=True)
        self.assertViolation(self.check(log), "store-accepted-lower")

    # (b) a token that did not rise
    def test_token_did_not_rise(self) -> None:
        # Token 20, then 19 (as from a backend whose counter went back). The section with 20
        # was killed before it reached the store, so the store accepted 19 and every write:
        # only the token check itself can see the drop.
        log = Log()
        log.section("w0.1", token=20, start=T, read=False, status=137)
        log.fault("kill-lockrun", "w0.1", t=T + 500)
        log.section("w1.1", token=19, start=T + 100_000)
        rep = self.check(log)
        self.assertViolation(rep, "token-not-rising")
        self.assertEqual(rep.counts["accepted writes"], 1)
        self.assertIn("0 (reads 0, writes 0)", rep.counts["stale ops rejected by the store"])
        # The same drop that the store did see (it rejected 19): still a token-not-rising.
        log = Log()
        log.section("w0.1", token=20, start=T)
        log.section("w1.1", token=19, start=T + 100_000)
        rep = self.check(log)
        self.assertViolation(rep, "token-not-rising")
        self.assertIn("1 (reads 1, writes 0)", rep.counts["stale ops rejected by the store"])

    def test_token_reused(self) -> None:
        log = Log()
        log.section("w0.1", token=20, start=T)
        log.section("w1.1", token=20, start=T + 100_000)
        self.assertViolation(self.check(log), "token-reused", "token-not-rising")

    def test_token_drop_is_allowed_for_a_run_paused_as_holder_before(self) -> None:
        # w1.1 took token 19 and started its command, and was paused (lockrun and command)
        # before the command's first action; its lease ran out, w0.1 took token 20, and w1.1's
        # command woke up later: its section starts after w0.1's with a lower token.
        log = Log()
        log.fault("pause-holder", "w1.1", t=T - 50_000, holder=True)
        log.section("w0.1", token=20, start=T)
        log.section("w1.1", token=19, start=T + 100_000, complete=False, status=76)
        log.section("w2.1", token=21, start=T + 200_000)
        log.fault_kinds = ["pause-holder"]
        rep = self.check(log)
        self.assertEqual(rep.total_violations, 0, dict(rep.violations))

    def test_token_drop_on_a_run_paused_later(self) -> None:
        # The same drop, but w1.1 was paused only after both sections started: the pause
        # cannot explain it.
        log = Log()
        log.section("w0.1", token=20, start=T)
        log.section("w1.1", token=19, start=T + 100_000, complete=False, status=76)
        log.fault("pause-holder", "w1.1", t=T + 150_000, holder=True)
        log.section("w2.1", token=21, start=T + 200_000)
        self.assertViolation(self.check(log), "token-not-rising")

    def test_token_drop_on_a_run_paused_while_waiting(self) -> None:
        # A lockrun paused before it held the lease must not start its command on a stale one.
        log = Log()
        log.fault("stop-lockrun", "w1.1", t=T - 50_000, holder=False)
        log.section("w0.1", token=20, start=T)
        log.section("w1.1", token=19, start=T + 100_000, complete=False, status=76)
        self.assertViolation(self.check(log), "token-not-rising")

    # (c) overlapping sections of never-stopped runs
    def test_overlap(self) -> None:
        log = Log()
        log.section("w0.1", token=10, start=T, length=100_000)
        log.section("w1.1", token=11, start=T + 50_000, length=100_000)
        rep = self.check(log)
        self.assertViolation(rep, "overlap")

    def test_overlap_with_a_stopped_run_is_allowed(self) -> None:
        log = Log()
        log.section("w0.1", token=10, start=T, length=100_000)
        log.fault("stop-lockrun", "w0.1", t=T + 20_000, holder=True)
        log.section("w1.1", token=11, start=T + 50_000, length=100_000)
        rep = self.check(log)
        self.assertNotIn("overlap", rep.violations)

    def test_overlap_before_a_pause(self) -> None:
        # w1.1 ran beside w0.1 at T+1 s; w0.1 was paused only at T+5 s: not an excuse.
        log = Log()
        log.section("w0.1", token=10, start=T, length=6_000_000, complete=False)
        log.section("w1.1", token=11, start=T + 1_000_000, length=100_000)
        log.fault("pause-holder", "w0.1", t=T + 5_000_000, holder=True)
        log.sections.append(f"K w0.1 10 {stamp(T + 6_000_000)}")
        self.assertViolation(self.check(log), "overlap")

    def test_waiter_paused_then_running_beside_the_holder(self) -> None:
        # w1.1 was paused while it waited (holder false), then resumed, took the lease and ran
        # while w0.1 still held it.
        log = Log()
        log.section("w0.1", token=10, start=T, length=3_000_000)
        log.fault("stop-lockrun", "w1.1", t=T + 500_000, holder=False)
        log.section("w1.1", token=11, start=T + 2_000_000, length=50_000)
        self.assertViolation(self.check(log), "overlap")
        # The same log, had the pause found w1.1 holding: then it is the paused holder's case.
        log.faults[-1]["holder"] = True
        self.assertNotIn("overlap", self.check(log).violations)

    def test_overlap_of_an_unfinished_section(self) -> None:
        # A section killed after its read: its read reply is its last recorded action.
        log = Log()
        log.section("w0.1", token=10, start=T, complete=False, status=76)
        log.section("w1.1", token=11, start=T + 500)
        self.assertViolation(self.check(log), "overlap")

    def test_overlap_until_a_section_was_stopped(self) -> None:
        # A section stopped by lockrun (TERM) was alive until its K line: the next holder
        # started before that.
        log = Log()
        log.section("w0.1", token=10, start=T, complete=False, status=76)
        log.sections.append(f"K w0.1 10 {stamp(T + 400_000)}")
        log.section("w1.1", token=11, start=T + 300_000)
        self.assertViolation(self.check(log), "overlap")
        log = Log()
        log.section("w0.1", token=10, start=T, complete=False, status=76)
        log.sections.append(f"K w0.1 10 {stamp(T + 200_000)}")
        log.section("w1.1", token=11, start=T + 300_000)
        rep = self.check(log)
        self.assertEqual(rep.total_violations, 0, dict(rep.violations))

    # (d) a lost update
    def test_lost_update_in_journal(self) -> None:
        log = clean_log()
        log.section("w0.9", token=30, start=T + 900_000, write=log.value)  # wrote v, not v+1
        self.assertViolation(self.check(log), "lost-update")

    def test_lost_update_final_counter(self) -> None:
        log = clean_log()
        log.final = {"value": log.value - 1, "max": log.max}
        self.assertViolation(self.check(log), "lost-update")

    def test_acknowledged_write_missing_from_store(self) -> None:
        log = clean_log()
        log.sections.append(f"S w7.1 777 777 40 {stamp(T + 2_000_000)}")
        log.sections.append(f"E w7.1 40 {stamp(T + 2_000_000)} {stamp(T + 2_010_000)} 5 6 OK")
        self.assertViolation(self.check(log), "lost-update")

    def test_store_rejected_a_token_that_was_not_stale(self) -> None:
        # A store that rejects a current token would hide lost updates behind "stale" writes.
        log = clean_log()
        log.op("R", "w0.9", log.max + 1, T + 900_000, force=False)
        self.assertViolation(self.check(log), "store-bad-reject")
        log = clean_log()
        log.op("W", "w0.9", log.max, T + 900_000, new=log.value + 1, force=False)  # == max
        self.assertViolation(self.check(log), "store-bad-reject")

    def test_missing_final_state(self) -> None:
        # Without store.final.json the final counter cannot be compared: not a pass.
        log = clean_log()
        log.final_written = False
        rep = self.check(log)
        self.assertViolation(rep, "lost-update")
        self.assertIn("store.final.json is missing", rep.violations["lost-update"][0])

    # (e) a leftover process
    def test_leftover_process(self) -> None:
        log = clean_log()
        log.section("w0.9", token=30, start=T + 900_000, status=76,
                    leftover=[{"pid": 4242, "comm": "sleep", "state": "S", "child": False}])
        self.assertViolation(self.check(log), "leftover-process")

    def test_tree_outliving_a_killed_lockrun(self) -> None:
        for pid, child in [(4242, True), (4243, False)]:
            with self.subTest(child=child):
                log = clean_log()
                log.section("w0.9", token=30, start=T + 900_000, status=137, pid=4242,
                            leftover=[{"pid": pid, "comm": "sh", "state": "S", "child": child}])
                log.fault("kill-lockrun", "w0.9", t=T + 910_000)
                self.assertViolation(self.check(log), "leftover-process")

    def test_child_not_in_its_own_group(self) -> None:
        log = clean_log()
        log.section("w0.9", token=30, start=T + 900_000, pid=4242, pgid=4000)
        self.assertViolation(self.check(log), "not-own-group")

    def test_configured_fault_kind_never_injected(self) -> None:
        log = clean_log()
        log.fault_kinds = ["kill-lockrun", "pause-holder", "server-restart"]
        rep = self.check(log)
        self.assertViolation(rep, "fault-not-injected")
        self.assertEqual(len(rep.violations["fault-not-injected"]), 2)
        self.assertIn("no pause-holder fault", rep.violations["fault-not-injected"][0])
        self.assertIn("no server-restart fault", rep.violations["fault-not-injected"][1])
        # A backend without a server is configured without server faults: then it passes.
        log.fault("pause-holder", "w0.4", t=T + 420_000, holder=True)
        log.fault_kinds = ["kill-lockrun", "pause-holder"]
        rep = self.check(log)
        self.assertEqual(rep.total_violations, 0, dict(rep.violations))

    def test_chaos_that_did_nothing(self) -> None:
        log = clean_log()
        log.faults.clear()
        self.assertViolation(self.check(log), "fault-not-injected")

    def test_unknown_chaos_configuration(self) -> None:
        for kinds in (None, []):
            log = clean_log()
            log.fault_kinds = kinds
            self.assertViolation(self.check(log), "fault-not-injected")

    def test_empty_soak_is_not_a_pass(self) -> None:
        log = Log()
        log.runs.append({"run": "w0.1", "worker": 0, "pid": 1, "spawn": T, "exit": T + 1,
                         "status": 69, "pgid": None, "leftover": []})
        self.assertViolation(self.check(log), "nothing-ran")

    def test_a_lock_that_never_comes_back_after_the_faults_fails(self) -> None:
        log = clean_log()  # sections at T, T + 0.1 s, ... T + 0.4 s
        log.faults_ended = T + 400_000  # the last one started then: it counts
        self.assertEqual(self.check(log).total_violations, 0)
        log.faults_ended = T + 400_001
        self.assertViolation(self.check(log), "no-recovery")
        log.faults_ended = None
        self.assertViolation(self.check(log), "no-recovery")

    def test_a_section_cut_short_after_the_faults_is_no_recovery(self) -> None:
        log = clean_log()
        log.faults_ended = T + 450_000
        log.section("w0.9", token=20, start=T + 500_000, complete=False, status=143)
        self.assertViolation(self.check(log), "no-recovery")

    def test_command_line_exit_status(self) -> None:
        broken = clean_log()
        broken.final = {"value": 0, "max": 0}
        for log, status, text in ((clean_log(), 0, "violations: 0"),
                                  (broken, 1, "VIOLATION lost-update")):
            with tempfile.TemporaryDirectory() as tmp:
                log.write(Path(tmp))
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(soak_check.main([tmp]), status)
                self.assertIn(text, out.getvalue())


class ChaosScheduleTest(unittest.TestCase):
    """The soak's chaos loop: every kind configured for a backend fires in its first round,
    a kind that found nothing to hit is tried again, and then the weighted mix takes over."""

    def test_first_round_covers_every_kind(self) -> None:
        import random
        import threading

        import soak
        self.assertEqual([k for k, _ in soak.fault_mix(networked=False)],
                         ["pause-holder", "stop-lockrun", "kill-lockrun"])
        self.assertEqual({k for k, _ in soak.fault_mix(networked=True)},
                         {"pause-holder", "stop-lockrun", "kill-lockrun", "server-restart",
                          "server-pause"})
        # Redlock's masters: a minority, then a majority restarted, never all of them at once.
        self.assertEqual([k for k, _ in soak.fault_mix(networked=True, quorum=True)],
                         ["pause-holder", "stop-lockrun", "kill-lockrun", "minority-restart",
                          "majority-restart", "server-pause"])
        chaos = object.__new__(soak.Soak)  # only what chaos() uses
        chaos.fault_mix = soak.fault_mix(networked=True)
        chaos.ttl_ms = 2000
        chaos.rng = random.Random(7)
        chaos.calm = threading.Event()
        chaos.resumers = []
        chaos.errors = []
        tried: list[tuple[str, bool]] = []

        def inject(kind: str, ttl: float, patient: bool = False) -> str | None:
            tried.append((kind, patient))
            if len(tried) == 40:
                chaos.calm.set()
            if kind == "pause-holder" and len(tried) == 1:
                return "stop-lockrun"  # no holder yet: it paused a waiter instead
            if kind == "kill-lockrun" and len(tried) == 2:
                return None  # nothing running
            return kind

        chaos.inject = inject
        saved = soak.FIRST_ROUND_GAP, soak.GAP
        soak.FIRST_ROUND_GAP = soak.GAP = (0.0, 0.0)
        try:
            chaos.chaos()
        finally:
            soak.FIRST_ROUND_GAP, soak.GAP = saved
        first = [kind for kind, patient in tried if patient]
        self.assertEqual(first, ["pause-holder", "kill-lockrun", "server-restart",
                                 "server-pause", "pause-holder", "kill-lockrun"])
        self.assertTrue(all(patient for _, patient in tried[:len(first)]))
        rest = [kind for kind, _ in tried[len(first):]]
        self.assertEqual(len(rest), 40 - len(first))
        self.assertGreater(len(set(rest)), 1)  # the random mix, not a fixed kind


class GroupProbeTest(unittest.TestCase):
    """The soak's /proc probe (what feeds "leftover"): it must see a live group member, and
    must not count one that is already dying."""

    def test_live_and_killed_group(self) -> None:
        import os
        import signal
        import subprocess
        import time

        import soak
        p = subprocess.Popen(["sh", "-c", "sleep 30 & exec sleep 31"], start_new_session=True)
        try:
            deadline = time.monotonic() + 5
            while len(soak.group_survivors(p.pid, ["-"])) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            alive = soak.group_survivors(p.pid, ["-"])
            self.assertEqual(len(alive), 2, alive)
            self.assertEqual([a["child"] for a in alive if a["pid"] == p.pid], [True])
            os.killpg(p.pid, signal.SIGSTOP)  # stopped, so they cannot finish dying at once
            os.killpg(p.pid, signal.SIGKILL)
            self.assertEqual(soak.group_survivors(p.pid, ["-"]), [])
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()

    def test_a_run_without_a_group_is_found_by_its_run_and_log_only(self) -> None:
        """Two soaks side by side both have a run `w3.2`: a lockrun killed before its command
        started is looked for by its run id and its log, never by the other soak's."""
        import subprocess
        import sys
        import time

        import soak
        argv = [sys.executable, "-c", "import time; time.sleep(30)"]
        ours = subprocess.Popen([*argv, "w3.2", "/tmp/soak-a/sections.w3.log"])
        theirs = subprocess.Popen([*argv, "w3.2", "/tmp/soak-b/sections.w3.log"])
        try:
            marker = ["w3.2", "/tmp/soak-a/sections.w3.log"]
            deadline = time.monotonic() + 5
            while not soak.group_survivors(None, marker) and time.monotonic() < deadline:
                time.sleep(0.01)
            found = [f["pid"] for f in soak.group_survivors(None, marker)]
            self.assertEqual(found, [ours.pid])
        finally:
            for p in (ours, theirs):
                p.kill()
                p.wait()

    def test_a_lockruns_watchdog_is_not_its_command(self) -> None:
        """A waiter forks its watchdog too: the chaos must not take it for a holder's command."""
        import shutil
        import subprocess

        import soak
        with tempfile.TemporaryDirectory() as tmp:
            watchdog = Path(tmp) / "lockrun-watch"  # the name the kernel shows, as prctl sets
            shutil.copy(shutil.which("sleep"), watchdog)
            procs = [subprocess.Popen([str(watchdog), "30"]), subprocess.Popen(["sleep", "30"])]
            try:
                kids = soak.children_of(os.getpid())
                self.assertIn(procs[1].pid, kids)
                self.assertNotIn(procs[0].pid, kids)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    unittest.main()
