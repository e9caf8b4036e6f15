"""The sweep's request, checked before any trial starts: the trainer's base config, the device, the
settings it implies, and the search space after the constraints and the memory model.

Everything that can be wrong with a request is found here: an unknown objective, an infeasible
space, a choice no runnable point has. The plan (`hydra.sweeper.plan.enabled=true`) prints what
this finds and stops.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from sweeper.launch import kinds
from sweeper.launch.cache_folder import sweep_cache
from sweeper.launch.job import prestart_zygote
from sweeper.numbers import fmt_secs
from sweeper.plan.build import SWEEP_OVERHEAD_S, startup_lines
from sweeper.plan.gpu_slots import assign_slots, visible_devices, visible_gpus
from sweeper.plan.plan_device import DeviceFacts, device_facts, probe_device
from sweeper.plan.preflight import check_micro_batches, check_trainer_keys
from sweeper.plan.prior import prior_sampler_trials
from sweeper.plan.scan import Scan, drop_dead_values, scan
from sweeper.settings import SweepSettings, plan_software, replace_in
from sweeper.space.constraints import SpaceContext, cpus_here
from sweeper.space.overrides import hydra_quote
from sweeper.space.search_space import SearchSpace, baseline_params, parse_space
from sweeper.study.budget import wall_budget_error
from sweeper.study.objective import ObjectiveConfig
from sweeper.study.optuna_study import LISTED_SAMPLERS
from train.core.cost import resolve_planned_steps
from train.core.keys import BLOCK_SIZE, MODEL_NAME, NPROC, TOKENS_PER_STEP, TRIAL_SAVE_RECORD
from train.core.progress import HEARTBEAT_S
from train.core.save_record import RECORD_NAME as SAVE_RECORD_NAME

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A checked request: what the rest of the sweep starts from."""

    settings: SweepSettings  # with the CPU wall cap applied
    objective: ObjectiveConfig
    fixed: list[str] = field(hash=False)  # command-line overrides every trial gets
    base: dict[str, Any] = field(hash=False)  # the flat trainer config (dotted keys)
    facts: dict | None = field(hash=False)  # what the device probe said, if it ran
    device: DeviceFacts
    ctx: SpaceContext
    space: SearchSpace
    found: Scan
    # CUDA_VISIBLE_DEVICES of each parallel trial slot (sweeper/plan/gpu_slots.py); empty: none
    gpu_slots: list[str] = field(default_factory=list, hash=False)


