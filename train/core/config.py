"""The trainer's typed configuration: one dataclass per part, composed and registered with Hydra.

YAML under `conf/` selects presets and overrides fields; these dataclasses are the schema, so a
typo or a wrong type fails at load time, and `check_combinations` (train/core/config_checks.py)
checks the rules that span fields before any step runs.

Part of the torch-free core (train/core/). The rules that span fields are stated on plain values
in `train/core/rules.py` (the sweeper calls them too); train/core/config_checks.py applies them
to a whole config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from train.core.hooks import HooksConfig
from train.core.hooks import enabled as hooks_enabled
from train.core.rules import (
    FLASH_IMPLS,
    FLOAT8_RECIPES,
    check_compile_cache,
    check_compile_unit,
    check_loss,
    parse_activation_checkpointing,
)

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")  # runtime.dtype
# SDPA backends, then the flash implementations torch may register (FA3, FA4: CUDA only)
ATTENTION_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math", *FLASH_IMPLS)


@dataclass(kw_only=True)
class ModelConfig:
    """GPT-2 shape. Defaults are the `tiny` CPU preset (conf/model/tiny.yaml)."""

    # Preset name, for logs and run names.
    name: str = "tiny"
    # Number of transformer blocks.
    n_layer: int = 2
    # Attention heads per block; n_embd must be divisible by it.
    n_head: int = 2
    # Residual stream width.
    n_embd: int = 64
    # Longest sequence the position embedding covers.
    block_size: int = 64
    # GPT-2's 50257 tokens padded up to a multiple of 64 (as nanoGPT does) for faster matmuls.
    vocab_size: int = 4096
    # Dropout probability (0 for throughput runs: dropout costs time and RNG state).
    dropout: float = 0.0
    # Biases in Linear and LayerNorm layers, as in GPT-2.
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"model.n_embd ({self.n_embd}) must be divisible by model.n_head ({self.n_head})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


def one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Refuse a value outside `allowed`, naming the field and the choices."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


DATA_FORMATS = ("auto", "nanogpt", "llmc")
CHECKPOINT_MODES = ("sync", "async")


@dataclass(kw_only=True)
class DataConfig:
    # folder holding the token files; ~ expanded; relative paths resolve against the current dir
    dir: str = "data/synthetic"
    # training token file name inside `dir`
    train_file: str = "train.bin"
    # validation token file name inside `dir`
    val_file: str = "val.bin"
    # "auto" (detect llm.c magic), "nanogpt" (headerless uint16) or "llmc" (256-int32 header)
    format: str = "auto"
    # make the embedded synthetic set if its files are missing; applies ONLY to a folder named
    # "synthetic" that is absent, empty or holds our meta.json (may_generate_into in
    # train/data/synthetic.py)
    generate_if_missing: bool = True
    # DataLoader worker processes; 0 = build batches in the main process
    num_workers: int = 1
    # batches each worker keeps ready ahead of the consumer (ignored when num_workers == 0)
    prefetch_factor: int = 2
    # page-lock host batches so host->device copies can be async (applies only on CUDA)
    pin_memory: bool = True
    # keep workers alive between loader iterations (ignored when num_workers == 0)
    persistent_workers: bool = True

    def __post_init__(self) -> None:
        for name in ("dir", "train_file", "val_file"):
            if not str(getattr(self, name)).strip():
                raise ValueError(
                    f"data.{name} must be a non-empty path, got {getattr(self, name)!r}"
                )
        one_of("data.format", self.format, DATA_FORMATS)
        if self.num_workers < 0:
            raise ValueError(
                f"data.num_workers must be >= 0, got {self.num_workers}; "
                "use 0 to load in the main process"
            )
        if self.prefetch_factor < 1:
            raise ValueError(
                f"data.prefetch_factor must be >= 1, got {self.prefetch_factor}; "
                "it is the number of batches each worker keeps ready"
            )

    def resolve_dir(self) -> Path:
        """The token folder as an absolute path (~ expanded, relative to the current dir)."""
        return Path(self.dir).expanduser().resolve()

    def split_path(self, split: str) -> Path:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return self.resolve_dir() / (self.train_file if split == "train" else self.val_file)


@dataclass(kw_only=True)
class CheckpointConfig:
    # save every N optimizer steps (step counted from 1 after the optimizer step); 0 = never
    every_steps: int = 0
    # target folder: any path (local disk, /dev/shm, a network mount); ~ expanded, relative to cwd
    dir: str = "checkpoints"
    # "sync": caller writes the file; "async": caller snapshots to host, a background thread writes
    mode: str = "sync"
    # keep the newest N completed checkpoints; older ones are deleted after a successful write
    keep: int = 2
    # test/benchmark hook: extra seconds slept inside the write to emulate slow storage; 0 = off
    slow_write_s: float = 0.0

    def __post_init__(self) -> None:
        if self.every_steps < 0:
            raise ValueError(
                f"checkpoint.every_steps must be >= 0 (0 = never), got {self.every_steps}"
            )
        if not str(self.dir).strip():
            raise ValueError(f"checkpoint.dir must be a non-empty path, got {self.dir!r}")
        one_of("checkpoint.mode", self.mode, CHECKPOINT_MODES)
        if self.keep < 1:
            raise ValueError(
                f"checkpoint.keep must be >= 1 (newest N checkpoints kept), got {self.keep}"
            )
        if self.slow_write_s < 0:
            raise ValueError(
                f"checkpoint.slow_write_s must be >= 0 (0 = off), got {self.slow_write_s}"
            )


@dataclass(kw_only=True)
class BatchConfig:
    """How one optimizer step's tokens are split. The product is pinned so speed knobs never change
    the science."""

    tokens_per_step: int = 4096  # tokens per optimizer step, all processes together
    micro_batch: int = 8  # sequences per forward/backward pass on one device
    grad_accum: int = 8  # forward/backward passes per optimizer step

    def __post_init__(self) -> None:
        for name in ("tokens_per_step", "micro_batch", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"batch.{name} must be a positive integer, got {value!r}")


@dataclass(kw_only=True)
class OptimConfig:
    """AdamW with linear warm-up and cosine decay, as nanoGPT trains GPT-2."""

    lr: float = 6e-4  # peak learning rate
    min_lr: float = 6e-5  # floor of the cosine decay
    warmup_steps: int = 20  # linear warm-up steps of the production run
    weight_decay: float = 0.1  # applied to matrices only
    beta1: float = 0.9  # AdamW beta1
    beta2: float = 0.95  # AdamW beta2
    grad_clip: float = 1.0  # global grad-norm clip; 0 disables
    fused: str = "auto"  # fused AdamW: auto (where supported) | true | false

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ValueError(
                f"optim.lr must be > 0 and 0 <= optim.min_lr <= optim.lr, got lr={self.lr}, "
                f"min_lr={self.min_lr}"
            )
        if self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError("optim.warmup_steps and optim.grad_clip must be >= 0")
        if str(self.fused).lower() not in ("auto", "true", "false"):
            raise ValueError(f"optim.fused must be auto, true or false, got {self.fused!r}")


@dataclass(kw_only=True)
class RuntimeConfig:
    """Where and how the math runs: device, precision, compilation, kernels, threads."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on a CUDA device that has it, else fp32) | fp32 | bf16 | fp16
    tf32: bool = True  # TF32 tensor cores for fp32 matmuls (CUDA Ampere and newer)
    compile: str = "none"  # torch.compile mode, or none for eager
    # what runtime.compile compiles: model (the whole model, one graph) | block (each transformer
    # block compiled once and reused by all, the head and loss apart: a shorter cold compile;
    # train/model/regional.py). Read only when runtime.compile is not none
    compile_unit: str = "model"
    # torch.compile's cache folder (train/core/compile_cache.py): '' = torch's default, 'off' =
    # compile cold every time, or a folder (a sweep passes its own; best.yaml carries it)
    compile_cache: str = ""
    # SDPA backend: auto | flash | efficient | cudnn | math, or a flash implementation the installed
    # torch lists (fa3 | fa4: torch.nn.attention.activate_flash_attention_impl, CUDA only)
    attention: str = "auto"
    # float8 matmuls in the transformer blocks' linears through torchao: none | tensorwise |
    # rowwise (needs runtime.dtype=bf16 and a GPU with compute capability >= 8.9; changes the math)
    float8: str = "none"
    # torchao's emulate mode: float8 rounding with high-precision matmuls, on any device (no
    # speed-up): tests the float8 plumbing on a CPU
    float8_emulate: bool = False
    # none | every | every_<k> (every k-th block) | selective (every block, op-level: matmul and
    # attention outputs kept, pointwise ops recomputed; train/model/recompute.py)
    activation_checkpointing: str = "none"
    # full | chunked (the LM head and cross-entropy in chunks of rows, never the whole fp32
    # logits; train/model/loss.py)
    loss: str = "full"
    threads: int = 0  # intra-op CPU threads; 0 keeps torch's default
    seed: int = 1337  # model init and data order
    # processes per node: > 1 starts the run under torchrun (torch.distributed.run) with DDP, one
    # GPU per process (gloo processes on a CPU); batch.micro_batch is then per process
    nproc: int = 1

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError(f"runtime.nproc must be >= 1 (processes per node), got {self.nproc}")
        one_of("runtime.compile", self.compile, COMPILE_MODES)
        check_compile_unit(self.compile_unit)
        check_compile_cache(self.compile_cache, field="runtime.compile_cache")
        one_of("runtime.dtype", self.dtype, DTYPE_CHOICES)
        one_of("runtime.attention", self.attention, ATTENTION_BACKENDS)
        one_of("runtime.float8", self.float8, FLOAT8_RECIPES)
        if self.threads < 0:
            raise ValueError(
                f"runtime.threads must be >= 0 (0 = torch default), got {self.threads}"
            )
        parse_activation_checkpointing(self.activation_checkpointing)
        check_loss(self.loss)


