#!/usr/bin/env python3
"""Hand-made mutants of the retry, staleness, truncation and fair-share code, run against their tests.

Each mutant replaces one snippet of one source file (the snippet must occur exactly once), runs the
mutant's tests with ``pytest -x -q``, and puts the file back byte for byte, also on Ctrl-C, SIGTERM or
SIGHUP; should the script itself be killed (SIGKILL) with a mutant applied, its next start puts the
original back first (a copy is kept in the temporary directory while a mutant is applied).
A mutant is *killed* when its tests fail, *survived* when they pass; ``equivalent`` in the table marks
mutants known to change no behaviour (they are expected to survive). Test files that do not exist are
left out of the command (so the script also runs on a checkout that predates the tests).

    python scripts/mutants.py                 # every mutant
    python scripts/mutants.py A5 S8           # only these
    python scripts/mutants.py --list          # the table, nothing run

Runs from the repository root with its ``src`` first on PYTHONPATH; exit 1 when a non-equivalent
mutant survives. While it runs, the checkout's sources are mutated: run nothing else from it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ATTEMPTS, STALENESS = "src/nimbus/runtime/attempts.py", "src/nimbus/stellaris/rules.py"
TRUNCATION, FAIRSHARE = "src/nimbus/algos/truncation.py", "src/nimbus/runtime/fairshare.py"
RUNTIME_TESTS = ("tests/unit/runtime/test_attempts.py", "tests/unit/runtime/test_local.py",
                 "tests/unit/runtime/test_affinity.py", "tests/unit/runtime/test_exactly_once.py")
STALENESS_TESTS = ("tests/unit/stellaris/test_staleness.py",)
TRUNCATION_TESTS = ("tests/unit/algos/test_is_truncation.py", "tests/unit/stellaris/test_stellaris_functions.py",
                    "tests/unit/stellaris/test_stellaris_impact.py")
FAIRSHARE_TESTS = ("tests/unit/runtime/test_fairshare.py",)
FAULTS, WORKER, ERRORS = "src/nimbus/runtime/faults.py", "src/nimbus/runtime/worker.py", "src/nimbus/errors.py"
SIMULATED, DURATIONS = "src/nimbus/runtime/simulated.py", "src/nimbus/runtime/simulated_durations.py"
TEAM_ROWS = "src/nimbus/marless/team_rows.py"
RETRY_TESTS = ("tests/unit/runtime/test_retry_taxonomy.py", "tests/unit/runtime/test_inline.py",
               "tests/unit/runtime/test_attempts.py")
SIMULATED_TESTS = ("tests/unit/runtime/test_simulated_runtime.py", "tests/unit/runtime/test_simulated_timers.py",
                   "tests/unit/runtime/test_simulated_bounds.py", "tests/unit/runtime/test_simulated_probe.py",
                   "tests/unit/runtime/test_simulated_shares.py", "tests/unit/runtime/test_retry_taxonomy.py",
                   "tests/unit/runtime/test_simulated_failures.py", "tests/unit/runtime/test_simulated_clock_edges.py")
TEAM_ROWS_TESTS = ("tests/unit/marless/test_team_rows_flags.py", "tests/unit/marless/test_value_hetero.py",
                   "tests/unit/marless/test_dead_agents.py",
                   "tests/unit/marless/test_marless_value_learner.py")
SAVED = Path(tempfile.gettempdir()) / f"nimbus-mutants-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    bug: str
    equivalent: str = ""   # why the mutant changes no behaviour, when it does not


MUTANTS: tuple[Mutant, ...] = (
    # ---- runtime/attempts.py: retry and exactly-once settlement (P1, P2, P3, P14) ----
    Mutant("A1", ATTEMPTS, "invocation.attempts <= invocation.spec.max_retries",
           "invocation.attempts < invocation.spec.max_retries", RUNTIME_TESTS, "one retry too few (< for <=)"),
    Mutant("A2", ATTEMPTS, "invocation.attempts <= invocation.spec.max_retries",
           "invocation.attempts <= invocation.spec.max_retries + 1", RUNTIME_TESTS, "one retry too many"),
    Mutant("A3", ATTEMPTS, '    if not error["retryable"]:\n        return False\n', "",
           RUNTIME_TESTS, "non-retryable errors retried (condition dropped)"),
    Mutant("A4", ATTEMPTS, "retry_allowed(invocation=invocation, error=error) and not closed:",
           "retry_allowed(invocation=invocation, error=error):",
           RUNTIME_TESTS, "retries queued after shutdown (condition dropped)",
           equivalent="both backends set _closed and cancel every attempt under one lock hold, so no attempt "
                      "ends through settle() with closed=True"),
    Mutant("A5", ATTEMPTS, "queue.appendleft(invocation)", "queue.append(invocation)", RUNTIME_TESTS,
           "a retry goes to the back of the queue, behind work admitted after it"),
    Mutant("A6", ATTEMPTS, "        invocation.tried.add(worker_id)\n", "", RUNTIME_TESTS,
           "a retry may land on the worker that just failed it"),
    Mutant("A7", ATTEMPTS, '        counts["failed"] += 1\n', "", RUNTIME_TESTS,
           "failed invocations not counted"),
    Mutant("A8", ATTEMPTS, '        self._record(worker, attempt=attempt, outcome="cancelled",'
                           " start_at=attempt.dispatched_at or now, end_at=now,\n"
                           "                     error_type=None)\n", "", RUNTIME_TESTS,
           "an attempt cancelled by shutdown is never billed (P14)"),
    Mutant("A9", ATTEMPTS, """        if action is None:
            return []
        self._release_body(attempt)
        return [action]""", """        self._release_body(attempt)
        if action is None:
            return []
        return [action]""", RUNTIME_TESTS, "the request body is freed before a retry that still needs it"),
    Mutant("A10", ATTEMPTS, """        for worker in idle:
            if worker.affinity is None:
                return worker
