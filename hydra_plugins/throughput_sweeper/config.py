"""The sweeper's settings, registered as `hydra/sweeper=throughput`. Search spaces fill `space`.

The one declaration of `hydra.sweeper.*`: each field's meaning and default are here, and
sweeper/settings.py's `SweepSettings` subclasses this dataclass to check and freeze the values
(so a new setting is added here only). Light on purpose: Hydra imports it at every start.
"""

# No `from __future__ import annotations`: Hydra loads plugin modules without registering them in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass(kw_only=True)
class ThroughputSweeperConf:
    _target_: str = "hydra_plugins.throughput_sweeper.throughput_sweeper.ThroughputSweeper"
    search_name: str = "custom"  # name of the search space (conf/search/<name>.yaml sets it)
    # dotted trainer key -> spec: choice(...), range(...), interval(...), a list, or {split: true}
    space: dict[str, Any] = field(default_factory=dict)
    sampler: str = "tpe"  # tpe | random | grid
    pruner: str = "median"  # median | percentile | none
    n_startup_trials: int = 4  # random trials before TPE models, and before the pruner judges
    # queue the prior's points first (sweeper/plan/prior.py: the largest micro-batch that fits,
    # bf16, compiled, fused attention, new levers; on a CPU threads and workers only), each with
    # its reason; they count among the n_startup_trials
    prior: bool = True
    pruner_warmup_steps: int = 5  # measured steps a trial runs before it can be pruned
    pruner_startup_trials: int = 2  # trials that must finish before the pruner judges any
    n_trials: int = 12  # finished trials (any state) the search stops at; 0 = no limit
    max_wall_s: float = 0.0  # whole-sweep wall budget, verification included; 0 = none
    # budget applied instead when no GPU is found and max_wall_s is 0: the embedded CPU demo
    # finishes in minutes whatever the space
    cpu_max_wall_s: float = 390.0
    # applied instead of n_trials / verify_top_k / verify_repeats and verify_max_rounds when a GPU
    # is found (0 = the general setting): search=throughput sets them so a GPT-2 XL sweep reaches a
    # verified best.yaml in about 20 minutes of one GPU (plan mode prints the arithmetic)
    gpu_n_trials: int = 0  # n_trials on a GPU (a grid keeps its own count); 0 = n_trials
    gpu_verify_top_k: int = 0  # verify_top_k on a GPU; 0 = verify_top_k
    # the race's rounds on a GPU (both verify_repeats and verify_max_rounds); 0 = theirs
    gpu_verify_rounds: int = 0
    # the last trials of the budget measure the best trial's unmeasured one-knob neighbours
    # (sweeper/search/polish.py); -1 = automatic: a quarter of n_trials under tpe or random,
    # 0 for grid
    polish_trials: int = -1
    n_jobs: int = 1  # trials running at once (needs a parallel launcher: joblib, submitit)
    max_failure_rate: float = 0.5  # stop searching when more than this share of trials failed
    min_trials_for_failure_rate: int = 4  # ... judged only after this many finished trials
    # hard wall-clock limit of one trial process; 0 = automatic: sized per trial from its
    # predicted step time (sweeper/space/limits.py), never below 600 s
    trial_timeout_s: float = 0.0
    # no progress line or log output for this long = hung; 0 = automatic (the longest quiet gap
    # of a healthy trial, x3, never below 300 s); < 0 turns the check off
    stall_timeout_s: float = 0.0
    # print the plan (the space after constraints and the memory model, each dropped point with
    # its predicted GiB, floors, trial limits, trial count, predicted wall time) and start nothing
    plan: bool = False
    # plan for this device instead of the one here (e.g. "NVIDIA H100 80GB HBM3"); outside plan
    # mode it replaces the probed device's name and memory for the memory model and the limits
    plan_device: str = ""
    # the software a plan_device's machine has, comma-separated, of torchao (runtime.float8), fa3
    # and fa4 (runtime.attention); a plan for a named device assumes it instead of asking this
    # machine, so one plan command prints one plan everywhere. The default is our GPU image's:
    # torchao installed, no FA3/FA4 package
    plan_software: str = "torchao"
    # plan mode also writes the plan's numbers (the predicted wall and its parts, in seconds) as
    # JSON to this file, for scripts (scripts/gpu_acceptance.py --lease --plan); '' = none
    plan_json: str = ""
    storage: str = ""  # Optuna storage URL; empty = sqlite:///<cwd>/sweeps/optuna.db
    # torch.compile's cache, shared by every trial and race run (train/core/compile_cache.py):
    # auto = a compile_cache folder beside a SQLite storage's file (else in the sweep dir), a
    # folder, or off (every trial compiles cold); best.yaml carries the folder to the production run
    compile_cache: str = "auto"
    study_name: str = ""  # empty = throughput-<model>-<search>-<device>
    # sampler seed; -1 = derived from host and pid, so several workers on one study explore
    # different points (a fixed seed makes one worker's search reproducible)
    seed: int = -1
    objective: str = "tokens_per_s"  # tokens_per_s (maximize) | time_to_train (minimize)
    # production-run length in optimizer steps (time_to_train objective, time-to-train report);
    # 0 = derived from planned_tokens / batch.tokens_per_step; > 0 overrides planned_tokens
    planned_steps: int = 0
    planned_tokens: int = 10_000_000_000  # production-run length in tokens (the seed's 10B)
    # checkpoint interval of that run: time_to_train prices each measured save at it; best.yaml
    # saves at the Young/Daly interval from the winner's measured save (mtbf_h), at most this;
    # 0 = no cap (the search prices each trial's own checkpoint.every_steps)
    planned_checkpoint_every: int = 0
    # mean time between failures of ONE device, hours (train/core/handoff/interval.py): Llama 3
    # paper (2024, sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100s = 54 x 24 x
    # 16,384 / 419 = 50,677 GPU-hours; rounded down. A job of N devices fails N times as often
    mtbf_h: float = 50_000.0
    usd_per_hour: float = 0.0  # device price, USD per hour; 0 = unknown: show hours only
    # device name (or a part of it, e.g. "H100") -> USD per hour, used when usd_per_hour is 0;
    # there are no default prices: give the rate you pay
    prices: dict[str, float] = field(default_factory=dict)
    verify_top_k: int = 3  # configurations re-measured in fresh processes before a winner is named
    # Verification is a race (sweeper/verify/race_rules.py): each round runs every surviving
    # contender (the top k and the starting config) once, in a shuffled order; a paired test then
    # drops those proved slower than the leader
    verify_repeats: int = 3  # rounds every contender runs before any is dropped
    verify_max_rounds: int = 0  # the race stops here at the latest; 0 = verify_repeats (fixed)
    verify_confidence: float = 0.95  # confidence of each paired test
    verify_margin: float = 0.02  # survivors within this share of the leader are equivalent
    noise_floor: float = 0.01  # leads smaller than this share of the median are never decisive
    # The numerics guard (sweeper/verify/guard.py): before a contender whose math differs from
    # the starting config's (sweeper/space/math_keys.py: dtype, TF32, float8, chunked loss,
    # attention kernel) may race, it trains numerics_guard_steps steps from the starting config's
    # seed on the same batches, and its loss curve must stay within the tolerance: k x the
    # starting config's own seed-to-seed spread (numerics_guard_seeds runs), at least the floor.
    # auto = on where the space searches a math-changing key | on | off
    numerics_guard: str = "auto"
    numerics_guard_steps: int = 20  # optimizer steps of each curve run
    numerics_guard_seeds: int = 2  # reference (starting config) runs, one seed each
    numerics_guard_k: float = 2.0  # tolerance = k x the reference's seed-to-seed spread ...
    numerics_guard_floor: float = 0.01  # ... never below this many nats of loss
    # the most tokens in one curve step: a bigger starting step trains its curves on fewer
    # micro-batches per step (the same micro-batch, so the same kernels)
    numerics_guard_tokens: int = 65536
    mlflow: bool = True  # log the sweep (parent run) and every trial (nested runs) to MLflow
    # tracking URI; empty = $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db
    mlflow_tracking_uri: str = ""
    mlflow_artifact_location: str = ""  # empty = <cwd>/mlartifacts/<experiment> for local stores
    mlflow_experiment: str = ""  # empty = the study name


def register() -> None:
    ConfigStore.instance().store(
        group="hydra/sweeper",
        name="throughput",
        node=ThroughputSweeperConf,
        provider="throughput_sweeper",
    )
