"""What an acceptance run measures, per profile: gpt2-xl on the GPU at hand, or the tiny model on
a CPU (the dry run the tests take through the very same stages).

Pure data. The budgets are the GPU host's rules: one command runs at most 10 minutes, so every
stage's deadline stays under 600 s with room for packing the state, and the four stages of the
xl profile add up to 25 minutes of device time at most. The `ddp` stage (a data-parallel trial on
two GPUs) is extra, outside those 25 minutes: it runs only on a host with several GPUs and ends at
once, spending no device time, on a host with one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

STAGES = ("plan", "sweep", "production", "ddp", "lease")
# The run in order: a second sweep stage resumes the first (a no-op once best.yaml exists).
STAGE_ORDER = ("plan", "sweep", "sweep", "production")
# After the run, on a host with several GPUs only: not in the 25 minutes of STAGE_ORDER.
MULTI_GPU_STAGES = ("ddp",)
NUMBERED = (*STAGE_ORDER, *MULTI_GPU_STAGES)  # --stage 1-5


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One acceptance run's sizes, search and time budgets."""

    name: str
    model: str  # conf/model/<model>.yaml
    block_size: int  # the preset's sequence length
    tokens_per_step: int  # batch.tokens_per_step, pinned for the whole run
    device: str  # runtime.device of every trial and the production run
    dtype: str  # runtime.dtype (bf16 on a GPU; auto = fp32 on a CPU)
    search: str  # conf/search/<search>.yaml
    # micro-batches the starting config may take, best first (the seed's 16 where it fits)
    micro_batches: tuple[int, ...]
    # torch.compile modes of the starting config, best first
    compile_modes: tuple[str, ...]
    # runtime.compile_unit of every compiled trial and the production run: `model` (one graph, as
    # nanoGPT compiles) or `block` (each transformer block compiled once, reused by every block)
    compile_unit: str = "model"
    # trial window of every sweep trial (short: long optimizer steps are projected)
    trial_overrides: tuple[str, ...]
    # extra sweeper settings (trial count, race rounds)
    sweep_overrides: tuple[str, ...] = ()
    # the plan stage's memory points: at most this many, each a short gpu_check trial
    memory_points: int = 3
    # gpu_check's trial window for a memory point
    check_steps: int = 2
    check_max_seconds: float = 10.0
    production_steps: int = 4  # optimizer steps of the production run (the first is warm-up)
    # the ddp stage: one trial of best.yaml (or the start) on `ddp_nproc` processes (one GPU each,
    # NCCL; gloo on a CPU), real full steps in this window (compared with the race's real steps)
    ddp_nproc: int = 2
    ddp_trial_overrides: tuple[str, ...] = ()
    # seconds a stage may take (its deadline), by stage; the second sweep stage has its own
    budget_s: dict[str, float] = field(default_factory=dict, hash=False)
    # the first `search_runs` sweep stages only search: no wall budget of the sweep's own (it
    # would hold back a third of the stage for a race that is the next stage's), the stage's
    # deadline stops a trial that would overrun it, and the stage ends where the race starts
    search_runs: int = 1
    # a later sweep stage races only if its first round fits in what is left of the stage
    race_round_s: float = 0.0
    pack_margin_s: float = 30.0  # kept free at the end of a stage to write the state
    grace_s: float = 15.0  # from SIGTERM (trials recorded as interrupted) to SIGKILL
    min_sweep_s: float = 60.0  # a sweep stage with less time left than this does not start one
    # the run's stages in order (the lease: its main command, then its second)
    stages: tuple[str, ...] = STAGE_ORDER
    # the second command of a lease also lays out docs/gpu/<date>-<device>/ in its output folder
    evidence_folder: bool = False

    def budget_for(self, stage: str, *, repeat: int) -> float:
        """The deadline of a stage; `repeat` counts earlier runs of the same stage."""
        key = f"{stage}#{repeat + 1}" if f"{stage}#{repeat + 1}" in self.budget_s else stage
        return self.budget_s[key]

    @property
    def total_budget_s(self) -> float:
        """Device time of the whole run: each stage of STAGE_ORDER at its deadline (the
        multi-GPU stages are extra: `multi_gpu_budget_s`)."""
        seen: dict[str, int] = {}
        total = 0.0
        for stage in self.stages:
            total += self.budget_for(stage, repeat=seen.get(stage, 0))
            seen[stage] = seen.get(stage, 0) + 1
        return total

    @property
    def multi_gpu_budget_s(self) -> float:
        """Device time of the stages that run only on a host with several GPUs."""
        return sum(
            self.budget_for(stage, repeat=0) for stage in MULTI_GPU_STAGES if stage in self.budget_s
        )


