"""A data-parallel trial's launching process (runtime.nproc > 1): start the ranks, then report.

The composed config is pinned to `launch_config.yaml` beside the result, and torch's launcher
(train/run/torchrun.py) runs `python -m train.trial --pinned` on it as `nproc` ranks. Rank 0 writes
the trial's result; every other rank writes its own result next to it only to say why it failed
(`trial.rank1.json`). When a rank fails, the launcher stops the others; the trial's result then
names the rank that ended it and its own reason (a peer's "connection closed" is only an echo).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from train.core.config import Config
from train.core.result import Failure, ResultError, TrialResult, load_result, write_result
from train.core.result_build import build_result
from train.run.loop import check_data
from train.run.torchrun import LAUNCH_CONFIG, RankExit, launch, root_failure

log = logging.getLogger(__name__)

TIMEOUT_HINT = (
    "a collective waited longer than ddp.timeout_s={timeout:g} s: another rank hung or died "
    "(raise ddp.timeout_s only if a step can really take that long)"
)


def rank_out(out: Path, rank: int) -> Path:
    """Where rank `rank` > 0 writes its own result (trial.rank1.json); rank 0 writes `out`."""
    return out if rank == 0 else out.with_name(f"{out.stem}.rank{rank}{out.suffix}")


def pin_for_ranks(dcfg: DictConfig, out: Path) -> Path:
    """The composed config, resolved, with the result path made absolute: what every rank runs."""
    doc = OmegaConf.to_container(dcfg, resolve=True)
    assert isinstance(doc, dict)
    doc["trial"]["out"] = str(out)
    path = out.parent / f"{LAUNCH_CONFIG}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(doc), path)
    return path


def _own_failure(path: Path) -> Failure | None:
    try:
        result = load_result(path)
    except ResultError:
        return None
    return result["failure"] if result["status"] == "failed" else None


def failure_of(root: RankExit, *, world: int, out: Path, timeout_s: float) -> Failure:
    """The trial's failure: the root rank, how it exited, and its own reason when it wrote one."""
    own = _own_failure(rank_out(out, root.rank))
    head = root.text(world)
    if own is None:
        return Failure(kind="crash", message=f"{head}: it wrote no reason (killed or crashed hard)")
    text = own["message"].lower()
    if "timed out" in text or "timeout" in text:  # the rank waited on a peer that never came
        hint = TIMEOUT_HINT.format(timeout=timeout_s)
        return Failure(kind="timeout", message=f"{head}: {hint}: {own['message']}")
    return Failure(kind=own["kind"], message=f"{head}: {own['message']}")


def run_launched(cfg: Config, dcfg: DictConfig, *, out: Path) -> TrialResult:
    """Run the trial as `cfg.runtime.nproc` DDP ranks; the result rank 0 wrote, or a failure that
    names the rank that ended the trial and why."""
    started = time.time()
    world = cfg.runtime.nproc
    for rank in range(world):  # a stale result must never stand in for this run's
        rank_out(out, rank).unlink(missing_ok=True)
    check_data(cfg)  # made once here, not by every rank at once
    config = pin_for_ranks(dcfg, out)
    failures = launch(
        nproc=world, argv=["-m", "train.trial", "--pinned", str(config)], run_name="trial"
    )
    if not failures:
        try:
            return load_result(out)
        except ResultError as exc:
            failure = Failure(kind="crash", message=f"every rank exited 0 but rank 0's {exc}")
    else:
        written = {
            rank: rank_out(out, rank).stat().st_mtime
            for rank in failures
            if rank_out(out, rank).exists()
        }
        root = root_failure(failures, written)
        failure = failure_of(root, world=world, out=out, timeout_s=cfg.ddp.timeout_s)
    log.error("data-parallel trial failed: %s", failure["message"].splitlines()[0])
    result = build_result(
        cfg=cfg,
        session=None,
        raw=None,
        failure=failure,
        fingerprint={},
        wall_s=time.time() - started,
    )
    write_result(result, out)
    return result
