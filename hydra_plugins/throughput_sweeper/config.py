"""The sweeper's settings, registered as `hydra/sweeper=throughput`. Search spaces fill `space`.

The one declaration of `hydra.sweeper.*`, in groups as Hydra's Optuna sweeper nests its own: the
study's own settings at the top (sampler, objective, storage, study_name, n_trials, n_jobs, the
space), the rest by concern (`hydra.sweeper.verify.top_k`, `hydra.sweeper.guard.steps`, ...). Each
group is one frozen keyword-only dataclass; the node Hydra composes from them is made writable so
YAML and overrides can merge into it, and the sweeper's value is that node turned back into these
classes (sweeper/settings.py `settings_from`, which also checks every value). Light on purpose:
Hydra imports it at every start.
"""

# No `from __future__ import annotations`: Hydra loads plugin modules without registering them in
# sys.modules, and dataclasses then cannot resolve string annotations.
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from train.core.handoff.interval import DEFAULT_MTBF_H


@dataclass(frozen=True, kw_only=True)
class PrunerConf:
    """When a running trial is stopped early."""

    kind: str = "median"  # median | percentile | none
    warmup_steps: int = 5  # measured steps a trial runs before it can be pruned
    startup_trials: int = 2  # trials that must finish before the pruner judges any


@dataclass(frozen=True, kw_only=True)
class BudgetConf:
    """How long the sweep and each trial may run, and when it gives up."""

    max_wall_s: float = 0.0  # whole-sweep wall budget, verification included; 0 = none
    # budget applied instead when no GPU is found and max_wall_s is 0: the embedded CPU demo
    # finishes in minutes whatever the space
    cpu_max_wall_s: float = 390.0
    # hard wall-clock limit of one trial process; 0 = automatic: sized per trial from its
    # predicted step time (sweeper/space/limits.py), never below 600 s
    trial_timeout_s: float = 0.0
    # no progress line or log output for this long = hung; 0 = automatic (the longest quiet gap
    # of a healthy trial, x3, never below 300 s); < 0 turns the check off
    stall_timeout_s: float = 0.0
    max_failure_rate: float = 0.5  # stop searching when more than this share of trials failed
    min_trials_for_failure_rate: int = 4  # ... judged only after this many finished trials
    # the last trials of the budget measure the best trial's unmeasured one-knob neighbours
    # (sweeper/search/polish.py); -1 = automatic: a quarter of n_trials under tpe or random,
    # 0 for grid
    polish_trials: int = -1


@dataclass(frozen=True, kw_only=True)
class GpuConf:
    """Applied instead of the general settings when a GPU is found (0 = the
    general setting). search=throughput sets them so a GPT-2 XL sweep reaches a verified best.yaml
    in about 14 minutes of one GPU (plan mode prints the arithmetic)."""

    n_trials: int = 0  # n_trials on a GPU (a grid keeps its own count); 0 = n_trials
    verify_top_k: int = 0  # verify.top_k on a GPU; 0 = verify.top_k
    # the race's rounds on a GPU (both verify.repeats and verify.max_rounds); 0 = theirs
    verify_rounds: int = 0
    # false: on a GPU the space's checkpoint.* knobs are priced, not searched: no trial saves
    # inside its window, the starting config's save is measured once per target and priced at the
    # production interval (train/core/save_record.py); true: searched like any knob
    search_checkpoints: bool = True


@dataclass(frozen=True, kw_only=True)
class PlanConf:
    """Plan mode, and the device a plan is made for."""

    # print the plan (the space after constraints and the memory model, each dropped point with
    # its predicted GiB, floors, trial limits, trial count, predicted wall time) and start nothing
    enabled: bool = False
    # plan for this device instead of the one here (e.g. "NVIDIA H100 80GB HBM3"); outside plan
    # mode it replaces the probed device's name and memory for the memory model and the limits
    device: str = ""
    # the software the device's machine has, comma-separated, of torchao (runtime.float8), fa3
    # and fa4 (runtime.attention); a plan for a named device assumes it instead of asking this
    # machine, so one plan command prints one plan everywhere. The default is our GPU image's:
    # torchao installed, no FA3/FA4 package
    software: str = "torchao"
    # plan mode also writes the plan's numbers (the predicted wall and its parts, in seconds) as
    # JSON to this file, for scripts (scripts/gpu_acceptance.py --lease --plan); '' = none
    json: str = ""


