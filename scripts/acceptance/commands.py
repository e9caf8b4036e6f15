"""The commands the stages run, built from the profile and the work folder (pure).

Every path is absolute and inside the work folder, so a stage's children write nothing elsewhere
and a state unpacked on another host finds its files where the study says they are.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from acceptance.plan import Point
from acceptance.profiles import Profile

REPO = Path(__file__).resolve().parents[2]
STUDY_PREFIX = "acceptance"
RACE_LINE = "] verifying "  # the sweep's log line that starts the verification race


def study_name(profile: Profile) -> str:
    return f"{STUDY_PREFIX}-{profile.name}"


def storage_url(work: Path) -> str:
    return f"sqlite:///{work / 'optuna.db'}"


def child_env() -> dict[str, str]:
    """The environment of every child: the repository first on PYTHONPATH (the GPU host's
    offline kit, /tmp/site, stays after it), output unbuffered so the log is live."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


def trainer_overrides(profile: Profile, work: Path) -> list[str]:
    """What every trial and the production run share: model, tokens per step, device, dtype,
    and the data and checkpoints inside the work folder."""
    return [
        f"model={profile.model}",
        f"batch.tokens_per_step={profile.tokens_per_step}",
        f"runtime.device={profile.device}",
        f"runtime.dtype={profile.dtype}",
        f"data.dir={work / 'data' / 'synthetic'}",
        f"checkpoint.dir={work / 'ckpt'}",
    ]


def sweep_argv(
    profile: Profile,
    work: Path,
    start: Point,
    *,
    max_wall_s: float = 0.0,
    plan: bool = False,
    extra: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """`python sweep.py -m ...`: the profile's search from `start`, its study and sweep folder
    pinned in `work` (so every sweep stage resumes the same study), MLflow off (the evidence file
    holds the numbers and the state stays small), the wall budget of what is left of the stage,
    then the run's `extra` overrides."""
    argv = [
        sys.executable,
        str(REPO / "sweep.py"),
        "-m",
        f"search={profile.search}",
        *trainer_overrides(profile, work),
        *start.overrides(profile),
        *profile.trial_overrides,
        f"hydra.sweep.dir={work / 'sweep'}",
        f"hydra.sweeper.storage={storage_url(work)}",
        f"hydra.sweeper.study_name={study_name(profile)}",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.seed=0",
        f"hydra.sweeper.budget.max_wall_s={max(0.0, round(max_wall_s))}",
        *profile.sweep_overrides,
        *extra,
    ]
    if plan:
        argv.append("hydra.sweeper.plan.enabled=true")
    return argv


def production_argv(profile: Profile, work: Path, best_yaml: Path) -> list[str]:
    """`python -m train --config-path <sweep dir> --config-name best train.max_steps=<few>`,
    logging every step (the first, with compile, is reported apart), no evaluation and no
    checkpoint (an XL save would take longer than the steps)."""
    return [
        sys.executable,
        "-m",
        "train",
        "--config-path",
        str(best_yaml.parent),
        "--config-name",
        best_yaml.stem,
        f"train.max_steps={profile.production_steps}",
        "train.log_every=1",
        "train.eval_every=0",
        "train.resume=never",
        "checkpoint.every_steps=0",
        f"hydra.run.dir={work / 'production'}",
    ]


def race_stop_reason(line: str, *, left_s: float, race_round_s: float) -> str:
    """Why the sweep stage stops at this output line: the race starts and its first round
    (about `race_round_s`; inf in a search-only stage) would not fit in the `left_s` seconds
    left ("" to go on)."""
    if RACE_LINE in line and race_round_s == float("inf"):
        return "the search is done and the race is the next sweep stage's"
    if RACE_LINE in line and left_s < race_round_s:
        return (
            f"the race starts with {left_s:.0f} s left in this stage, under the "
            f"~{race_round_s:.0f} s of its first round: the next sweep stage races"
        )
    return ""


def ddp_split(micro_batch: int, grad_accum: int, *, world: int) -> tuple[int, int]:
    """The per-process (micro_batch, grad_accum) of a one-process split on `world` processes at
    the same tokens per step (train/core/config_checks.py's check_batch: micro_batch x grad_accum
    x block x world). Each process keeps the micro-batch (the same kernels as the single-GPU
    figure) and takes 1/world of the accumulation; where that does not divide, the micro-batch is
    split."""
    if grad_accum % world == 0:
        return micro_batch, grad_accum // world
    if micro_batch % world == 0:
        return micro_batch // world, grad_accum
    raise ValueError(
        f"micro-batch {micro_batch} x grad_accum {grad_accum} does not split over {world} "
        f"processes at the same tokens per step"
    )


def ddp_argv(
    profile: Profile,
    work: Path,
    *,
    best_yaml: Path | None,
    start: Point | None,
    split: tuple[int, int],
) -> list[str]:
    """`python -m train.trial [--config-path <sweep dir> --config-name best] ... runtime.nproc=N`:
    one data-parallel trial of best.yaml's config (or, without one, the starting config) under
    torch's launcher, each process `split` = (micro_batch, grad_accum) so the tokens per step
    stay the profile's; the trial window of real full steps; result and run dir in work/ddp."""
    micro_batch, grad_accum = split
    if best_yaml is not None:
        base = ["--config-path", str(best_yaml.parent), "--config-name", best_yaml.stem]
    elif start is not None:
        base = [*trainer_overrides(profile, work), *start.overrides(profile)]
    else:
        raise ValueError("a data-parallel trial needs best.yaml or a starting config")
    return [
        sys.executable,
        "-m",
        "train.trial",
        *base,
        f"runtime.nproc={profile.ddp_nproc}",
        f"batch.micro_batch={micro_batch}",
        f"batch.grad_accum={grad_accum}",
        *profile.ddp_trial_overrides,
        f"checkpoint.dir={work / 'ckpt'}",
        f"trial.out={work / 'ddp' / 'trial.json'}",
        f"hydra.run.dir={work / 'ddp' / 'run'}",
    ]
