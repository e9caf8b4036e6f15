"""One process, one device: build everything a run needs, and take one optimizer step.

The bounded trial (`train.trial.measurement`) and the production run (`python -m train`) share this
code, so a configuration measured by the sweep is exactly the configuration that trains. Under
torchrun (runtime.nproc > 1, train/run/torchrun.py) the process is one DDP rank of several
(train/run/distributed.py): the same step, on its slice of each global batch.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from train import device as dev
from train.core.chips import Peak
from train.core.compile_cache import use_compile_cache
from train.core.config import Config
from train.core.config_checks import check_combinations
from train.core.flops import flops_per_token_of, lookup_peak
from train.core.meters import EventPhaseClock, PhaseClock
from train.core.rules import resolve_dtype_name
from train.data.dataset import DevicePrefetcher, make_loader, open_tokens
from train.data.synthetic import ensure_dataset
from train.measure.ceiling import Ceiling, measure_matmul_ceiling
from train.model.attention import installed_flash_impls, probe_backend
from train.model.float8 import convert_to_float8, float8_report
from train.model.gpt import GPT, build_on
from train.model.regional import compile_model
from train.run.checkpoint import Checkpointer, rng_state
from train.run.distributed import (
    ExposedComms,
    Rank,
    barrier,
    current_rank,
    destroy_process_group,
    init_process_group,
    mean_over_ranks,
    no_sync,
    rank_device_name,
    wrap_ddp,
)
from train.run.finite import check_state_finite
from train.run.torchrun import bind_to_agent

log = logging.getLogger(__name__)

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(kw_only=True)
class Session:
    """Everything built for one run; the step function only reads it."""

    cfg: Config
    device: torch.device
    dtype: str  # resolved precision: fp32 | bf16 | fp16
    raw_model: GPT
    model: nn.Module  # raw_model (eager, or its regions compiled), or its torch.compile wrapper
    optimizer: torch.optim.Optimizer
    fused_optimizer: bool
    scaler: torch.amp.GradScaler
    checkpointer: Checkpointer
    batches: DevicePrefetcher
    attention_backend: str
    threads: int
    flops_per_token: float
    tokens_per_step: int  # the global figure: micro_batch x grad_accum x block_size x world
    rank: Rank = field(default_factory=Rank)
    comms: ExposedComms | None = None  # marks the last gradient on the clock (data-parallel)
    # runtime.float8's conversion (train/model/float8.py float8_report); None = bf16 matmuls
    float8: dict | None = None


def resolve_dtype(requested: str, device: torch.device) -> str:
    """`auto` is bf16 where the CUDA device has it, else fp32 (bf16 is slower on most CPUs)."""
    bf16 = device.type == "cuda" and requested == "auto" and torch.cuda.is_bf16_supported()
    return resolve_dtype_name(requested, device_type=device.type, bf16_supported=bf16)


def data_paths(cfg: Config) -> tuple[Path, Path]:
    root = Path(cfg.data.dir).expanduser()
    return root / cfg.data.train_file, root / cfg.data.val_file


def check_data(cfg: Config) -> None:
    """Make the embedded default data if allowed, then validate both token files before any step."""
    ensure_dataset(cfg.data)
    for path in data_paths(cfg):
        open_tokens(
            path,
            format=cfg.data.format,
            block_size=cfg.model.block_size,
            vocab_size=cfg.model.vocab_size,
        )


def build_model(
    cfg: Config, device: torch.device
) -> tuple[GPT, nn.Module, torch.optim.Optimizer, bool]:
    """The seeded model (built on the meta device, its weights drawn on `device`), its AdamW
    optimizer and, under runtime.compile, the model to call: its compiled wrapper
    (runtime.compile_unit=model), or the model with its block and head compiled in place (block;
    train/model/regional.py): (raw model, model to call, optimizer, whether the optimizer is
    fused). The trainer and the benchmark's plain loop (scripts/bench/trainer.py) build their
    weights here alike."""
    rt = cfg.runtime
    torch.manual_seed(rt.seed)
    raw_model = build_on(  # shapes on the meta device; the weights allocated and drawn on `device`
        device,
        cfg.model,
        activation_checkpointing=rt.activation_checkpointing,
        attention=rt.attention,
        loss=rt.loss,
    )
    if rt.float8 != "none":  # after the build, before the optimizer and torch.compile see it
        convert_to_float8(raw_model, recipe=rt.float8, emulate=rt.float8_emulate)
    optimizer, fused = make_optimizer(raw_model, cfg, device)
    model: nn.Module = raw_model
    if rt.compile != "none":
        use_compile_cache(rt.compile_cache)  # the folder before the first compile reads it
        model = compile_model(raw_model, mode=rt.compile, unit=rt.compile_unit)
    return raw_model, model, optimizer, fused


def make_optimizer(
    raw_model: GPT, cfg: Config, device: torch.device
) -> tuple[torch.optim.Optimizer, bool]:
    """A fresh AdamW over `raw_model`'s parameters from optim.*, and whether it is fused."""
    return raw_model.configure_optimizer(
        lr=cfg.optim.lr,
        weight_decay=cfg.optim.weight_decay,
        betas=(cfg.optim.beta1, cfg.optim.beta2),
        device_type=device.type,
        fused=str(cfg.optim.fused).lower(),
    )