# The device's facts that a SpaceContext holds under the same names.
SHARED_DEVICE_FIELDS = (
    "cpu_count",
    "device_type",
    "bf16_supported",
    "cuda_capability",
    "flash_attention_impls",
    "torchao",
)


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """A nested dict as one level of dotted keys."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def split_arguments(arguments: list[str]) -> tuple[list[str], dict[str, str]]:
    """Command-line overrides: fixed ones go to every trial; sweep ones (a,b / choice() /
    range()) join the search space."""
    parser = OverridesParser.create()
    fixed, sweeps = [], {}
    for ov in parser.parse_overrides(arguments):
        if ov.is_sweep_override():
            sweeps[ov.get_key_element()] = ov.input_line.split("=", 1)[1]
        else:
            fixed.append(ov.input_line)
    return fixed, sweeps


def save_record_of(space: Mapping[str, Any], sweep_dir: Path) -> str:
    """trial.save_record for a sweep of `space`: the sweep folder's record of each checkpoint
    target's save (train/core/save_record.py) where no checkpoint.* knob is searched; '' where
    one is (each trial's window saves: the knob's effect is what is searched)."""
    if any(str(key).startswith("checkpoint.") for key in space):
        return ""
    return str(Path(sweep_dir).resolve() / SAVE_RECORD_NAME)


def prepare(
    settings: SweepSettings,
    arguments: list[str],
    *,
    hydra_context: Any,
    config: DictConfig,
    sweep_dir: Path,
    fork_trials: bool,
    launcher: str = "BasicLauncher",
) -> Prepared:
    """Check the request: the base config, the device (probed in a child process), the space,
    the wall budget. `fork_trials` then starts the trial zygote, once all of it passed.
    `launcher` is the Hydra launcher's class name: a local one runs parallel trials on GPU slots
    of this machine."""
    s = settings
    fixed, cli_space = split_arguments(arguments)
    base = _trainer_base(hydra_context, config, fixed)
    check_trainer_keys(base, list({**s.space, **cli_space}))
    check_micro_batches({**s.space, **cli_space}, base)
    s = _with_run_length(s, base)
    objective = ObjectiveConfig(
        name=s.objective,
        planned_steps=s.cost.planned_steps,
        planned_checkpoint_every=s.cost.planned_checkpoint_every,
    )
    # one compile cache for every trial and race run, in their environment from the start
    cache = sweep_cache(s.compile_cache, storage=s.storage, sweep_dir=sweep_dir)
    fixed = [*fixed, *cache.overrides()]
    facts, device = _sweep_device(s, config, launcher)
    s = _device_settings(s, device, model=base[MODEL_NAME])
    # no checkpoint knob searched: the save is measured once per target, not in every trial
    save_record = save_record_of({**s.space, **cli_space}, sweep_dir)
    if save_record:
        fixed.append(f"{TRIAL_SAVE_RECORD}={hydra_quote(save_record)}")
        base = {**base, TRIAL_SAVE_RECORD: save_record}
    nproc = int(base.get(NPROC) or 1)
    slots = gpu_slots_for(facts, device, n_jobs=s.n_jobs, nproc=nproc, launcher=launcher)
    ctx = _space_context(base, device, world_size=nproc)
    space = parse_space({**s.space, **cli_space}, ctx)
    space.require_feasible(ctx)
    # the memory model's drops, choices no runnable point has, the trials' limits
    found = scan(
        space, ctx, timeout_s=s.budget.trial_timeout_s, stall_timeout_s=s.budget.stall_timeout_s
    )
    space = drop_dead_values(space, found)
    for line in startup_lines(found, ctx):
        log.info(line)
    check_wall_budget(s, found, capped=settings.budget.max_wall_s <= 0)
    check_trial_limits(s, found)
    if s.sampler == "prior":  # refused here where it has no point, before any process starts
        start = baseline_params(space, base, device_type=ctx.device_type, bf16=ctx.bf16_supported)
        prior_sampler_trials(space, ctx, start=start, enabled=s.prior, n_trials=s.n_trials)
    if fork_trials and not s.plan.enabled:
        # trials run in this process's main thread: fork them from a preloaded zygote, whose
        # imports overlap the study's and the MLflow run's start. Only now: a request refused
        # above (the space, the wall budget) starts no process and leaves no zygote.log.
        sweep_dir.mkdir(parents=True, exist_ok=True)
        prestart_zygote(sweep_dir, compile_cache=cache.setting)
    return Prepared(
        settings=s,
        objective=objective,
        fixed=fixed,
        base=base,
        facts=facts,
        device=device,
        ctx=ctx,
        space=space,
        found=found,
        gpu_slots=slots,
    )


def _trainer_base(hydra_context: Any, config: DictConfig, fixed: list[str]) -> dict[str, Any]:
    """The trainer's config under the fixed overrides, flat (dotted keys), without Hydra's own
    section."""
    base_cfg = hydra_context.config_loader.load_sweep_config(
        master_config=config, sweep_overrides=fixed
    )
    trainer = OmegaConf.to_container(base_cfg, resolve=False)
    trainer.pop("hydra", None)
    return flatten(trainer)


def _with_run_length(s: SweepSettings, base: dict[str, Any]) -> SweepSettings:
    """One run length: planned_steps, else planned_tokens over the config's tokens per step."""
    return replace_in(
        s,
        **{
            "cost.planned_steps": resolve_planned_steps(
                planned_steps=s.cost.planned_steps,
                planned_tokens=s.cost.planned_tokens,
                tokens_per_step=base[TOKENS_PER_STEP],
            )
        },
    )