@dataclass(kw_only=True)
class DdpConfig:
    """DistributedDataParallel's knobs, read when runtime.nproc (or torchrun's WORLD_SIZE) > 1."""

    bucket_cap_mb: float = 25.0  # gradient bucket size: all-reduces start as buckets fill
    gradient_as_bucket_view: bool = False  # gradients are views into the buckets (one copy less)
    static_graph: bool = False  # the same parameters are used every step (lets DDP plan ahead)
    # a collective that waits longer than this fails the run (a rank hung or died): a stuck peer
    # ends the trial with a reason instead of holding the others forever
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.bucket_cap_mb <= 0 or self.timeout_s <= 0:
            raise ValueError(
                f"ddp.bucket_cap_mb and ddp.timeout_s must be > 0, got {self.bucket_cap_mb} "
                f"and {self.timeout_s}"
            )


@dataclass(kw_only=True)
class TrialConfig:
    """A short, bounded measurement: warm-up (compile happens here), then a measured window."""

    warmup_steps: int = 3  # optimizer steps run before measuring; never counted
    max_steps: int = 20  # measured optimizer steps at most
    # measured window's wall-clock budget; the window ends at max_steps or here, whichever first
    max_seconds: float = 30.0
    min_steps: int = 5  # the time budget never cuts the window below this many steps
    out: str = "trial.json"  # result path; relative to the Hydra run dir (--pinned: the file's dir)
    profile: bool = False  # write a torch.profiler trace of a few extra steps beside the result
    profile_steps: int = 3  # steps inside the trace
    report_every: int = 5  # measured steps between progress reports (pruning, interval metrics)
    progress_file: str = ""  # JSON lines of interval metrics for a watching parent; empty = off
    study_storage: str = ""  # Optuna storage URL to report intermediate values to; empty = off
    study_name: str = ""  # study to report to
    trial_id: int = -1  # Optuna trial id to report to
    # the sweep's record of each graph's first measured compile (train/core/compile_graphs.py),
    # a JSON file shared by its trials; empty = none: the trial's own compile is charged
    compile_record: str = ""
    # a full optimizer step predicted (from the warm-up) to take longer than this is measured as
    # steps of `project_micro_steps` micro-batches and projected to the full step; 0 = always
    # measure real full steps (the sweep re-measures its start and winner that way)
    project_above_s: float = 5.0
    project_micro_steps: int = 4  # micro-batches per measured step when projecting (and warm-up)
    # the window also ends once the 95% t-interval of the mean step time is within +-target_ci of
    # it (0.02 = +-2%; train/core/window_ci.py), after ci_min_steps measured steps (and the
    # first checkpoint save inside the window); 0 = off: min_steps/max_steps/max_seconds only
    target_ci: float = 0.0
    ci_min_steps: int = 3  # measured steps before target_ci may end the window (>= 2)
    # the sweep's record of each checkpoint target's save, measured once (a JSON file shared by
    # its trials; train/core/save_record.py): set, the window saves nothing and the save is read
    # from the record, or measured once after the window where the record lacks it; empty = the
    # window saves every checkpoint.every_steps
    save_record: str = ""
    # loss curves this process trains, one per seed: runtime.seed's (the result), then each next
    # seed's from freshly drawn weights, a fresh optimizer and that seed's batches, the compiled
    # graphs reused (train/trial/seeds.py; the numerics guard's reference runs)
    seeds: int = 1

    def __post_init__(self) -> None:
        if self.warmup_steps < 1:
            raise ValueError(
                f"trial.warmup_steps must be >= 1 so compile and allocator warm-up stay out of "
                f"the measured window, got {self.warmup_steps}"
            )
        if self.max_steps < 2 or self.min_steps < 2 or self.min_steps > self.max_steps:
            raise ValueError(
                f"trial.max_steps and trial.min_steps must be >= 2 with min <= max (a spread needs "
                f"two steps), got min_steps={self.min_steps}, max_steps={self.max_steps}"
            )
        if self.project_above_s < 0 or self.project_micro_steps < 1:
            raise ValueError(
                f"trial.project_above_s must be >= 0 (0 = never project) and "
                f"trial.project_micro_steps >= 1, got {self.project_above_s} and "
                f"{self.project_micro_steps}"
            )
        if not 0 <= self.target_ci < 1 or self.ci_min_steps < 2:
            raise ValueError(
                f"trial.target_ci must be a share in [0, 1) (0.02 = +-2%; 0 = off) and "
                f"trial.ci_min_steps >= 2 (a spread needs two steps), got {self.target_ci} and "
                f"{self.ci_min_steps}"
            )
        if self.seeds < 1:
            raise ValueError(
                f"trial.seeds must be >= 1 (loss curves this process trains, one per seed), "
                f"got {self.seeds}"
            )
        if self.max_seconds <= 0 or self.report_every < 1 or self.profile_steps < 1:
            raise ValueError(
                "trial.max_seconds must be > 0, trial.report_every and trial.profile_steps >= 1"
            )


