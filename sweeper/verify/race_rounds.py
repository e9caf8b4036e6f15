"""The verification race run for real: rounds of fresh trial processes, stored as they finish.

The arithmetic lives in sweeper/verify/race_rules.py (pure); this module launches each round's jobs
in its shuffled order, logs every run to MLflow, records the round in the study (user attr `race`)
so a sweep killed during verification resumes the race instead of redoing it, and asks the judge
after each round whether the race is over.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.context import SweepContext
from sweeper.launch.batch import job_name
from sweeper.study.objective import direction, objective_value
from sweeper.tracking.protocol import TrialLog
from sweeper.verify.race_rules import Standing, judge, lead, round_order, speed
from sweeper.verify.race_stats import Comparison
from sweeper.verify.winner import Candidate
from train.core.disk_full import free_bytes
from train.core.evidence import RACE_ATTR
from train.core.result import RESULT_NAME, read_result

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RaceRecord:
    """Every round run so far: per contender, its objective value (None: failed or not run, as
    for a contender already dropped) and its complete result."""

    contenders: list[int]
    values: dict[int, list[float | None]]
    results: dict[int, list[dict | None]] = field(default_factory=dict)
    stored: list[dict[str, Any]] = field(default_factory=list)  # the attr's rounds, as saved
    run_s: float | None = None  # wall seconds per run in the last round this process ran

    @property
    def rounds(self) -> int:
        return len(self.stored)


def load_record(ctx: SweepContext, contenders: list[int]) -> RaceRecord:
    """The race stored in the study for these contenders (a resumed sweep), else a fresh one."""
    record = RaceRecord(
        contenders=contenders,
        values={n: [] for n in contenders},
        results={n: [] for n in contenders},
    )
    saved = ctx.study.user_attrs.get(RACE_ATTR) or {}
    if saved.get("contenders") != contenders:
        return record
    for stored_round in saved.get("rounds", []):
        for n in contenders:
            run = stored_round.get(str(n))
            result = None
            if run and run.get("job_dir"):
                result = read_result(Path(run["job_dir"]) / RESULT_NAME)
            value = run.get("value") if run else None
            record.values[n].append(value if result is not None else None)
            record.results[n].append(result if value is not None else None)
        record.stored.append(stored_round)
    if record.rounds:
        log.info("resuming the verification race after %d stored round(s)", record.rounds)
    return record


def standing(record: RaceRecord, ctx: SweepContext, *, out_of_budget: bool = False) -> Standing:
    """The judge's view of the record: speeds (higher is better) and who was dropped when."""
    speeds = _speeds(record, ctx)
    rules = ctx.settings.verify
    alive, dropped = list(record.contenders), {}
    # replay: a contender dropped after round r ran no later round
    for r in range(1, record.rounds + 1):
        if all(x is None for v in speeds.values() for x in v[:r]):
            continue  # every run so far failed: nothing to judge yet
        s = judge({n: v[:r] for n, v in speeds.items()}, alive=alive, dropped=dropped, rules=rules)
        alive, dropped = list(s.alive), dict(s.dropped)
        if s.finished:
            return s
    return judge(speeds, alive=alive, dropped=dropped, rules=rules, out_of_budget=out_of_budget)


def run_race(cands: dict[int, Candidate], ctx: SweepContext) -> tuple[RaceRecord, Standing]:
    """Race the candidates to a decision, the round limit or the wall budget."""
    contenders = list(cands)
    record = load_record(ctx, contenders)
    for n in contenders:  # a resumed race's stored values count for the verdict too
        cands[n].values.extend(v for v in record.values[n] if v is not None)
    rules = ctx.settings.verify
    seed = ctx.settings.seed if ctx.settings.seed >= 0 else 0
    while True:
        measured = any(v is not None for vals in record.values.values() for v in vals)
        current = standing(record, ctx) if measured else None
        if current is not None and current.finished:
            return record, current
        alive = list(current.alive) if current else contenders
        if record.rounds >= rules.last_round or (
            record.rounds > 0
            and not ctx.budget.verify_round_fits(ctx.study, len(alive), run_s=record.run_s)
        ):
            if record.rounds < rules.last_round:
                log.warning(
                    "wall budget (%.0f s): the race stops after %d round(s)",
                    ctx.settings.budget.max_wall_s,
                    record.rounds,
                )
            if current is None:
                return record, _nothing(contenders, record.rounds)
            return record, standing(record, ctx, out_of_budget=True)
        _run_round(
            record, cands, ctx, order=round_order(alive, seed=seed, round_index=record.rounds)
        )