@dataclass(frozen=True, kw_only=True)
class CostConf:
    """The production run the time-to-train and price reports assume."""

    # production-run length in optimizer steps (time_to_train objective, time-to-train report);
    # 0 = derived from planned_tokens / batch.tokens_per_step; > 0 overrides planned_tokens
    planned_steps: int = 0
    planned_tokens: int = 10_000_000_000  # production-run length in tokens (the seed's 10B)
    # checkpoint interval of that run: time_to_train prices each measured save at it; best.yaml
    # saves at the Young/Daly interval from the winner's measured save (mtbf_h), at most this;
    # 0 = no cap (the search prices each trial's own checkpoint.every_steps)
    planned_checkpoint_every: int = 0
    # mean time between failures of ONE device, hours; a job of N devices fails N times as often
    # (the rule, the default and its source: train/core/handoff/interval.py)
    mtbf_h: float = DEFAULT_MTBF_H
    usd_per_hour: float = 0.0  # device price, USD per hour; 0 = unknown: show hours only
    # device name (or a part of it, e.g. "H100") -> USD per hour, used when usd_per_hour is 0;
    # there are no default prices: give the rate you pay
    prices: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class VerifyConf:
    """The race of the finalists and the starting config
    (sweeper/verify/race_rules.py). Each round runs every surviving contender once, in a shuffled
    order; a paired test then drops those proved slower than the leader."""

    top_k: int = 3  # configurations re-measured in fresh processes before a winner is named
    # ... among those whose search value is within this share of the best (0.8: 20% slower)
    within: float = 0.8
    repeats: int = 3  # rounds every contender runs before any is dropped
    max_rounds: int = 0  # the race stops here at the latest; 0 = repeats (fixed)
    confidence: float = 0.95  # confidence of each paired test
    margin: float = 0.02  # survivors within this share of the leader are equivalent
    noise_floor: float = 0.01  # leads smaller than this share of the median are never decisive

    @property
    def last_round(self) -> int:
        """The round the race stops at the latest: max_rounds, or repeats when it is 0."""
        return self.max_rounds or self.repeats


@dataclass(frozen=True, kw_only=True)
class GuardConf:
    """The numerics guard (sweeper/verify/guard.py). Before a contender whose
    math differs from the starting config's (sweeper/space/math_keys.py: dtype, TF32, float8,
    chunked loss, attention kernel) may race, it trains `steps` steps from the starting config's
    seed on the same batches, and its loss curve must stay within the tolerance: k x the starting
    config's own seed-to-seed spread (`seeds` runs), at least the floor."""

    mode: str = "auto"  # auto = on where the space searches a math-changing key | on | off
    steps: int = 20  # optimizer steps of each curve run
    seeds: int = 2  # reference (starting config) curves, one seed each, all in one process
    k: float = 2.0  # tolerance = k x the reference's seed-to-seed spread ...
    floor: float = 0.01  # ... never below this many nats of loss
    # the most tokens in one curve step: a bigger starting step trains its curves on fewer
    # micro-batches per step (the same micro-batch, so the same kernels)
    tokens: int = 65536


@dataclass(frozen=True, kw_only=True)
class MlflowConf:
    """Where the sweep is logged."""

    enabled: bool = True  # log the sweep (parent run) and every trial (nested runs) to MLflow
    # tracking URI; empty = $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db
    tracking_uri: str = ""
    artifact_location: str = ""  # empty = <cwd>/mlartifacts/<experiment> for local stores
    experiment: str = ""  # empty = the study name


@dataclass(frozen=True, kw_only=True)
class ThroughputSweeperConf:
    """`hydra.sweeper.*`: the study's own settings at the top, the rest in groups."""

    _target_: str = "hydra_plugins.throughput_sweeper.throughput_sweeper.ThroughputSweeper"
    search_name: str = "custom"  # name of the search space (conf/search/<name>.yaml sets it)
    # dotted trainer key -> spec: choice(...), range(...), interval(...), a list, or {split: true}
    space: dict[str, Any] = field(default_factory=dict)
    # tpe | random | grid | prior (the starting config and the prior's points only, no others
    # drawn: n_trials is their count, at most n_trials where that is set)
    sampler: str = "tpe"
    objective: str = "tokens_per_s"  # tokens_per_s (maximize) | time_to_train (minimize)
    n_trials: int = 12  # finished trials (any state) the search stops at; 0 = no limit
    n_jobs: int = 1  # trials running at once (needs a parallel launcher: joblib, submitit)
    n_startup_trials: int = 4  # random trials before TPE models, and before the pruner judges
    # queue the prior's points first (sweeper/plan/prior.py: the largest micro-batch that fits,
    # bf16, compiled, fused attention, new levers; on a CPU threads and workers only), each with
    # its reason; they count among the n_startup_trials
    prior: bool = True
    # sampler seed; -1 = derived from host and pid, so several workers on one study explore
    # different points (a fixed seed makes one worker's search reproducible)
    seed: int = -1
    storage: str = ""  # Optuna storage URL; empty = sqlite:///<cwd>/sweeps/optuna.db
    study_name: str = ""  # empty = throughput-<model>-<search>-<device>
    # torch.compile's cache, shared by every trial and race run (train/core/compile_cache.py):
    # auto = a compile_cache folder beside a SQLite storage's file (else in the sweep dir), a
    # folder, or off (every trial compiles cold); best.yaml carries the folder to the production run
    compile_cache: str = "auto"
    pruner: PrunerConf = field(default_factory=PrunerConf)  # when a running trial is stopped
    budget: BudgetConf = field(default_factory=BudgetConf)  # wall budgets, trial limits, failures
    gpu: GpuConf = field(default_factory=GpuConf)  # what changes when a GPU is found
    plan: PlanConf = field(default_factory=PlanConf)  # plan mode and the device planned for
    cost: CostConf = field(default_factory=CostConf)  # the production run and its price
    verify: VerifyConf = field(default_factory=VerifyConf)  # the race that names the winner
    guard: GuardConf = field(default_factory=GuardConf)  # the numerics guard's loss curves
    mlflow: MlflowConf = field(default_factory=MlflowConf)  # MLflow logging

    @property
    def polish(self) -> int:
        """Trials given to the polish step: budget.polish_trials, or with -1 a quarter of n_trials
        (none for the grid sampler, which measures every point anyway, or without n_trials);
        none for the prior sampler, which measures its points and nothing else."""
        if self.sampler == "prior":
            return 0
        if self.budget.polish_trials >= 0:
            return self.budget.polish_trials
        return self.n_trials // 4 if self.sampler != "grid" else 0