def _sweep_device(
    s: SweepSettings, config: DictConfig, launcher: str
) -> tuple[dict | None, DeviceFacts]:
    """What the device probe said (None where it did not run) and the device the sweep plans for.
    A plan for a named device needs no probe (and no torch) here, and neither do trials that run
    on other machines (preflight.check_launcher: their device is named)."""
    probe_here = not (s.plan.device and (s.plan.enabled or not kinds.local(launcher)))
    facts = probe_device() if probe_here else None
    device = device_facts(
        facts,
        plan_device=s.plan.device,
        cpu_count=launcher_cpus(config, launcher) or cpus_here(),
        software=plan_software(s.plan.software),
    )
    if device.software_line():
        log.info("%s", device.software_line())
    return facts, device


def _space_context(base: dict[str, Any], device: DeviceFacts, *, world_size: int) -> SpaceContext:
    """What the constraints and the memory model know of a point's surroundings."""
    return SpaceContext(
        tokens_per_step=base[TOKENS_PER_STEP],
        block_size=base[BLOCK_SIZE],
        world_size=world_size,
        base=base,
        device_name=device.name,
        device_memory_gib=device.memory_gib,
        **{name: getattr(device, name) for name in SHARED_DEVICE_FIELDS},
    )


def check_wall_budget(s: SweepSettings, found: Scan, *, capped: bool) -> None:
    """A wall budget shorter than the quickest predicted trial is refused before the study opens.
    The CPU sweep's automatic cap (`capped`) is only warned about: the prediction takes a
    conservative CPU rate, and a user who set no budget has not asked for one to be enforced."""
    quickest = min((c.wall_min_s for c in found.classes if c.points), default=None)
    error = wall_budget_error(
        max_wall_s=s.budget.max_wall_s,
        setting="budget.cpu_max_wall_s" if capped else "budget.max_wall_s",
        quickest_s=quickest,
        overhead_s=SWEEP_OVERHEAD_S,
    )
    if error is None:
        return
    if not capped:
        raise ValueError(error)
    log.warning("%s; the first trial runs past it, and the search ends after it", error)


def check_trial_limits(s: SweepSettings, found: Scan) -> None:
    """Trial limits the user set that no trial of the space can meet are refused before any
    process starts (else every trial fails the same way, found only at the end): a hard limit
    below the quickest trial's expected wall, a stall limit no longer than the gap between a
    healthy trial's heartbeats."""
    quickest = min((c.wall_min_s for c in found.classes if c.points), default=None)
    timeout_s, stall_s = s.budget.trial_timeout_s, s.budget.stall_timeout_s
    if timeout_s > 0 and quickest is not None and timeout_s < quickest:
        raise ValueError(
            f"hydra.sweeper.budget.trial_timeout_s={timeout_s:g} is shorter than the quickest "
            f"trial of this space is expected to take ({fmt_secs(quickest)}: set-up, compile, "
            f"warm-up and the measured window): every trial would time out; set it above "
            f"{math.ceil(quickest)}, or 0 for limits from each trial's prediction"
        )
    if 0 < stall_s <= HEARTBEAT_S:
        raise ValueError(
            f"hydra.sweeper.budget.stall_timeout_s={stall_s:g} is not longer than the gap "
            f"between a healthy trial's heartbeats ({HEARTBEAT_S:g} s during set-up, compile and "
            f"warm-up): every trial would be killed as stalled; set more than {HEARTBEAT_S:g}, 0 "
            f"(automatic) or -1 (no stall check)"
        )


def launcher_cpus(config: DictConfig, launcher: str) -> int | None:
    """The CPUs each trial gets from a cluster launcher (submitit's `cpus_per_task`), for the
    data-worker knobs; None on this machine (its own count is used) or where it does not say."""
    if kinds.local(launcher):
        return None
    value = OmegaConf.select(config, "hydra.launcher.cpus_per_task", default=None)
    return int(value) if value else None


