"""The search space: which trainer keys a sweep varies, parsed from YAML, and which points are safe.

Specs use Hydra's own override grammar (`choice(...)`, `range(a,b[,step])`, `interval(a,b)`,
`int(interval(a,b))`, `tag(log, ...)`), parsed by Hydra's parser so the meaning matches the command
line. A YAML list is a categorical, a plain scalar is a fixed override. Our one extension is the
batch split: `batch.micro_batch: {split: true, min: 1, max: 64}` (or `split()`) searches only the
micro-batch sizes that keep the tokens per step; `batch.grad_accum` is derived, never searched.

Pure and light: no torch (the child process does the torch work). Optuna is imported only where
distributions are built.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

    from sweeper.memory import OutOfMemory

log = logging.getLogger(__name__)

CUDA_ONLY_ATTENTION = ("efficient", "cudnn")
PREFIXES = ("model.", "data.", "batch.", "optim.", "checkpoint.", "runtime.", "trial.")
MICRO_BATCH, GRAD_ACCUM, WORKERS = "batch.micro_batch", "batch.grad_accum", "data.num_workers"
CHECKPOINT_EVERY, CHECKPOINT_DIR = "checkpoint.every_steps", "checkpoint.dir"
# Mirrors train.config.CUDAGRAPH_MODES (not imported: train.* imports torch). With gradient
# accumulation these error or silently corrupt gradients (pytorch/pytorch#169545, #96693).
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
SAMPLE_POINTS = 5_000  # random draws that estimate feasibility when a grid cannot be enumerated
_SCALARS = (str, int, float, bool, type(None))  # what Optuna's CategoricalDistribution accepts
_CALL = re.compile(r"^\s*(\w+)\s*\(")
_SPLIT = re.compile(r"^\s*split\s*\((.*)\)\s*$")


def cpus_here() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(kw_only=True)
class SpaceContext:
    """What the constraints depend on: the pinned batch, the machine and the composed config."""

    tokens_per_step: int  # tokens per optimizer step, all processes together (pinned)
    block_size: int  # sequence length of the model being swept
    world_size: int = 1  # processes taking part in one optimizer step
    # CPUs this process may use (bounds data workers)
    cpu_count: int = field(default_factory=cpus_here)
    device_type: str = "cpu"  # the resolved device: cpu | cuda
    bf16_supported: bool = False  # whether the CUDA device has bf16
    base: dict[str, Any] = field(default_factory=dict)  # flat dotted key -> trainer config value
    device_name: str = ""  # as torch names it (or a plan device); for messages and peaks
    # total device memory; None = no memory-model refusals (a CPU, unless a plan device is named)
    device_memory_gib: float | None = None
    # trials of this sweep that ran out of memory (sweeper/memory.py), appended as they happen
    ooms: list[OutOfMemory] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("tokens_per_step", "block_size", "world_size", "cpu_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SpaceContext.{name} must be a positive integer, got {value!r}")
        if self.device_type not in ("cpu", "cuda"):
            raise ValueError(
                f"SpaceContext.device_type must be cpu or cuda, got {self.device_type!r}"
            )


@dataclass(frozen=True, kw_only=True)
class Param:
    """One key of the space: categorical choices, an int or float range, or a fixed override."""

    key: str  # dotted trainer key, e.g. runtime.compile
    kind: str  # categorical | int | float | fixed
    choices: tuple[Any, ...] = ()  # categorical values, in the user's order
    low: int | float | None = None  # int/float lower bound, inclusive
    high: int | float | None = None  # int/float upper bound, inclusive
    step: int | float | None = None  # grid spacing; None for a continuous float
    log: bool = False  # sample on a log scale
    value: Any = None  # the value of a fixed param
    split: bool = False  # batch.micro_batch choices built from the batch split (grad_accum derived)
    spec: str = ""  # the spec as written, for messages

    def values(self) -> list[Any] | None:
        """Every value this param can take, or None when it is a continuous float."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "fixed":
            return [self.value]
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        n = round((self.high - self.low) / self.step) + 1
        return [round(self.low + i * self.step, 12) for i in range(n)]

    def sample(self, rng: random.Random) -> Any:
        """A random value (uniform, or log-uniform for log params) for feasibility estimates."""
        values = self.values()
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
            return min(max(round(x), self.low), self.high) if self.kind == "int" else x
        if values is not None:
            return rng.choice(values)
        return rng.uniform(self.low, self.high)


