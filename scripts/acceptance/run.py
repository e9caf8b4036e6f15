"""One stage, start to end: take the state handed in, run the stage's body against its deadline,
record its wall time and outcome, and hand the state on.

    --state in -> unpack to the work folder it came from (or start fresh: an empty work folder)
    -> the stage body (acceptance/stages.py) until its deadline, less the packing margin
    -> evidence.json updated (work folder and --out) -> state.tar.gz packed into --out

A body that raises still leaves a packed state and the evidence (the outcome `failed`, its
message as the note), so a run is never lost to one bad stage: run the stage again with the same
state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from acceptance.evidence import FILE_NAME, load_evidence, new_evidence, save_evidence
from acceptance.folder import write_evidence_folder
from acceptance.profiles import Profile
from acceptance.stages import BODIES, StageContext
from acceptance.state import STATE_VERSION, Manifest, pack_state, unpack_state

log = logging.getLogger(__name__)

STATE_NAME = "state.tar.gz"
GOES_ON = ("done", "cut", "stopped", "skipped")  # outcomes after which the next stage can run


@dataclass(frozen=True, kw_only=True)
class StageReport:
    stage: str
    run: int  # 1 for the stage's first run in this acceptance run, 2 for its second, ...
    outcome: str
    note: str
    wall_s: float
    deadline_s: float
    state: Path
    evidence: Path
    state_bytes: int


def open_work(
    *, profile: Profile, state: Path | None, work: Path, sweep_overrides: list[str]
) -> tuple[Path, dict, list[str]]:
    """(work folder, evidence, stages done) from the state, or a fresh start in `work`."""
    if state is not None:
        manifest = unpack_state(state, profile=profile.name)
        folder = Path(manifest.work)
        evidence = load_evidence(folder / FILE_NAME)
        if sweep_overrides and sweep_overrides != evidence.get("sweep_overrides"):
            raise ValueError(
                f"--sweep-override is fixed at a run's first stage (this run has "
                f"{evidence.get('sweep_overrides')}); a resumed study keeps its command"
            )
        return folder, evidence, list(manifest.stages_done)
    if work.exists() and any(work.iterdir()):
        raise ValueError(
            f"--work {work} is not empty: pass --state <state.tar.gz> to go on from an earlier "
            f"stage, or name an empty --work to start a new run"
        )
    work.mkdir(parents=True, exist_ok=True)
    evidence = new_evidence(profile=profile)
    evidence["sweep_overrides"] = list(sweep_overrides)
    return work.resolve(), evidence, []


def run_stage(
    stage: str,
    *,
    profile: Profile,
    state: Path | None,
    work: Path,
    out: Path,
    deadline_s: float | None = None,
    sweep_overrides: list[str] | tuple[str, ...] = (),
    clock: Callable[[], float] = time.monotonic,
) -> StageReport:
    """Run `stage` and hand its state to `out` (`clock` times the deadline: tests pass a fake)."""
    started, started_real, wall_clock = clock(), time.monotonic(), datetime.now(UTC)
    folder, evidence, done = open_work(
        profile=profile, state=state, work=work, sweep_overrides=list(sweep_overrides)
    )
    run = 1 + sum(1 for s in evidence["stages"] if s["stage"] == stage)
    budget = deadline_s if deadline_s is not None else profile.budget_for(stage, repeat=run - 1)
    out.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(
        profile=profile,
        work=folder,
        evidence=evidence,
        logs=out,
        deadline=started + budget - profile.pack_margin_s,
        clock=clock,
        run=run,
    )
    log.info(
        "stage %s (run %d) of the %s profile in %s: %.0f s, children stopped at %.0f s",
        stage,
        run,
        profile.name,
        folder,
        budget,
        budget - profile.pack_margin_s,
    )
    try:
        result = BODIES[stage](ctx)
        outcome, note = result.outcome, result.note
    except Exception as exc:  # recorded and packed: the next try starts from this state
        log.exception("stage %s failed", stage)
        outcome, note = "failed", f"{type(exc).__name__}: {exc}"
    wall_s = time.monotonic() - started_real  # real seconds, whatever `clock` says
    evidence["stages"].append(
        {
            "stage": stage,
            "run": run,
            "outcome": outcome,
            "note": note,
            "started": wall_clock.isoformat(timespec="seconds"),
            "wall_s": round(wall_s, 1),
            "deadline_s": budget,
        }
    )
    evidence["wall_s_total"] = round(sum(s["wall_s"] for s in evidence["stages"]), 1)
    if profile.evidence_folder and stage == "production":  # the lease's second command
        laid = write_evidence_folder(ctx)
        evidence["evidence_folder"] = str(laid.relative_to(out))
        log.info(
            "evidence folder: %s (copy %s into the repository root to keep it)", laid, out / "docs"
        )
    save_evidence(evidence, folder / FILE_NAME)
    save_evidence(evidence, out / FILE_NAME)
    if outcome == "done":
        done.append(stage)
    manifest = Manifest(
        version=STATE_VERSION,
        profile=profile.name,
        work=str(folder),
        stages_done=done,
        packed_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    size = pack_state(folder, out / STATE_NAME, manifest=manifest)
    return StageReport(
        stage=stage,
        run=run,
        outcome=outcome,
        note=note,
        wall_s=wall_s,
        deadline_s=budget,
        state=out / STATE_NAME,
        evidence=out / FILE_NAME,
        state_bytes=size,
    )