def _nothing(contenders: list[int], rounds: int) -> Standing:
    """Every run failed: no leader (verification reports that nothing was verified)."""
    return Standing(
        leader=-1,
        alive=(),
        dropped={},
        against_leader={},
        rounds=rounds,
        finished=True,
        outcome=None,
    )


def _run_round(
    record: RaceRecord, cands: dict[int, Candidate], ctx: SweepContext, *, order: list[int]
) -> None:
    """One round: the survivors in `order`, each once in a fresh process; stored in the study."""
    r = record.rounds
    log.info("race round %d: %s", r + 1, ", ".join(f"trial {n}" for n in order))
    started = time.monotonic()
    # JobLauncher.launch runs them one after another, whatever n_jobs: contenders timed side by
    # side would share the machine and measure each other
    names = [job_name(n, repeat=r + 1) for n in order]  # the folders linked as trial-N-verify-rR
    outs = dict(
        zip(order, ctx.jobs.launch([cands[n].overrides for n in order], names=names), strict=True)
    )
    record.run_s = (time.monotonic() - started) / max(1, len(order))
    stored: dict[str, Any] = {}
    for n in record.contenders:
        out = outs.get(n)
        value, result = None, None
        if out is not None:
            params = cands[n].point.as_dict()
            ctx.tracker.log_trial(TrialLog.of_job(n, out, params, kind="verify", repeat=r + 1))
            if out["state"] == "complete":
                result = out["result"]
                value = objective_value(result, ctx.objective)
                cands[n].values.append(value)
            else:
                log.warning(
                    "verification run of trial %d: %s (%s)", n, out["state"], out.get("reason")
                )
            stored[str(n)] = {"value": value, "job_dir": out.get("job_dir")}
        record.values[n].append(value)
        record.results[n].append(result)
    record.stored.append(stored)
    ctx.study.set_user_attr(RACE_ATTR, {"contenders": record.contenders, "rounds": record.stored})


# a race's folder with less room than this is full: its runs failed for want of space
FULL_DISK_BYTES = 1 << 20


def stop_if_disk_full(record: RaceRecord) -> None:
    """Where every run of the race failed and the disk holding their folders is full, raise
    the full disk (OSError ENOSPC naming the folders' parent, the sweep dir), which the sweep
    ends with in one line (sweeper/engine.py): the runs failed for want of room, not for their
    configs. Returns otherwise."""
    folders = {
        Path(run["job_dir"]).parent
        for stored_round in record.stored
        for run in stored_round.values()
        if run and run.get("job_dir")
    }
    for folder in sorted(folders):
        free = free_bytes(folder)
        if free is not None and free < FULL_DISK_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))


def lead_over_start(
    record: RaceRecord, ctx: SweepContext, *, winner: int, start: int | None
) -> Comparison | None:
    """The winner's speed over the starting config's on the rounds both ran, with its interval;
    None when there is no start, the start won, or they share fewer than two rounds."""
    if start is None or start == winner or start not in record.values:
        return None
    speeds = _speeds(record, ctx)
    return lead(speeds[winner], speeds[start], rules=ctx.settings.verify)


def _speeds(record: RaceRecord, ctx: SweepContext) -> dict[int, list[float | None]]:
    """Each contender's runs as speeds, higher is better (a failed or skipped run is None)."""
    maximize = direction(ctx.objective) == "maximize"
    return {
        n: [None if v is None else speed(v, maximize=maximize) for v in vals]
        for n, vals in record.values.items()
    }