# ---- parsing ------------------------------------------------------------------------------------


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _fail(key: str, spec: Any, problem: str, fix: str) -> ValueError:
    return ValueError(f"search space: {key}: {spec!r}: {problem}; {fix}")


def _per_device(ctx: SpaceContext, block_size: int, tokens: int) -> int | None:
    """Sequences per device per optimizer step, or None when the tokens do not divide evenly."""
    n, rem = divmod(tokens, block_size * ctx.world_size)
    return n if n > 0 and rem == 0 else None


def _split_param(key: str, spec: Any, lo: int, hi: int | None, ctx: SpaceContext) -> Param:
    if key != MICRO_BATCH:
        raise _fail(key, spec, "split applies only to batch.micro_batch", "move it there")
    per_device = _per_device(ctx, ctx.block_size, ctx.tokens_per_step)
    if per_device is None:
        raise _fail(key, spec, f"batch.tokens_per_step={ctx.tokens_per_step} is not a multiple of "
                    f"model.block_size ({ctx.block_size}) x world ({ctx.world_size})",
                    f"use a multiple of {ctx.block_size * ctx.world_size}")
    hi = per_device if hi is None else hi
    divisors = [mb for mb in range(1, per_device + 1) if per_device % mb == 0]
    kept = tuple(mb for mb in divisors if lo <= mb <= hi)
    if not kept:
        raise _fail(key, spec, f"split has no valid value in [{lo}, {hi}]",
                    f"valid micro_batch values for tokens_per_step={ctx.tokens_per_step} are "
                    f"{divisors}; widen min/max")
    return Param(key=key, kind="categorical", choices=kept, split=True, spec=str(spec))


def _parse_split(key: str, spec: Any, ctx: SpaceContext) -> Param:
    if isinstance(spec, dict):
        opts = dict(spec)
        if opts.pop("split", None) is not True:
            raise _fail(key, spec, "a mapping spec must be the batch split",
                        "write {split: true, min: 1, max: 64}, a choice(...) or a list")
    else:
        args = _SPLIT.match(spec).group(1).strip()  # type: ignore[union-attr]
        try:
            opts = {k.strip(): int(v) for k, v in (a.split("=") for a in args.split(",") if a)}
        except ValueError:
            fix = "write split(min=1,max=64)"
            raise _fail(key, spec, "cannot read split's arguments", fix) from None
    unknown = set(opts) - {"min", "max"}
    if unknown or not all(isinstance(v, int) and v >= 1 for v in opts.values()):
        raise _fail(key, spec, f"split takes only positive integers min and max, got {opts}",
                    "write {split: true, min: 1, max: 64}")
    return _split_param(key, spec, opts.get("min", 1), opts.get("max"), ctx)


def _range_param(key: str, spec: str, sweep: Any) -> Param:
    start, stop, step = sweep.start, sweep.stop, sweep.step
    if step == 0:
        raise _fail(key, spec, "range step is 0", "use a non-zero step")
    # Hydra's range excludes stop, like Python's: range(0,5) is 0..4. (Hydra's Optuna sweeper passes
    # stop to Optuna as an inclusive high, one value too many; we do not.)
    n = max(0, math.ceil((stop - start) / step - 1e-9))
    is_int = all(isinstance(v, int) for v in (start, stop, step))
    values = [start + i * step if is_int else round(start + i * step, 12) for i in range(n)]
    if not values:
        raise _fail(key, spec, "range is empty (its stop is excluded, like Python's range)",
                    "e.g. range(0,5) gives 0,1,2,3,4")
    log_ = "log" in sweep.tags
    if log_ and (not is_int or abs(step) != 1):
        raise _fail(key, spec, "a log scale cannot have a step", "use tag(log, int(interval(a,b)))")
    return Param(key=key, kind="int" if is_int else "float", low=min(values), high=max(values),
                 step=abs(step), log=log_, spec=spec)