""", "", RUNTIME_TESTS, "a new key takes another key's warm worker although an unbound one is idle"),
    # ---- stellaris/rules.py: aggregation rules (P7, DESIGN.md §3) ----
    Mutant("S1", STALENESS, "return self.applied_per_slot[slot] - slowest <= self.bound",
           "return self.applied_per_slot[slot] - slowest < self.bound", STALENESS_TESTS, "SSP bound off by one"),
    Mutant("S2", STALENESS, "slowest = min(self.applied_per_slot[s] for s in range(self.learners))",
           "slowest = min(self.applied_per_slot.values() or [0])", STALENESS_TESTS,
           "SSP's slowest slot ignores slots that have applied nothing yet"),
    Mutant("S3", STALENESS, "return mean <= self.threshold", "return mean < self.threshold", STALENESS_TESTS,
           "queue aggregated only when mean staleness < β_k (not ≤)"),
    Mutant("S4", STALENESS, "return staleness > self.threshold * self.max_queue",
           "return staleness >= self.threshold * self.max_queue", STALENESS_TESTS,
           "a gradient exactly at β·max_queue refused"),
    Mutant("S5", STALENESS, "stalest = max(self.queue, key=lambda m: m.staleness)",
           "stalest = min(self.queue, key=lambda m: m.staleness)", STALENESS_TESTS,
           "a full queue sheds its freshest gradient"),
    Mutant("S6", STALENESS, "self.seed * self.decay ** self.round", "self.seed * self.decay ** (self.round - 1)",
           STALENESS_TESTS, "β_k decays from round 2 instead of round 1"),
    Mutant("S7", STALENESS, "return 1.0 if staleness <= 0 else", "return 1.0 if staleness <= 1 else",
           STALENESS_TESTS, "scale 1 also at staleness 1",
           equivalent="1/1^(1/v) = 1: the scale at staleness 1 is 1 either way"),
    Mutant("S8", STALENESS, "scale=staleness_scale(staleness=staleness, root=self.root)",
           "scale=staleness_scale(staleness=staleness, root=3)", STALENESS_TESTS,
           "the configured root v ignored (always 3)"),
    Mutant("S9", STALENESS, "else 2 * learners", "else learners", STALENESS_TESTS,
           "default max_queue = learners instead of 2 × learners"),
    Mutant("S10", STALENESS, "self._seed_from(stalenesses=self.round0 or [0])",
           "self._seed_from(stalenesses=self.round0)", STALENESS_TESTS,
           "a round 0 that saw no gradient crashes the seed (δmax of nothing)"),
    Mutant("S11", STALENESS, "if member.staleness != 0:", "if member.staleness > 1:", STALENESS_TESTS,
           "sync admits gradients one version old"),
    Mutant("S12", STALENESS, "return sum(stalenesses) / len(stalenesses) + 1.0",
           "return sum(stalenesses) / len(stalenesses)", STALENESS_TESTS, "stellaris_code seed without the + 1"),
    Mutant("S13", STALENESS, "return Verdict(aggregation=self._flush().aggregation, rejected=rejected)",
           "return Verdict(aggregation=self._flush().aggregation)", STALENESS_TESTS,
           "a gradient shed by the offer that aggregates is not reported (P7: counted)"),
    # ---- algos/truncation.py: Stellaris IS truncation (Eq. 2, DESIGN.md §3) ----
    Mutant("T1", TRUNCATION, "torch.minimum(ratio, peer_ratio_min).abs()", "torch.minimum(ratio, peer_ratio_min)",
           TRUNCATION_TESTS, "|·| of Eq. 2 dropped",
           equivalent="ratios are exponentials of log-probability differences, never negative"),
    Mutant("T2", TRUNCATION, "torch.minimum(ratio, peer_ratio_min).abs()", "peer_ratio_min.abs()",
           TRUNCATION_TESTS, "the paper form forgets r_self in the min"),
    Mutant("T3", TRUNCATION, "torch.clamp(peer_ratio_min, min=rho)", "torch.clamp(peer_ratio_min, max=rho)",
           TRUNCATION_TESTS, "the code form's max(min_i r_i, ρ) turned into a min"),
    Mutant("T4", TRUNCATION, """        factor = target / ratio
    return ratio * factor""", """    factor = target / ratio
    return ratio * factor""", TRUNCATION_TESTS, "the scale factor outside no_grad: R's gradient no longer ∝ R"),
    Mutant("T5", TRUNCATION, "(truncation.peer_log_prob_min - behaviour_log_prob).exp()",
           "(behaviour_log_prob - truncation.peer_log_prob_min).exp()", TRUNCATION_TESTS,
           "the peers' ratio inverted (wrong sign)"),
    Mutant("T6", TRUNCATION, "(truncated < ratio * (1 - 1e-6))", "(truncated <= ratio)", TRUNCATION_TESTS,
           "truncated_fraction counts untouched rows as truncated"),
    Mutant("T7", TRUNCATION, ".float().mean())", ".float().sum())", TRUNCATION_TESTS,
           "truncated_fraction is a count, not a fraction"),
    Mutant("T8", TRUNCATION, "    rho: float = 1.0\n", "    rho: float = 2.0\n", TRUNCATION_TESTS,
           "the default ρ changed from the paper's 1.0"),
    # ---- runtime/fairshare.py: fair share between workloads (ARTOS 3.3, 6.2) ----
    Mutant("F1", FAIRSHARE, "if load < best_load:", "if load <= best_load:", FAIRSHARE_TESTS,
           "ties go to the newest workload, not the one queued first"),
    Mutant("F2", FAIRSHARE, "busy_cpus.get(workload, 0.0) / weights.get(workload, 1.0)",
           "busy_cpus.get(workload, 0.0) * weights.get(workload, 1.0)", FAIRSHARE_TESTS,
           "weight multiplies the load instead of dividing it"),
    Mutant("F3", FAIRSHARE, "weights.get(workload, 1.0)", "weights[workload]", FAIRSHARE_TESTS,
           "a workload without a weight of its own (default 1) raises KeyError"),
    Mutant("F4", FAIRSHARE, """        if workload in seen:
            continue
