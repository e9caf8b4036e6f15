"""A sweep dir as `python -m train.explain --result <sweep dir>` reads it: the run to explain and
what the sweep measured of each fix.

The run is one of the trial best.yaml was exported from: the median of its race runs, whose median
is the verified figure the sweep's table shows (provenance.metrics.tokens_per_s), so the header, the
run's own line and the floor's step all say that one figure. The fixes are judged by the rule the
sweep's `next:` lines apply (train/core/evidence.py), on the study best.yaml names: a fix the
sweep measured no faster is left out. Torch-free.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from train.core.config_file import read_pinned_config
from train.core.diagnosis import Diagnosis
from train.core.evidence import (
    DEFAULT_NOISE_FLOOR,
    RACE_ATTR,
    Measured,
    judge_fix,
    search_runs,
    verified_runs,
)
from train.core.result import RESULT_NAME, read_result


@dataclass(frozen=True, kw_only=True)
class Exported:
    """The trial a sweep dir's best.yaml was exported from, as its provenance records it."""

    best: Path
    doc: dict
    trial: int | None  # provenance.sweep.trial
    runs: list[Path]  # its runs' result files: the search run, then the race runs
    verified: float | None  # provenance.metrics.tokens_per_s: the race's median, the sweep's table


def exported_runs(best: Path) -> Exported:
    """The trial best.yaml was exported from (provenance.sweep.trial), its runs' result files
    (provenance.sweep.runs: job folders, relative to best.yaml's folder) and its verified figure."""
    doc = read_pinned_config(best)
    prov = doc.get("provenance") or {}
    sweep, metrics = prov.get("sweep") or {}, prov.get("metrics") or {}
    trial = sweep.get("trial")
    runs = [best.parent / str(run) / RESULT_NAME for run in sweep.get("runs") or []]
    verified = metrics.get("tokens_per_s") if metrics.get("trial") == trial else None
    return Exported(
        best=best,
        doc=doc,
        trial=int(trial) if trial is not None else None,
        runs=runs,
        verified=verified,
    )


def pick_result(path: Path, *, say: Callable[[str], None] = print) -> Path:
    """A result file itself, or from a sweep dir: a run of the trial best.yaml was exported from
    (by its recorded trial number and job folders, never by matching configs; else, said in one
    line, all complete runs). Of the exported trial's race runs, whose median is the verified
    figure the sweep's table shows, the median run; else the median of its complete runs by
    tokens/s: a representative run, not the luckiest. Only the sweep's job results count, not
    files re-runs wrote there. `say` prints the line naming the choice."""
    if path.is_file():
        return path
    found = []
    for p in sorted(path.rglob(RESULT_NAME)):
        r = read_result(p)  # None for a file that is no trial result
        if r is not None and r["status"] == "complete":
            found.append((p, r))
    if not found:
        raise ValueError(
            f"no complete trial result ({RESULT_NAME} with schema_version) under {path}"
        )
    best = next(iter(sorted(path.rglob("best.yaml"))), None)
    if best is None:
        return _median_run(found)[0]
    ex = exported_runs(best)  # a broken file: one line naming it
    wanted = {q.resolve() for q in ex.runs}
    winners = [(p, r) for p, r in found if p.resolve() in wanted]
    # the recorded runs are the search run, then the race runs (sweeper/report/best_yaml.py)
    raced = {q.resolve() for q in ex.runs[1:]}
    race_runs = [(p, r) for p, r in winners if p.resolve() in raced]
    if ex.verified is not None and race_runs:
        chosen = _median_run(race_runs)
        folders = ", ".join(p.parent.name for p, _ in race_runs)
        which = (
            "its median run"
            if len(race_runs) % 2
            else f"the lower of its two middle runs, {chosen[1]['tokens_per_s']:,.0f} tokens/s"
        )
        say(
            f"exported trial {ex.trial} ({best.name}): verified {ex.verified:,.0f} tokens/s, "
            f"the median of its {len(race_runs)} race run(s) (real full steps; job folder(s) "
            f"{folders}), the figure of the sweep's table; explaining job folder "
            f"{chosen[0].parent.name}, {which}"
        )
        return chosen[0]
    if winners:
        say(
            f"exported trial {ex.trial} ({best.name}): the median of its {len(winners)} "
            f"complete run(s), job folder(s) {', '.join(p.parent.name for p, _ in winners)}"
        )
        return _median_run(winners)[0]
    why = (
        "records no trial number"
        if ex.trial is None
        else f"names no complete run of trial {ex.trial} under {path}"
    )
    print(
        f"note: {best} {why}: explaining the median of all {len(found)} complete runs, "
        "not the exported trial",
        file=sys.stderr,
    )
    return _median_run(found)[0]


def _median_run(runs: list[tuple[Path, dict]]) -> tuple[Path, dict]:
    """The median run by tokens/s; of an even number, the lower of the two middle ones."""
    ordered = sorted(runs, key=lambda pr: pr[1]["tokens_per_s"])
    return ordered[(len(ordered) - 1) // 2]


# a fix's changes -> what the sweep measured of them; None: no next step
Judge = Callable[[Mapping[str, Any]], Measured | None]


def sweep_evidence(path: Path, picked: Path) -> tuple[Judge | None, str]:
    """How the sweep judges a suggested fix (train/core/evidence.py `judge_fix`, the rule of
    the sweep's own `next:` lines) when `picked` is a run of the trial best.yaml was exported
    from; (None, why) where it cannot be judged (no sweep, another run, no study to read)."""
    best = next(iter(sorted(path.rglob("best.yaml"))), None) if path.is_dir() else None
    if best is None:
        return None, ""
    ex = exported_runs(best)
    if ex.trial is None or picked.resolve() not in {q.resolve() for q in ex.runs}:
        return None, ""
    from train.core.pruning import sweep_study

    try:
        trials, attrs = sweep_study(ex.doc)
    except ValueError as exc:
        return None, f"the fixes are not checked against the sweep's measurements: {exc}"
    race = attrs.get(RACE_ATTR) or {}
    results: dict[int, list[dict | None]] = {int(n): [] for n in race.get("contenders") or []}
    for stored in race.get("rounds") or []:
        for n in results:
            run = stored.get(str(n)) or {}
            job = run.get("job_dir")
            results[n].append(read_result(Path(job) / RESULT_NAME) if job else None)
    runs, verified = search_runs(trials), verified_runs(results)
    if ex.trial not in {r.number for r in runs}:
        return None, f"the fixes are not checked: trial {ex.trial} is not in the study"

    def judge(changes: Mapping[str, Any]) -> Measured | None:
        return judge_fix(
            changes, runs=runs, verified=verified, winner=ex.trial, noise_floor=DEFAULT_NOISE_FLOOR
        )

    return judge, ""


def judged(d: Diagnosis, judge: Judge) -> tuple[Diagnosis, int]:
    """`d` with each fix the sweep measured as no faster at the winner's other settings left out
    and each other fix carrying what the sweep measured of it; and how many were left out."""
    kept = []
    for fix in d.fixes:
        measured = judge(fix.changes)
        if measured is not None:
            kept.append(dataclasses.replace(fix, measured=measured))
    return dataclasses.replace(d, fixes=kept), len(d.fixes) - len(kept)