def _parse_string(key: str, spec: str, ctx: SpaceContext) -> Param:
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if _SPLIT.match(spec):
        return _parse_split(key, spec, ctx)
    try:
        value = _parser().parse_overrides([f"{key}={spec}"])[0].value()
    except Exception as err:  # Hydra raises OverrideParseException with the grammar's message
        if _CALL.match(spec) or "," in spec:
            detail = str(err).splitlines()[1] if "\n" in str(err) else str(err)
            raise _fail(key, spec, f"not a valid sweep ({detail})",
                        "see https://hydra.cc/docs/advanced/override_grammar/extended/") from None
        return Param(key=key, kind="fixed", value=spec, spec=spec)
    if isinstance(value, ChoiceSweep):
        if "log" in value.tags:
            raise _fail(key, spec, "log applies to interval() and range()", "drop the tag")
        return _choice_param(key, spec, list(value.list))
    if isinstance(value, RangeSweep):
        return _range_param(key, spec, value)
    if isinstance(value, IntervalSweep):
        low, high, log_ = value.start, value.end, "log" in value.tags
        is_int = isinstance(low, int) and isinstance(high, int)
        if low > high:
            raise _fail(key, spec, f"low {low} > high {high}", f"write interval({high},{low})")
        if log_ and low <= 0:
            raise _fail(key, spec, "a log scale needs low > 0", "raise the lower bound")
        return Param(key=key, kind="int" if is_int else "float", low=low, high=high,
                     step=1 if is_int else None, log=log_, spec=spec)
    if not isinstance(value, _SCALARS):
        raise _fail(key, spec, f"{type(value).__name__} values are not supported",
                    "use a scalar, choice(), range(), interval() or a YAML list")
    # A plain element. YAML already typed it as a string, so keep a string ('3' stays '3'); only
    # Hydra's quotes are taken off.
    return Param(key=key, kind="fixed", value=value if isinstance(value, str) else spec, spec=spec)


def _choice_param(key: str, spec: Any, items: list[Any]) -> Param:
    if not items:
        raise _fail(key, spec, "empty choice", "list at least one value")
    from hydra.core.override_parser.types import QuotedString

    # a quoted element ('nan', 'null') is the string itself, not what the bare word would parse to
    items = [c.text if isinstance(c, QuotedString) else c for c in items]
    bad = [c for c in items if not isinstance(c, _SCALARS)]
    if bad:
        raise _fail(key, spec, f"choices must be str/int/float/bool/null, got {bad!r}",
                    "list scalar values only")
    unique = tuple(dict.fromkeys(items))  # keeps order; 1 and True collapse, as in a dict
    return Param(key=key, kind="categorical", choices=unique, spec=str(spec))


def _parse_one(key: str, spec: Any, ctx: SpaceContext) -> Param:
    if not isinstance(key, str) or not key.startswith(PREFIXES):
        raise _fail(str(key), spec, "unknown key", f"keys must start with one of {PREFIXES}")
    if isinstance(spec, Mapping):  # a dict, or an OmegaConf DictConfig
        return _parse_split(key, dict(spec), ctx)
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return _choice_param(key, spec, list(spec))
    if isinstance(spec, str):
        return _parse_string(key, spec, ctx)
    if isinstance(spec, _SCALARS):
        return Param(key=key, kind="fixed", value=spec, spec=str(spec))
    raise _fail(key, spec, f"unsupported spec type {type(spec).__name__}",
                "use a sweep string, a list, a scalar or {split: true}")


def _clamp_workers(p: Param, cpus: int) -> Param:
    """Data workers beyond the CPU count only fight the trainer for cores: drop them up front."""
    if p.kind == "int":
        if p.low > cpus:
            raise _fail(p.key, p.spec, f"every value exceeds the {cpus} CPUs here",
                        f"search values <= {cpus}")
        high = p.low + (cpus - p.low) // p.step * p.step
        if high < p.high:
            log.info("%s: dropped values above the %d CPUs here (high %s -> %s)", p.key, cpus,
                     p.high, high)
            return replace(p, high=high)
    elif p.kind == "categorical":
        kept = tuple(c for c in p.choices if not (isinstance(c, int) and c > cpus))
        if not kept:
            raise _fail(p.key, p.spec, f"every choice exceeds the {cpus} CPUs here",
                        f"choose values <= {cpus}")
        if len(kept) < len(p.choices):
            dropped = [c for c in p.choices if c not in kept]
            log.info("%s: dropped %s (above the %d CPUs here)", p.key, dropped, cpus)
            return replace(p, choices=kept)
    return p