# The flat names of the settings before they came in groups -> their names now. An old name is
# refused naming its new one (train/core/keys.py), never read as an alias.
RENAMED = {
    "pruner": "pruner.kind",
    "pruner_warmup_steps": "pruner.warmup_steps",
    "pruner_startup_trials": "pruner.startup_trials",
    "max_wall_s": "budget.max_wall_s",
    "cpu_max_wall_s": "budget.cpu_max_wall_s",
    "trial_timeout_s": "budget.trial_timeout_s",
    "stall_timeout_s": "budget.stall_timeout_s",
    "max_failure_rate": "budget.max_failure_rate",
    "min_trials_for_failure_rate": "budget.min_trials_for_failure_rate",
    "polish_trials": "budget.polish_trials",
    "gpu_n_trials": "gpu.n_trials",
    "gpu_verify_top_k": "gpu.verify_top_k",
    "gpu_verify_rounds": "gpu.verify_rounds",
    "plan": "plan.enabled",
    "plan_device": "plan.device",
    "plan_software": "plan.software",
    "plan_json": "plan.json",
    "planned_steps": "cost.planned_steps",
    "planned_tokens": "cost.planned_tokens",
    "planned_checkpoint_every": "cost.planned_checkpoint_every",
    "mtbf_h": "cost.mtbf_h",
    "usd_per_hour": "cost.usd_per_hour",
    "prices": "cost.prices",
    "verify_top_k": "verify.top_k",
    "verify_repeats": "verify.repeats",
    "verify_max_rounds": "verify.max_rounds",
    "verify_confidence": "verify.confidence",
    "verify_margin": "verify.margin",
    "noise_floor": "verify.noise_floor",
    "numerics_guard": "guard.mode",
    "numerics_guard_steps": "guard.steps",
    "numerics_guard_seeds": "guard.seeds",
    "numerics_guard_k": "guard.k",
    "numerics_guard_floor": "guard.floor",
    "numerics_guard_tokens": "guard.tokens",
    "mlflow": "mlflow.enabled",
    "mlflow_tracking_uri": "mlflow.tracking_uri",
    "mlflow_artifact_location": "mlflow.artifact_location",
    "mlflow_experiment": "mlflow.experiment",
}


def groups() -> dict[str, type]:
    """The groups of hydra.sweeper: name -> dataclass (verify -> VerifyConf, ...)."""
    return {
        f.name: f.default_factory
        for f in dataclasses.fields(ThroughputSweeperConf)
        if dataclasses.is_dataclass(f.default_factory)
    }


def setting_names() -> list[str]:
    """Every setting's dotted name under hydra.sweeper (`n_trials`, `verify.top_k`, ...)."""
    inner = groups()
    names = []
    for f in dataclasses.fields(ThroughputSweeperConf):
        if f.name.startswith("_"):  # _target_: Hydra's, not a setting
            continue
        if f.name in inner:
            names += [f"{f.name}.{g.name}" for g in dataclasses.fields(inner[f.name])]
        else:
            names.append(f.name)
    return names


def schema_node() -> DictConfig:
    """The schema as a node Hydra can merge into: OmegaConf makes a frozen dataclass's node
    read-only, which would refuse every preset and override, so the flag is cleared on the node
    and each group; the value the sweeper reads, built back into the dataclasses by
    sweeper/settings.py `settings_from`, stays frozen."""
    node = OmegaConf.structured(ThroughputSweeperConf)
    for name in (None, *groups()):
        OmegaConf.set_readonly(node if name is None else node[name], None)
    # the price table's keys are the user's device names: an override adds them
    OmegaConf.set_struct(node.cost.prices, False)
    return node


def register() -> None:
    ConfigStore.instance().store(
        group="hydra/sweeper",
        name="throughput",
        node=schema_node(),
        provider="throughput_sweeper",
    )