def float8_capability(device: torch.device, float8: str) -> tuple[int, int] | None:
    """The CUDA compute capability runtime.float8's rule needs (asked only when it is set)."""
    if device.type != "cuda" or float8 == "none":
        return None
    return torch.cuda.get_device_capability(device)


def cpu_threads(requested: int, rank: Rank, *, device_type: str) -> int:
    """runtime.threads for this process: as set, or with 0 (torch's default: every core) and
    several CPU ranks, the cores shared out among them, so the ranks do not oversubscribe."""
    if requested or rank.world == 1 or device_type != "cpu":
        return requested
    return max(1, len(os.sched_getaffinity(0)) // rank.world)


def close_session(s: Session, *, finished: bool = False) -> None:
    """Stop the batch thread (waiting for it: one left inside torch code aborts the process at
    exit, train/data/fetch.py), finish the checkpoint writer, leave the process group. A rank
    that `finished` its run first waits for the others (a barrier), so none leaves the group
    while a peer still works (rank 0's last save). After a failure there is no barrier: a dead
    peer would hold it until ddp.timeout_s."""
    try:
        s.batches.close()
        s.checkpointer.close()  # also on a failed step: an in-flight async write completes
        if finished:
            barrier(s.rank)
    finally:
        destroy_process_group()


PhaseTimer = Callable[[str], AbstractContextManager[None]]


def untimed(_name: str) -> AbstractContextManager[None]:
    """A phase nobody times (build_session outside a trial)."""
    return nullcontext()


def _open_device(cfg: Config, rank: Rank) -> tuple[torch.device, str, int]:
    """This rank's device made current, its resolved dtype and the threads set for it, TF32 as
    asked, and the process group joined (several ranks)."""
    rt = cfg.runtime
    if rank.world > 1:
        bind_to_agent()  # a rank never outlives the torchrun agent that started it
    device = dev.resolve_device(
        rank_device_name(rt.device, rank, cuda_available=torch.cuda.is_available())
    )
    dev.use_device(device)  # cuda:N current: streams, events and context on the model's GPU
    dtype = resolve_dtype(rt.dtype, device)
    threads = dev.set_threads(cpu_threads(rt.threads, rank, device_type=device.type))
    dev.set_tf32(rt.tf32)
    init_process_group(rank, device=device, timeout_s=cfg.ddp.timeout_s)
    return device, dtype, threads


def _attention_backend(cfg: Config, device: torch.device, dtype: str) -> str:
    """The SDPA kernel runtime.attention resolves to at this model's shapes on `device`."""
    mc = cfg.model
    return probe_backend(
        cfg.runtime.attention,
        device=device,
        dtype=TORCH_DTYPES[dtype],
        batch=cfg.batch.micro_batch,
        n_head=mc.n_head,
        seq_len=mc.block_size,
        head_dim=mc.n_embd // mc.n_head,
    )


def build_session(
    cfg: Config,
    *,
    start_step: int = 0,
    checkpoint_dir: str | None = None,
    phase: PhaseTimer = untimed,
) -> Session:
    """Validate, then build the model, optimizer, data pipeline and checkpointer on the device;
    each part timed by `phase` (a trial's set-up clock, train/trial/setup_clock.py): `device`
    (the device, threads, TF32, the process group), `checks` (the combination rules, which ask
    for the installed kernels), `model` (built, initialised, wrapped for torch.compile as asked,
    its optimizer, the DDP wrapper), `attention_probe`, `data` (the loader and its prefetcher)."""
    rt = cfg.runtime
    rank = current_rank()
    with phase("device"):
        device, dtype, threads = _open_device(cfg, rank)
    with phase("checks"):
        check_combinations(
            cfg,
            device_type=device.type,
            dtype=dtype,
            flash_impls=installed_flash_impls(),
            capability=float8_capability(device, rt.float8),
        )
        check_data(cfg)
    with phase("model"):
        raw_model, model, optimizer, fused = build_model(cfg, device)
        comms = None
        if rank.world > 1:
            comms = ExposedComms(raw_model.parameters())
            model = wrap_ddp(model, device=device, cfg=cfg.ddp)
    mc = cfg.model
    with phase("attention_probe"):
        # probed after the optimizer is built: neither consumes the seeded RNG, so the order is free
        backend = _attention_backend(cfg, device, dtype)
    with phase("data"):
        ckpt_cfg = cfg.checkpoint
        if checkpoint_dir is not None:
            ckpt_cfg = type(ckpt_cfg)(**{**vars(ckpt_cfg), "dir": checkpoint_dir})
        loader = make_loader(
            cfg,
            split="train",
            device_type=device.type,
            start_index=start_step * cfg.batch.grad_accum,
            rank=rank.rank,
            world=rank.world,
        )
        batches = DevicePrefetcher(loader, device)  # its loader's workers start here
    tokens_per_step = cfg.batch.micro_batch * cfg.batch.grad_accum * mc.block_size * rank.world
    return Session(
        cfg=cfg,
        device=device,
        dtype=dtype,
        raw_model=raw_model,
        model=model,
        optimizer=optimizer,
        fused_optimizer=fused,
        scaler=dev.grad_scaler(device, dtype),
        checkpointer=Checkpointer(ckpt_cfg),
        batches=batches,
        attention_backend=backend,
        threads=threads,
        flops_per_token=flops_per_token_of(mc, num_params=raw_model.num_params()),
        tokens_per_step=tokens_per_step,
        rank=rank,
        comms=comms,
        float8=float8_report(raw_model, cfg.runtime),
    )


def device_peaks(s: Session) -> tuple[str, Peak | None, Ceiling]:
    """The device's name, its spec peak for the dtype in use (GPUs only: a CPU has no spec
    peak), and the measured matmul ceiling (cached per machine)."""
    name = dev.device_name(s.device)
    peak = None
    if s.device.type == "cuda":
        peak = lookup_peak(name, s.dtype, tf32=s.cfg.runtime.tf32)
    return name, peak, measure_matmul_ceiling(s.device, s.dtype)


def make_phase_clock(device: torch.device) -> PhaseClock | EventPhaseClock:
    """CUDA events on a GPU (no host sync inside a step), the host clock elsewhere."""
    if device.type == "cuda":
        return EventPhaseClock(new_event=lambda: torch.cuda.Event(enable_timing=True))
    return PhaseClock()


def finish_step(s: Session, clock: PhaseClock | EventPhaseClock) -> dict[str, float]:
    """The step's one synchronize, then its phase times. The trial and the production run both
    end every step here, so the sweep measures the loop that trains."""
    dev.sync(s.device)
    return clock.take()


def check_finite(loss: float, step: int) -> None:
    """Stop on a NaN or infinite loss: a diverged configuration is a failure, not a measurement."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"loss is {loss} at step {step}")


def run_step(
    s: Session,
    *,
    lr: float,
    clock: PhaseClock | EventPhaseClock,
    micro_batches: int | None = None,
    checkpoint_step: int | None = None,
    save_rng: bool = False,
) -> tuple[torch.Tensor, dict[str, float], float | None]:
    """One optimizer step as the trial and the production run both take it.

    `train_step`, then a checkpoint save when `checkpoint_step` (the completed steps it records)
    is given, once the loss and the state are checked finite (train/run/finite.py), its stall
    charged to the clock's checkpoint phase, then the step's one synchronize (`finish_step`).
    `save_rng` adds the RNG state, read after the step, so that a resumed run draws what the
    uninterrupted one would have. Returns the mean loss (a device tensor), the
    phase times and the save's stall in seconds (None without a save).
    """
    loss = train_step(s, lr=lr, clock=clock, micro_batches=micro_batches)
    stall = None
    if checkpoint_step is not None and s.rank.main:  # one copy of the replicas' state
        # never write a non-finite state: keep-N would delete the last good checkpoint for it
        check_state_finite(
            step=checkpoint_step,
            loss=loss,
            model=s.raw_model,
            optimizer=s.optimizer,
            last_good=s.checkpointer.last_saved,
        )
        extra: dict = {"step": checkpoint_step}
        if save_rng:
            extra["rng"] = rng_state(s.device)
        stall = s.checkpointer.save(
            step=checkpoint_step, model=s.raw_model, optimizer=s.optimizer, extra=extra
        )
        clock.add("checkpoint", stall)
    return loss, finish_step(s, clock), stall


def train_step(
    s: Session,
    *,
    lr: float,
    clock: PhaseClock | EventPhaseClock,
    micro_batches: int | None = None,
) -> torch.Tensor:
    """One optimizer step over `grad_accum` micro-batches; returns the mean loss (a device tensor).

    Phases are charged to `clock`: fetching the next batch (and, on CUDA, waiting for its copy)
    to data_wait, forward+backward to compute, clip+update to optimizer. Checkpointing is the
    caller's, since only it knows the step number. `micro_batches` < grad_accum takes a short step
    of that many micro-batches (a trial's projection of a long step, train/trial/measurement.py);
    the loss is still the mean over the micro-batches taken.

    Data-parallel: the micro-batches before the last only accumulate (DDP's no_sync); the last
    one's backward all-reduces, and its time after the last gradient bucket was ready goes to
    `comms`, as does the loss's mean over the ranks (each rank's loss is over its own slice).
    """
    accum = micro_batches or s.cfg.batch.grad_accum
    for group in s.optimizer.param_groups:
        group["lr"] = lr
    amp = dev.autocast(s.device, s.dtype)
    total = torch.zeros((), device=s.device)
    for i in range(accum):
        sync = i == accum - 1
        with clock.phase("data_wait"):
            x, y, _ = s.batches.next_batch()
        with clock.phase("compute"), no_sync(s.model, sync):
            with amp:  # the model applies its SDPA backend itself (train/model/gpt.py)
                _, loss = s.model(x, y)
                loss = loss / accum  # the mean over the step, as one large batch would give
            if s.comms is not None and sync:
                s.comms.arm(clock)
            s.scaler.scale(loss).backward()
            total += loss.detach()
        if s.comms is not None and sync:
            s.comms.carve()
    if s.rank.world > 1:
        with clock.phase("comms"):
            total = mean_over_ranks(total, s.rank)
    with clock.phase("optimizer"):
        if s.cfg.optim.grad_clip > 0:
            s.scaler.unscale_(s.optimizer)
            nn.utils.clip_grad_norm_(s.raw_model.parameters(), s.cfg.optim.grad_clip)
        s.scaler.step(s.optimizer)
        s.scaler.update()
        s.optimizer.zero_grad(set_to_none=True)
    return total


def untimed_step(s: Session, micro_batches: int, *, lr: float) -> None:
    """One optimizer step of `micro_batches` at `lr`, on a clock nobody reads: the step the
    memory meter counts after a trial's window (train/measure/memory_meter.py)."""
    train_step(s, lr=lr, clock=PhaseClock(), micro_batches=micro_batches)


@torch.no_grad()
def eval_loss(s: Session, *, num_batches: int) -> float:
    """Mean validation loss over a fixed, seeded set of micro-batches (the same ones every time)."""
    s.model.eval()
    loader = make_loader(
        s.cfg,
        split="val",
        device_type=s.device.type,
        num_batches=num_batches,
        rank=s.rank.rank,
        world=s.rank.world,
    )
    losses = []
    # eager under either compile unit: the raw model of runtime.compile_unit=block holds compiled
    # regions, whose no-grad variant would compile again here, inside the timed run
    for x, y in loader:
        x = x.to(s.device, non_blocking=True)
        y = y.to(s.device, non_blocking=True)
        with dev.autocast(s.device, s.dtype), torch.compiler.set_stance("force_eager"):
            _, loss = s.raw_model(x, y)
        losses.append(loss.item())
    s.model.train()
    mean = torch.tensor(sum(losses) / len(losses), dtype=torch.float64, device=s.device)
    return float(mean_over_ranks(mean, s.rank).item())