def _unusable_dir(path: Any) -> str | None:
    """Why a checkpoint target cannot be written on this machine, or None. The folder or its
    parent must be a writable directory (a trial makes its own sub-folder and removes it)."""
    target = Path(str(path)).expanduser().absolute()
    for folder in (target, target.parent):
        if folder.is_dir():
            return None if os.access(folder, os.W_OK) else f"{folder} is not writable here"
    return f"{target.parent} does not exist here"


def _keep_choices(p: Param, reasons: dict[Any, str | None], *, problem: str, fix: str) -> Param:
    """`p` without the choices that have a reason not to run here (said in the log); an error
    naming the key and `fix` when none is left."""
    kept = tuple(c for c in p.choices if reasons[c] is None)
    if not kept:
        raise _fail(p.key, p.spec, f"{problem} ({'; '.join(map(str, reasons.values()))})", fix)
    if len(kept) < len(p.choices):
        log.warning("%s: dropped %s (%s)", p.key, [c for c in p.choices if c not in kept],
                    "; ".join(r for r in reasons.values() if r))
        return replace(p, choices=kept)
    return p


def _drop_missing_dirs(p: Param) -> Param:
    """Checkpoint targets this machine lacks (e.g. /dev/shm off Linux) are dropped, not tried."""
    return _keep_choices(
        p, {c: _unusable_dir(c) for c in p.choices}, problem="no target is writable here",
        fix="list folders that exist (or whose parent exists) on this machine",
    )  # fmt: skip


def parse_space(params: dict[str, Any] | None, ctx: SpaceContext) -> SearchSpace:
    """Turn `params: {dotted.key: spec}` into a SearchSpace; every user error is a ValueError."""
    if params is not None and not isinstance(params, dict):
        from omegaconf import OmegaConf  # a DictConfig straight from Hydra

        params = OmegaConf.to_container(params, resolve=True)  # type: ignore[assignment]
    parsed = [_parse_one(k, v, ctx) for k, v in (params or {}).items()]
    parsed = [_clamp_workers(p, ctx.cpu_count) if p.key == WORKERS else p for p in parsed]
    parsed = [
        _drop_missing_dirs(p) if p.key == CHECKPOINT_DIR and p.kind == "categorical" else p
        for p in parsed
    ]
    if not any(p.key == "runtime.device" for p in parsed):  # else the device is searched too
        parsed = [
            _drop_unsupported(p, ctx) if p.key in DEVICE_BOUND and p.kind == "categorical" else p
            for p in parsed
        ]
    by_key = {p.key: p for p in parsed}
    accum, mb = by_key.get(GRAD_ACCUM), by_key.get(MICRO_BATCH)
    # grad_accum follows micro_batch: searching it, or pinning it while micro_batch varies, would
    # change the tokens per step.
    if accum is not None and (accum.kind != "fixed" or (mb is not None and mb.kind != "fixed")):
        raise _fail(GRAD_ACCUM, accum.spec, "batch.grad_accum cannot be searched",
                    "search batch.micro_batch with split: true and grad_accum follows")
    if mb is not None and mb.split:
        for pinned in ("model.block_size", "batch.tokens_per_step"):
            if pinned in by_key:
                raise _fail(pinned, by_key[pinned].spec, "the split is computed for one value",
                            f"remove {pinned} from the search space (set it in the trainer config)")
    return SearchSpace(params=tuple(parsed), ctx=ctx)


# ---- constraints --------------------------------------------------------------------------------