""", "", FAIRSHARE_TESTS, "each queued entry compared, not each workload once",
           equivalent="a workload's later entries have the same load and `<` keeps its first (oldest) one"),
    Mutant("F5", FAIRSHARE, "if not weights or not queued:", "if not queued:", FAIRSHARE_TESTS,
           "without weights fair_pick is no longer FIFO"),
    Mutant("F6", FAIRSHARE, "        if slot.attempt is not None:\n            busy",
           "        if True:\n            busy", FAIRSHARE_TESTS, "idle slots counted as busy"),
    Mutant("F7", FAIRSHARE, "busy.get(slot.spec.workload, 0.0) + slot.spec.resources.cpus",
           "busy.get(slot.spec.workload, 0.0) + 1.0", FAIRSHARE_TESTS, "busy slots counted, not busy CPUs"),
    # ---- the retry taxonomy: runtime/attempts.py retry_allowed / failed, runtime/faults.py failure_kind ----
    Mutant("R1", ATTEMPTS, 'if error.get("kind") == APPLICATION:', 'if error.get("kind") == FATAL:', RETRY_TESTS,
           "the function's own exceptions retried up to max_retries, like a dead worker"),
    Mutant("R2", ATTEMPTS, "if len(invocation.code_errors) > invocation.spec.retry_exceptions:",
           "if len(invocation.code_errors) >= invocation.spec.retry_exceptions:", RETRY_TESTS,
           "one retry of the code's exceptions too few"),
    Mutant("R3", ATTEMPTS, "        invocation.code_errors.append(error)\n", "", RETRY_TESTS,
           "the code's exceptions never counted (retried forever within max_retries)"),
    Mutant("R4", ATTEMPTS, "shown = invocation.code_errors[0] if invocation.code_errors else error", "shown = error",
           RETRY_TESTS, "the failure shows the last attempt's error, not the first traceback"),
    Mutant("R5", ATTEMPTS, "shown = invocation.code_errors[0]", "shown = invocation.code_errors[-1]", RETRY_TESTS,
           "the failure shows the last of the code's exceptions"),
    Mutant("R6", ATTEMPTS, 'retried = f"retry_exceptions={invocation.spec.retry_exceptions}" if invocation.code_errors',
           'retried = f"retry_exceptions={invocation.spec.retry_exceptions}" if not invocation.code_errors',
           RETRY_TESTS, "the failure names the wrong bound (max_retries for the code's exception)"),
    Mutant("R7", FAULTS, "return INFRASTRUCTURE if marked else FATAL", "return FATAL if marked else INFRASTRUCTURE",
           RETRY_TESTS, "injected faults fatal, fatal errors retried"),
    Mutant("R8", FAULTS, "isinstance(exc, (KeyNotFound, TimeoutError, ConnectionError))",
           "isinstance(exc, (TimeoutError, ConnectionError))", RETRY_TESTS,
           "a key the store lost is the code's error: not retried"),
    Mutant("R9", FAULTS, 'type(exc).__module__.split(".")[0] == "ray"', 'type(exc).__module__.startswith("ray")',
           RETRY_TESTS, "any module named ray* (raylib, rayleigh) counts as Ray's own"),
    Mutant("R10", WORKER, '"retryable": kind != FATAL, "kind": kind', '"retryable": True, "kind": kind', RETRY_TESTS,
           "a worker reports fatal errors as retryable"),
    Mutant("R11", ERRORS, 'where = f"\\n  at {frames[-1]}"', 'where = f"\\n  at {frames[0]}"', RETRY_TESTS,
           "the summary names the outermost frame (the runtime's), not where the code raised"),
    # ---- the simulated runtime's clock and failure injection (runtime/simulated.py, simulated_durations.py) ----
    Mutant("M1", SIMULATED, "self._now = max(self._now, at_s)", "self._now = at_s", SIMULATED_TESTS,
           "the virtual clock may move back",
           equivalent="every caller passes a time >= now: events are scheduled at now + a non-negative delay or "
                      "at a worker's ready time (>= now), idle adds a non-negative wait, prewarm waits until "
                      "max(now, ready)"),
    Mutant("M2", SIMULATED, "self._schedule(at_s=self._now + max(0.0, delay_s)",
           "self._schedule(at_s=max(0.0, delay_s)",
           SIMULATED_TESTS, "a timer counts from time 0, not from now"),
    Mutant("M3", SIMULATED, "        if event.timer is not None and event.timer.cancelled:\n            return False\n",
           "", SIMULATED_TESTS, "a cancelled timer still fires"),
    Mutant("M4", SIMULATED, "if not self._events or self._events[0].at_s > at_s:\n                break",
           "if not self._events or self._events[0].at_s >= at_s:\n                break", SIMULATED_TESTS,
           "events due exactly at the wait's end are left for later"),
    Mutant("M5", SIMULATED, "self._set_now(self._now + max(0.0, seconds))", "self._set_now(max(0.0, seconds))",
           SIMULATED_TESTS, "an idle wait sets the clock to its length instead of adding it"),
    Mutant("M6", SIMULATED, "if draw.dies and draw.dies_after_s < spec.timeout_s:", "if draw.dies:", SIMULATED_TESTS,
           "a death drawn after the timeout ends the attempt as a death, past its timeout"),
    Mutant("M7", SIMULATED, '"retire": True, "after_s": draw.dies_after_s',
           '"retire": True, "after_s": draw.duration_s',
           SIMULATED_TESTS, "a dying attempt dies at its full duration, not at its drawn point"),
    Mutant("M8", SIMULATED, '"retire": True, "after_s": spec.timeout_s', '"retire": True, "after_s": draw.duration_s',
           SIMULATED_TESTS, "a timed-out attempt ends (and is billed) at its drawn duration, not at its timeout"),
    Mutant("M9", SIMULATED, "            invocation.queued_at = self._now   # retried", "            pass   # retried",
           SIMULATED_TESTS, "a retry keeps its first queued time (its queue wait counts the failed attempt)"),
    Mutant("M10", SIMULATED,
           '"error": report["error"],\n                    "after_s": min(draw.duration_s, spec.timeout_s)',
           '"error": report["error"],\n                    "after_s": draw.duration_s', SIMULATED_TESTS,
           "a raising attempt runs past its timeout"),
    Mutant("M11", DURATIONS, "after = duration * (u_die / model.failure_fraction) if dies else duration",
           "after = duration * u_die if dies else duration", SIMULATED_TESTS,
           "the death point is not uniform over the attempt (squeezed to its first failure_fraction)"),
    Mutant("M12", DURATIONS, "straggler = u_straggle < model.straggler_fraction",
           "straggler = u_die < model.straggler_fraction", SIMULATED_TESTS,
           "straggling and death drawn from one uniform (correlated)"),
    # ---- the team learner's joint rows (marless/team_rows.py align_team_rows) ----
    Mutant("V1", TEAM_ROWS, 'joint["rewards"] = np.sum(', 'joint["rewards"] = np.mean(', TEAM_ROWS_TESTS,
           "the team reward is the agents' mean, not their sum"),
    Mutant("V2", TEAM_ROWS, 'joint["terminated"] = np.all(', 'joint["terminated"] = np.any(', TEAM_ROWS_TESTS,
           "the team terminates when the first agent does"),
    Mutant("V3", TEAM_ROWS, 'joint["truncated"] = np.any(', 'joint["truncated"] = np.all(', TEAM_ROWS_TESTS,
           "the team is truncated only when every agent is"),
    Mutant("V4", TEAM_ROWS, "if len(set(counts.values())) != 1 or not own", "if not own", TEAM_ROWS_TESTS,
           "agents with unequal row counts are aligned anyway"),
    Mutant("V5", TEAM_ROWS, "rows.setdefault(ALIVE, np.ones(", "rows.setdefault(ALIVE, np.zeros(", TEAM_ROWS_TESTS,
           "rows written before the alive column count as dead"),
    Mutant("V6", TEAM_ROWS, '== agent_index)', '!= agent_index)', TEAM_ROWS_TESTS,
           "an agent's rows are every other agent's"),
    Mutant("V7", TEAM_ROWS, "first = own[all_agents[0]]", "first = own[all_agents[-1]]", TEAM_ROWS_TESTS,
           "the global state taken from the last agent's rows",
           equivalent="the actor writes the same global state into every agent's row of a step"),
    Mutant("V8", TEAM_ROWS, "for column in (*AGENT_COLUMNS, *(c for c in MASK_COLUMNS if c in rows)):",
           "for column in AGENT_COLUMNS:", TEAM_ROWS_TESTS, "action masks dropped from the joint rows"),
)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    status: str        # killed | survived | error
    killed_by: str
    seconds: float


class Interrupted(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise Interrupted(f"signal {signum}")


def _saved_copy(relative: str) -> Path:
    return SAVED / urllib.parse.quote(relative, safe="")


def recover() -> list[str]:
    """Put back every file a killed earlier run left mutated (from the copy it saved first)."""
    restored = []
    for copy in sorted(SAVED.glob("*")) if SAVED.is_dir() else []:
        relative = urllib.parse.unquote(copy.name)
        (ROOT / relative).write_bytes(copy.read_bytes())
        copy.unlink()
        restored.append(relative)
    return restored


def run_one(mutant: Mutant, *, timeout_s: float) -> Outcome:
    path = ROOT / mutant.path
    text = path.read_bytes()
    source = text.decode()
    count = source.count(mutant.original)
    if count != 1:
        return Outcome(mutant, "error", f"snippet found {count} times in {mutant.path}", 0.0)
    tests = [t for t in mutant.tests if (ROOT / t).exists()]
    if not tests:   # pytest without paths would run the whole suite
        return Outcome(mutant, "error", f"none of its tests exist: {mutant.tests}", 0.0)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    SAVED.mkdir(parents=True, exist_ok=True)
    saved = _saved_copy(mutant.path)
    saved.write_bytes(text)
    try:
        path.write_text(source.replace(mutant.original, mutant.mutated))
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Outcome(mutant, "killed", f"timeout after {timeout_s:g} s", time.monotonic() - start)
    finally:
        path.write_bytes(text)   # byte for byte, whatever happened
        saved.unlink()
    seconds = time.monotonic() - start
    if done.returncode == 0:
        return Outcome(mutant, "survived", "", seconds)
    if done.returncode == 1:
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.M)
        return Outcome(mutant, "killed", failed[0] if failed else "(see pytest output)", seconds)
    return Outcome(mutant, "error", f"pytest rc {done.returncode}: {done.stdout[-300:]}", seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutant names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the table and run nothing")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per mutant (a hang counts as killed)")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutants: {sorted(unknown)}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            found = (ROOT / m.path).read_text().count(m.original)
            print(f"{m.name:4} {m.path:34} {m.bug}{'  [equivalent]' if m.equivalent else ''}"
                  f"{'' if found == 1 else f'  [snippet found {found} times]'}")
        return 0
    for restored in recover():
        print(f"restored {restored}, left mutated by a killed earlier run", file=sys.stderr)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)
    outcomes: list[Outcome] = []
    try:
        for mutant in chosen:
            outcome = run_one(mutant, timeout_s=args.timeout_s)
            outcomes.append(outcome)
            note = " (equivalent: " + mutant.equivalent + ")" if mutant.equivalent else ""
            print(f"{mutant.name:4} {outcome.status:8} {outcome.seconds:6.1f}s  {mutant.bug}"
                  f"{'  ← ' + outcome.killed_by if outcome.killed_by else ''}{note}", flush=True)
    except (KeyboardInterrupt, Interrupted):
        print("interrupted; every file restored", file=sys.stderr)
        return 130
    bad = [o for o in outcomes if o.status == "error" or (o.status == "survived" and not o.mutant.equivalent)]
    killed = sum(o.status == "killed" for o in outcomes)
    print(f"{killed}/{len(outcomes)} killed; {len(bad)} non-equivalent survivors or errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