XL = Profile(
    name="xl",
    model="gpt2-xl",
    block_size=1024,
    tokens_per_step=1_048_576,  # the seed's 16 x 64 x 1024
    device="cuda",
    dtype="bf16",
    search="gpu-acceptance",
    micro_batches=(16, 8, 4, 2, 1),
    compile_modes=("default", "none"),
    # one warm-up step (compile is there), 2-3 measured; a search step of 1M tokens is projected
    # from 4 micro-batches, a race run takes real full steps (~20-27 s each on an H100)
    trial_overrides=(
        "trial.warmup_steps=1",
        "trial.min_steps=2",
        "trial.max_steps=3",
        "trial.max_seconds=10",
    ),
    memory_points=3,
    production_steps=4,
    # 1 warm-up step (compile) and 2-3 real full steps of 1M tokens (~10-14 s each on 2 H100s)
    ddp_trial_overrides=(
        "trial.warmup_steps=1",
        "trial.min_steps=2",
        "trial.max_steps=3",
        "trial.max_seconds=30",
        "trial.project_above_s=0",
    ),
    # plan: probe, plan, 3 memory points (an eager one ~30 s, a compiled one ~130 s on an H100);
    # sweep 1: the search, 4 trials (~30 s eager, ~130 s compiled, 2026-11-23 H100 figures);
    # sweep 2: the race, the winner and the start with real full steps (~181 s a compiled run);
    # production: compile ~100 s + 4 steps of ~20-27 s. Sum: 1,500 s = 25 min.
    # ddp (extra, several GPUs only): 2 ranks start and compile (~100 s, in parallel), a warm-up
    # and 3 full steps (~60 s), the NCCL set-up and the stops: 360 s.
    budget_s={"plan": 240.0, "sweep#1": 540.0, "sweep#2": 480.0, "production": 240.0, "ddp": 360.0},
    race_round_s=360.0,
)

TINY = Profile(
    name="tiny",
    model="tiny",
    block_size=64,
    tokens_per_step=2048,
    device="cpu",
    dtype="auto",
    search="smoke",
    micro_batches=(8, 4),
    compile_modes=("none",),  # a CPU compile is 25-40 s: too slow for a dry run
    trial_overrides=(
        "trial.warmup_steps=1",
        "trial.max_steps=3",
        "trial.min_steps=2",
        "trial.max_seconds=3",
        "trial.report_every=2",
    ),
    memory_points=2,
    check_steps=2,
    check_max_seconds=5.0,
    production_steps=4,
    ddp_trial_overrides=(
        "trial.warmup_steps=1",
        "trial.max_steps=3",
        "trial.min_steps=2",
        "trial.max_seconds=3",
        "trial.project_above_s=0",
    ),
    budget_s={"plan": 120.0, "sweep": 180.0, "production": 120.0, "ddp": 120.0},
    race_round_s=0.0,
    pack_margin_s=10.0,
    grace_s=5.0,
    min_sweep_s=3.0,
)

# One 15-minute GPU lease (machine start included): a main command of at most 9 minutes that ends
# in a verified best.yaml (probe, the starting config from the memory model, the gpu-lease sweep:
# the start, the best bf16 split and float8 tensorwise, guarded and raced, in one run), then a
# second of at most 3 that trains from best.yaml and lays out the evidence folder.
LEASE = replace(
    XL,
    name="lease",
    search="gpu-lease",
    compile_modes=("default",),
    # a cold compile of one block's graph instead of 48: 4.6x less on this CPU at gpt2-xl's depth
    # (docs/bench/compile_unit-2026-11-28-cpu.txt), the lease's largest term after the steps
    compile_unit="block",
    production_steps=3,
    budget_s={"lease": 540.0, "production": 180.0},
    search_runs=0,  # one sweep command searches and races
    race_round_s=0.0,  # the sweep's own wall budget (the stage's time left) ends it in time
    stages=("lease", "production"),
    evidence_folder=True,
)

# The lease rehearsed on a CPU with the tiny model (the tests' dry run).
LEASE_TINY = replace(
    TINY,
    name="lease-tiny",
    budget_s={"lease": 150.0, "production": 90.0},
    search_runs=0,
    stages=("lease", "production"),
    evidence_folder=True,
)

PROFILES = {p.name: p for p in (XL, TINY, LEASE, LEASE_TINY)}


def profile_named(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"--profile {name!r} is not known; use one of {sorted(PROFILES)}")
    return PROFILES[name]


def stage_named(stage: str) -> str:
    """A stage by name (plan | sweep | production | ddp) or by its number in STAGE_ORDER and
    then MULTI_GPU_STAGES (1-5)."""
    if stage in STAGES:
        return stage
    if stage.isdigit() and 1 <= int(stage) <= len(NUMBERED):
        return NUMBERED[int(stage) - 1]
    raise ValueError(
        f"--stage {stage!r} is not a stage; use a name ({', '.join(STAGES)}) or a number 1-"
        f"{len(NUMBERED)} ({', '.join(f'{i}={s}' for i, s in enumerate(NUMBERED, 1))})"
    )