def derive_grad_accum(micro_batch: Any, point: dict[str, Any], ctx: SpaceContext) -> int | None:
    """grad_accum that keeps the tokens per step for this micro_batch, or None if none does."""
    block = point.get("model.block_size", ctx.block_size)
    per_device = _per_device(ctx, block, point.get("batch.tokens_per_step", ctx.tokens_per_step))
    if per_device is None or not isinstance(micro_batch, int) or micro_batch < 1:
        return None
    return per_device // micro_batch if per_device % micro_batch == 0 else None


DEVICE_BOUND = ("runtime.dtype", "runtime.attention")  # keys whose values the device may lack


def unsupported_here(key: str, value: Any, *, device_type: str, ctx: SpaceContext) -> str | None:
    """Why `key=value` cannot run on this device whatever the other knobs are, or None."""
    if key == "runtime.dtype":
        if device_type == "cpu" and value == "fp16":
            return "runtime.dtype=fp16 is not supported on CPU"
        if device_type == "cuda" and value == "bf16" and not ctx.bf16_supported:
            return "runtime.dtype=bf16 on a CUDA device without bf16 support"
    if key == "runtime.attention" and device_type == "cpu" and value in CUDA_ONLY_ATTENTION:
        # PyTorch's CPU SDPA has only the flash and math kernels (train.model.attention probes
        # this).
        return f"runtime.attention={value} has no CPU kernel"
    return None


def _drop_unsupported(p: Param, ctx: SpaceContext) -> Param:
    """A choice the device cannot run would only ever be refused: drop it before sampling, so it
    costs no trial (a sampler learns nothing from refused points)."""
    device = str(ctx.base.get("runtime.device", "auto"))
    device_type = "cpu" if device == "cpu" else ctx.device_type
    return _keep_choices(
        p, {c: unsupported_here(p.key, c, device_type=device_type, ctx=ctx) for c in p.choices},
        problem="no choice runs here",
        fix="search values this device supports, or run the sweep where they exist",
    )  # fmt: skip


def check_point(point: dict[str, Any], ctx: SpaceContext, *, memory: bool = True) -> str | None:
    """Why this point (merged over ctx.base) is invalid or unsafe, or None when it is fine.

    memory=False leaves out the memory rules (the memory model and this sweep's out-of-memory
    trials), to count what they drop among the otherwise feasible points.
    """
    full = {**ctx.base, **point}
    if MICRO_BATCH in point and GRAD_ACCUM not in point:
        full[GRAD_ACCUM] = derive_grad_accum(point[MICRO_BATCH], point, ctx)
    mb, accum = full.get(MICRO_BATCH), full.get(GRAD_ACCUM)
    # The context is the authority for the pinned batch unless the point itself changes it.
    tokens = point.get("batch.tokens_per_step", ctx.tokens_per_step)
    block = point.get("model.block_size", ctx.block_size)
    ints = isinstance(mb, int) and isinstance(accum, int)
    if MICRO_BATCH in full and (not ints or mb * accum * block * ctx.world_size != tokens):
        return (f"invalid split: batch.micro_batch={mb} x batch.grad_accum={accum} x "
                f"model.block_size={block} x world={ctx.world_size} != "
                f"batch.tokens_per_step={tokens}")
    device = str(full.get("runtime.device", "auto"))
    if device.startswith("cuda") and ctx.device_type != "cuda":
        return f"runtime.device={device} but this machine has no CUDA device"
    device_type = "cpu" if device == "cpu" else ctx.device_type
    compile_mode = full.get("runtime.compile")
    if device_type == "cuda" and compile_mode in CUDAGRAPH_MODES and (accum or 1) > 1:
        return (f"runtime.compile={compile_mode} captures CUDA graphs, unsafe with "
                f"batch.grad_accum={accum} > 1 (pytorch/pytorch#169545, #96693)")
    for key in DEVICE_BOUND:
        reason = unsupported_here(key, full.get(key), device_type=device_type, ctx=ctx)
        if reason is not None:
            return reason
    from train.config import attention_dtype_conflict  # torch-free: the trainer's own rule

    reason = attention_dtype_conflict(
        str(full.get("runtime.attention", "auto")),
        str(full.get("runtime.dtype", "auto")),
        device_type=device_type,
        bf16_supported=ctx.bf16_supported,
    )
    if reason is not None:
        return reason
    workers = full.get(WORKERS)
    if isinstance(workers, int) and workers > ctx.cpu_count:
        return f"data.num_workers={workers} exceeds the {ctx.cpu_count} CPUs here"
    every, min_steps = full.get(CHECKPOINT_EVERY), full.get("trial.min_steps")
    if isinstance(every, int) and isinstance(min_steps, int) and every > min_steps:
        # the window may stop at min_steps: a longer interval leaves the save unmeasured
        return (f"checkpoint.every_steps={every} > trial.min_steps={min_steps}: the measured "
                f"window may end before the first save; use an interval <= {min_steps} "
                "(hydra.sweeper.planned_checkpoint_every prices saves at the production interval)")
    if memory and device_type == ctx.device_type:
        return _memory_refusal(full, ctx)
    return None


