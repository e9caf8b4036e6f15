"""The winner handed on: its production checkpoint interval, and best_nanogpt.py / best_llmc.sh
beside best.yaml with what each target cannot express.

The interval comes from the winner's verified runs: the median save stall they measured and their
median steady step, through Young/Daly (train/core/handoff/interval.py) with
hydra.sweeper.cost.mtbf_h per device and the user's planned_checkpoint_every as the upper bound.
best.yaml pins it (sweeper/report/best_yaml.py) and the time-to-train report prices it
(sweeper/report/time_to_train.py). The handoff files are rendered by train/core/handoff/files.py
from the written best.yaml, so they say what the file says; the study's trials price each gap.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.launch.disk_full import full_disk
from sweeper.study.objective import save_stall_s, steady_step_time_s
from train.core.config_file import read_pinned_config
from train.core.handoff.files import TARGETS, handoff
from train.core.handoff.gaps import measured_trials
from train.core.handoff.gaps_text import report_lines
from train.core.handoff.interval import CheckpointPlan, checkpoint_plan, plan_line
from train.core.handoff.nanogpt import read_data_folder

log = logging.getLogger(__name__)


def plan_from_results(
    results: Sequence[Mapping[str, Any]],
    *,
    mtbf_h: float,
    planned_every: int = 0,
    planned_steps: int = 0,
) -> CheckpointPlan | None:
    """The production interval from a configuration's runs, or None when none measured a save.

    The save cost is the median over runs of each run's stall at its own interval; an async save's
    stall shrinks at a longer interval (the previous write has finished), so the plan is made
    again once with the stall at the first plan's interval."""
    runs = [
        r
        for r in results
        if r
        and (r.get("checkpoint_s") or r.get("checkpoint_save"))
        and (r.get("step_time_s") or {})
    ]
    if not runs:
        return None
    step_s = statistics.median(steady_step_time_s(r) for r in runs)
    world = int(((runs[0].get("config") or {}).get("runtime") or {}).get("nproc") or 1)

    def plan_at(every_of: Any) -> CheckpointPlan:
        save_s = statistics.median(save_stall_s(r, planned_every=every_of(r)) or 0.0 for r in runs)
        return checkpoint_plan(
            save_s=save_s,
            step_s=step_s,
            mtbf_h=mtbf_h,
            world=world,
            planned_every=planned_every,
            planned_steps=planned_steps,
        )

    first = plan_at(lambda r: int(r["config"]["checkpoint"]["every_steps"]))
    return plan_at(lambda r: first.every_steps)


def checkpoint_lines(plan: CheckpointPlan | None, *, every_steps: int) -> list[str]:
    """The report's checkpoint line: the plan's, or why best.yaml saves at `every_steps`."""
    if plan is not None:
        return [plan_line(plan)]
    if every_steps == 0:
        return [
            "checkpoints: best.yaml saves NONE (the trials saved none, so no save was "
            "measured): set checkpoint.every_steps before a long run, or search with "
            "checkpoint.every_steps in the space"
        ]
    return [
        f"checkpoints: best.yaml saves every {every_steps} steps (no save was measured to "
        f"choose an interval from)"
    ]


def handoff_report(
    best_path: Path, trials: Sequence[Any], plan: CheckpointPlan | None
) -> list[str]:
    """The report's lines after best.yaml is written: its checkpoint interval, and
    best_nanogpt.py and best_llmc.sh written beside it with what each cannot express. `trials`:
    the study's (Optuna FrozenTrials), which price each gap."""
    doc = read_pinned_config(best_path)
    lines = checkpoint_lines(plan, every_steps=int(doc["checkpoint"]["every_steps"]))
    try:
        return lines + write_handoffs(best_path, doc, trials)
    except (ValueError, KeyError, OSError) as exc:  # best.yaml stands; say what did not follow
        if full_disk(exc):
            raise  # the sweep's own write: it ends in the disk-full line, exit 1 (engine.py)
        log.error("best_nanogpt.py / best_llmc.sh not written: %s", exc)
        return lines


def write_handoffs(best_path: Path, doc: Mapping[str, Any], trials: Sequence[Any]) -> list[str]:
    """best_nanogpt.py and best_llmc.sh beside best.yaml (`doc`); the report's lines for them."""
    measured = measured_trials(trials)
    folder = read_data_folder(doc["data"]["dir"])
    lines = []
    for target in TARGETS:
        made = handoff(doc, target, trials=measured, folder=folder)
        path = Path(best_path).parent / made.file_name
        path.write_text(made.text)
        if path.suffix == ".sh":
            path.chmod(0o755)
        if made.refused is not None:
            lines.append(f"{made.file_name}: refuses to run: {'; '.join(made.lines)}")
            continue
        lines += report_lines(made.file_name, TARGETS[target].TARGET, made.lines)
    log.info("wrote %s", ", ".join(TARGETS[t].FILE_NAME for t in TARGETS))
    return lines