@dataclass(kw_only=True)
class TrainConfig:
    """The production run."""

    max_steps: int = 200  # optimizer steps in total (a resumed run continues up to this)
    log_every: int = 10  # steps between log lines (tokens/s, MFU, loss)
    eval_every: int = 50  # steps between validation-loss evaluations; 0 disables
    eval_batches: int = 8  # micro-batches per validation-loss estimate
    # auto: continue from the newest checkpoint in checkpoint.dir if it is this run's (same
    # train/run/identity.py identity) | force: even another run's | never: start fresh
    resume: str = "auto"

    def __post_init__(self) -> None:
        one_of("train.resume", self.resume, ("auto", "force", "never"))
        if self.max_steps < 1 or self.log_every < 1 or self.eval_every < 0 or self.eval_batches < 1:
            raise ValueError(
                "train.max_steps, train.log_every and train.eval_batches must be >= 1, "
                "train.eval_every >= 0"
            )


@dataclass(kw_only=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    ddp: DdpConfig = field(default_factory=DdpConfig)
    trial: TrialConfig = field(default_factory=TrialConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # The sections an exported best.yaml pinned, written near its top (sweeper/report/best_yaml.py):
    # a file that lacks any was cut short, and train/core/config_file.py refuses it before Hydra;
    # [] = not one
    pinned_sections: list[str] = field(default_factory=list)
    # Where a pinned config came from (the sweep's measured metrics, spread, fingerprint, command).
    # Informational: the trainer carries it and never reads it.
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class HookedConfig(Config):
    """The schema with the test hooks' section (train/core/hooks.py): what the trainer takes
    instead of `Config` only while THROUGHPUT_SWEEP_TEST_HOOKS=1 is set."""

    hooks: HooksConfig = field(default_factory=HooksConfig)


def trainer_schema() -> type[Config]:
    """The schema this process takes: `Config`, or `HookedConfig` under the test switch."""
    return HookedConfig if hooks_enabled() else Config


def register_configs() -> None:
    """Register the schema so `defaults: [train_schema]` in YAML types every field."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=trainer_schema())


register_configs()