def gpu_slots_for(
    facts: dict | None, device: DeviceFacts, *, n_jobs: int, nproc: int, launcher: str
) -> list[str]:
    """Each parallel trial's CUDA_VISIBLE_DEVICES, from the GPUs the probe saw: a sweep whose
    n_jobs x runtime.nproc exceeds them is refused here, before any trial. Nothing is pinned on
    a CPU, for a plan without a probe, or under a remote launcher (Slurm gives each task its
    GPUs)."""
    if device.device_type != "cuda" and n_jobs > 1 and kinds.local(launcher):
        # scripts/bench/workers.py on 2 cores: two trials of 2 torch threads each ran their steps
        # up to 37x slower side by side (spinning thread pools); one thread each, 0.98x
        log.warning(
            "hydra.sweeper.n_jobs=%d on a CPU: the trials share this machine's %d cores and "
            "measure each other; give each at most %d torch thread(s) (runtime.threads) and "
            "data worker(s), or run n_jobs=1",
            n_jobs,
            device.cpu_count,
            max(1, device.cpu_count // n_jobs),
        )
    if device.device_type != "cuda" or facts is None or not kinds.local(launcher):
        return []
    gpus = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), int(facts.get("device_count") or 0))
    slots = [visible_devices(s) for s in assign_slots(gpus=gpus, n_jobs=n_jobs, nproc=nproc)]
    if n_jobs > 1 or nproc > 1:
        log.info("GPU slots (CUDA_VISIBLE_DEVICES per running trial): %s", ", ".join(slots))
    return slots


def gpu_settings(s: SweepSettings) -> SweepSettings:
    """n_trials, verify.top_k and the race's rounds from gpu.n_trials, gpu.verify_top_k and
    gpu.verify_rounds where they are > 0 (a grid and the prior sampler keep their own count);
    the space's checkpoint.* knobs left out where gpu.search_checkpoints is false (priced from
    one measured save)."""
    changes: dict[str, int] = {}
    if s.gpu.n_trials > 0 and s.sampler not in LISTED_SAMPLERS:
        changes["n_trials"] = s.gpu.n_trials
    if s.gpu.verify_top_k > 0:
        changes["verify.top_k"] = s.gpu.verify_top_k
    if s.gpu.verify_rounds > 0:
        changes["verify.repeats"] = changes["verify.max_rounds"] = s.gpu.verify_rounds
    if changes:
        log.info(
            "on a GPU: %s (hydra.sweeper.gpu.n_trials, gpu.verify_top_k, gpu.verify_rounds)",
            ", ".join(f"{k}={v}" for k, v in changes.items()),
        )
    priced = [k for k in s.space if str(k).startswith("checkpoint.")]
    if priced and not s.gpu.search_checkpoints:
        changes["space"] = {k: v for k, v in s.space.items() if k not in priced}
        log.info(
            "on a GPU: %s priced, not searched (hydra.sweeper.gpu.search_checkpoints=false): no "
            "trial saves inside its window; the starting config's save is measured once and "
            "priced at the production interval",
            ", ".join(priced),
        )
    return replace_in(s, **changes) if changes else s


def _device_settings(s: SweepSettings, device: DeviceFacts, *, model: str) -> SweepSettings:
    """The settings for this device: a CPU sweep without a wall budget gets
    budget.cpu_max_wall_s; a GPU sweep gets the gpu.* trial and race counts where the search sets
    them."""
    if device.device_type != "cpu":
        log.info("sweeping on %s (%s) with model=%s", device.name, device.source, model)
        return gpu_settings(s)
    log.warning(
        "no CUDA device found: sweeping on the CPU (%d cores) with model=%s",
        device.cpu_count,
        model,
    )
    if s.budget.max_wall_s <= 0 and s.budget.cpu_max_wall_s > 0:
        log.warning(
            "CPU sweep capped at %.0f s, verification included "
            "(hydra.sweeper.budget.cpu_max_wall_s; set hydra.sweeper.budget.max_wall_s to change "
            "it)",
            s.budget.cpu_max_wall_s,
        )
        return replace_in(s, **{"budget.max_wall_s": s.budget.cpu_max_wall_s})
    return s