def _memory_refusal(full: dict[str, Any], ctx: SpaceContext) -> str | None:
    """The memory rules (sweeper/memory.py): an earlier out-of-memory trial, the memory model."""
    from sweeper.memory import memory_reason, oom_reason

    if ctx.ooms:
        reason = oom_reason(full, ctx.ooms, device_type=ctx.device_type)
        if reason is not None:
            return reason
    if ctx.device_memory_gib is None:
        return None
    return memory_reason(
        full,
        device_type=ctx.device_type,
        bf16_supported=ctx.bf16_supported,
        device_gib=ctx.device_memory_gib,
        device_name=ctx.device_name,
    )


# ---- the space ----------------------------------------------------------------------------------


def format_override(key: str, value: Any) -> str:
    """`key=value` in Hydra's grammar, quoting strings that would parse as something else."""
    if isinstance(value, bool) or value is None:
        text = {True: "true", False: "false", None: "null"}[value]
    elif isinstance(value, int | float):
        text = repr(value)
    elif isinstance(value, str):
        text = value
        if not _roundtrips(key, text, value):
            # In Hydra's quoted strings a quote is escaped with a backslash, and backslashes only
            # need doubling right before a quote or at the end.
            body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
            text = "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body) + "'"
            if not _roundtrips(key, text, value):
                raise ValueError(f"{key}: cannot write {value!r} as a Hydra override")
    else:
        raise ValueError(f"{key}: overrides take scalars, got {type(value).__name__} {value!r}")
    return f"{key}={text}"


def _roundtrips(key: str, text: str, value: str) -> bool:
    try:
        parsed = _parser().parse_overrides([f"{key}={text}"])[0]
    except Exception:  # not valid grammar as written
        return False
    return not parsed.is_sweep_override() and parsed.value() == value and isinstance(
        parsed.value(), str
    )


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """The parsed space in the user's key order, with the context it was parsed for."""

    params: tuple[Param, ...]  # every key, searched or fixed
    ctx: SpaceContext  # the pinned batch and the machine the space was parsed for

    @property
    def searched(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind != "fixed")

    @property
    def fixed(self) -> dict[str, Any]:
        return {p.key: p.value for p in self.params if p.kind == "fixed"}

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distributions of the searched keys."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, BaseDistribution] = {}
        for p in self.searched:
            if p.kind == "categorical":
                out[p.key] = CategoricalDistribution(p.choices)
            elif p.kind == "int":
                out[p.key] = IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step))
            else:
                out[p.key] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        return out

    def point(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's explicit keys: fixed and searched values, plus the derived grad_accum."""
        missing = [p.key for p in self.searched if p.key not in params]
        unknown = [k for k in params if k not in {p.key for p in self.searched}]
        if missing or unknown:
            raise ValueError(f"params must hold exactly the searched keys: missing {missing}, "
                             f"unknown {unknown}")
        explicit = {p.key: params[p.key] if p.kind != "fixed" else p.value for p in self.params}
        out: dict[str, Any] = {}
        for key, value in explicit.items():
            out[key] = value
            if key == MICRO_BATCH and GRAD_ACCUM not in explicit:
                accum = derive_grad_accum(value, explicit, self.ctx)
                if accum is not None:  # otherwise check_point names the invalid split
                    out[GRAD_ACCUM] = accum
        return out

    def to_overrides(self, params: dict[str, Any]) -> list[str]:
        """Hydra overrides for the child, e.g. ["batch.micro_batch=4", "batch.grad_accum=16"]."""
        return [format_override(k, v) for k, v in self.point(params).items()]

    def check(self, params: dict[str, Any]) -> str | None:
        """check_point for searched params, with the fixed ones and the derived grad_accum added."""
        return check_point(self.point(params), self.ctx)

    def grid(self) -> dict[str, list[Any]]:
        """Every searched key's values, for Optuna's GridSampler."""
        out = {}
        for p in self.searched:
            values = p.values()
            if values is None:
                raise ValueError(
                    f"search space: {p.key}: {p.spec!r} is a continuous interval, which a grid "
                    "cannot enumerate; use choice(...) or range(a,b,step)"
                )
            out[p.key] = values
        return out

    def grid_points(self, ctx: SpaceContext | None = None, limit: int = 100_000) -> list[dict]:
        """Every feasible point of the grid (searched keys only)."""
        grid = self.grid()
        size = math.prod(len(v) for v in grid.values())
        if size > limit:
            raise ValueError(f"search space: the grid has {size} points, more than {limit}; "
                             "narrow it or use a sampler other than grid")
        ctx = ctx or self.ctx
        combos = itertools.product(*grid.values())
        points = [dict(zip(grid, combo, strict=True)) for combo in combos]
        return [pt for pt in points if check_point(self.point(pt), ctx) is None]

    def _scan(self, ctx: SpaceContext, limit: int) -> tuple[int, Counter[str]]:
        """(feasible points, reasons seen): enumerated when small, else over SAMPLE_POINTS draws."""
        lists = [p.values() for p in self.searched]
        if all(v is not None for v in lists) and math.prod(len(v) for v in lists) <= limit:
            combos: Any = itertools.product(*lists)
        else:
            rng = random.Random(0)
            combos = ([p.sample(rng) for p in self.searched] for _ in range(SAMPLE_POINTS))
        keys = [p.key for p in self.searched]
        ok, reasons = 0, Counter[str]()
        for combo in combos:
            reason = check_point(self.point(dict(zip(keys, combo, strict=True))), ctx)
            ok += reason is None
            if reason is not None:
                reasons[reason] += 1
        return ok, reasons

    def feasible_count(self, ctx: SpaceContext | None = None, limit: int = 100_000) -> int:
        """Feasible points of a finite grid of <= `limit` points, else of SAMPLE_POINTS draws."""
        return self._scan(ctx or self.ctx, limit)[0]

    def require_feasible(self, ctx: SpaceContext | None = None) -> None:
        """Refuse, before anything runs, a space in which no point is valid."""
        ok, reasons = self._scan(ctx or self.ctx, 100_000)
        if ok == 0:
            listed = "; ".join(f"{r} ({n}x)" for r, n in reasons.most_common(10))
            raise ValueError(f"search space has no valid point: {listed}")

    def defaults_distance(self, params: dict[str, Any], base: dict[str, Any]) -> int:
        """How many searched keys differ from the base config (fewer = simpler when results tie)."""
        return sum(
            1 for p in self.searched
            if p.key in params and not _same(params[p.key], base.get(p.key, _MISSING))
        )


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    if b is _MISSING:
        return False
    return a == b or str(a).lower() == str(b).lower()


def baseline_params(space, base: dict, *, device_type: str, bf16: bool) -> dict | None:
    """The searched keys at the values of the composed config, if that point lies in the space.

    One stand-in: a starting config that never saves a checkpoint, in a space that searches the
    save interval (every trial there measures a save), is measured at the first interval."""
    params = {}
    for p in space.searched:
        value = base.get(p.key)
        if p.key == "runtime.dtype" and value == "auto":  # as train.run.loop.resolve_dtype does
            value = "bf16" if device_type == "cuda" and bf16 else "fp32"
        if p.key == "checkpoint.every_steps" and value == 0 and p.kind == "categorical":
            value = p.choices[0]
        if p.kind == "categorical" and value not in p.choices:
            return None
        if p.kind in ("int", "float") and (value is None or not p.low <= value <= p.high):
            return None
        params[p.key] = value
    return params if space.check(params) is None else None
