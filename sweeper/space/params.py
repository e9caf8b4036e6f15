"""One key of a search space, parsed from its spec, and the values it may take on this machine.

Specs use Hydra's own override grammar (`choice(...)`, `range(a,b[,step])`, `interval(a,b)`,
`int(interval(a,b))`, `tag(log, ...)`), parsed by Hydra's parser so the meaning matches the command
line. A YAML list is a categorical, a plain scalar is a fixed override. Our one extension is the
batch split: `batch.micro_batch: {split: true, min: 1, max: 64}` (or `split()`) searches only the
micro-batch sizes that keep the tokens per step (train.core.config.valid_splits).

Choices this machine cannot run (data workers beyond its CPUs, checkpoint folders it lacks,
precisions and kernels its device lacks) are dropped here, before any sampler sees them.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweeper.space.constraints import SpaceContext, unsupported_here
from train.core import hooks
from train.core.keys import DEVICE, LOSS, MICRO_BATCH, NPROC, RECOMPUTE
from train.core.rules import SELECTIVE, Refusal, parse_activation_checkpointing, valid_splits

log = logging.getLogger(__name__)

PREFIXES = ("model.", "data.", "batch.", "optim.", "checkpoint.", "runtime.", "ddp.", "trial.")
# fixed for a whole sweep: the micro-batch splits and the GPU slots are sized from it
NOT_SEARCHED = {NPROC: "set it once for the sweep: runtime.nproc=N on the command line"}
_SCALARS = (str, int, float, bool, type(None))  # what Optuna's CategoricalDistribution accepts
_CALL = re.compile(r"^\s*(\w+)\s*\(")
_SPLIT = re.compile(r"^\s*split\s*\((.*)\)\s*$")


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


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def fail(key: str, spec: Any, problem: str, fix: str) -> ValueError:
    return ValueError(f"search space: {key}: {spec!r}: {problem}; {fix}")


def _split_param(key: str, spec: Any, lo: int, hi: int | None, ctx: SpaceContext) -> Param:
    if key != MICRO_BATCH:
        raise fail(key, spec, "split applies only to batch.micro_batch", "move it there")
    divisors = [
        mb
        for mb, _ in valid_splits(
            tokens_per_step=ctx.tokens_per_step, block_size=ctx.block_size, world=ctx.world_size
        )
    ]
    if not divisors:
        raise fail(
            key,
            spec,
            f"batch.tokens_per_step={ctx.tokens_per_step} is not a multiple of "
            f"model.block_size ({ctx.block_size}) x world ({ctx.world_size})",
            f"use a multiple of {ctx.block_size * ctx.world_size}",
        )
    hi = divisors[-1] if hi is None else hi  # the largest: every sequence in one micro-batch
    kept = tuple(mb for mb in divisors if lo <= mb <= hi)
    if not kept:
        raise fail(
            key,
            spec,
            f"split has no valid value in [{lo}, {hi}]",
            f"valid micro_batch values for tokens_per_step={ctx.tokens_per_step} are "
            f"{divisors}; widen min/max",
        )
    return Param(key=key, kind="categorical", choices=kept, split=True, spec=str(spec))


def _parse_split(key: str, spec: Any, ctx: SpaceContext) -> Param:
    if isinstance(spec, dict):
        opts = dict(spec)
        if opts.pop("split", None) is not True:
            raise fail(
                key,
                spec,
                "a mapping spec must be the batch split",
                "write {split: true, min: 1, max: 64}, a choice(...) or a list",
            )
    else:
        args = _SPLIT.match(spec).group(1).strip()  # type: ignore[union-attr]
        try:
            opts = {k.strip(): int(v) for k, v in (a.split("=") for a in args.split(",") if a)}
        except ValueError:
            fix = "write split(min=1,max=64)"
            raise fail(key, spec, "cannot read split's arguments", fix) from None
    unknown = set(opts) - {"min", "max"}
    if unknown or not all(isinstance(v, int) and v >= 1 for v in opts.values()):
        raise fail(
            key,
            spec,
            f"split takes only positive integers min and max, got {opts}",
            "write {split: true, min: 1, max: 64}",
        )
    return _split_param(key, spec, opts.get("min", 1), opts.get("max"), ctx)


def _range_param(key: str, spec: str, sweep: Any) -> Param:
    start, stop, step = sweep.start, sweep.stop, sweep.step
    if step == 0:
        raise fail(key, spec, "range step is 0", "use a non-zero step")
    # Hydra's range excludes stop, like Python's: range(0,5) is 0..4. (Hydra's Optuna sweeper passes
    # stop to Optuna as an inclusive high, one value too many; we do not.)
    n = max(0, math.ceil((stop - start) / step - 1e-9))
    is_int = all(isinstance(v, int) for v in (start, stop, step))
    values = [start + i * step if is_int else round(start + i * step, 12) for i in range(n)]
    if not values:
        raise fail(
            key,
            spec,
            "range is empty (its stop is excluded, like Python's range)",
            "e.g. range(0,5) gives 0,1,2,3,4",
        )
    log_ = "log" in sweep.tags
    if log_ and (not is_int or abs(step) != 1):
        raise fail(key, spec, "a log scale cannot have a step", "use tag(log, int(interval(a,b)))")
    return Param(
        key=key,
        kind="int" if is_int else "float",
        low=min(values),
        high=max(values),
        step=abs(step),
        log=log_,
        spec=spec,
    )


def _parse_string(key: str, spec: str, ctx: SpaceContext) -> Param:
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if _SPLIT.match(spec):
        return _parse_split(key, spec, ctx)
    try:
        value = _parser().parse_overrides([f"{key}={spec}"])[0].value()
    except Exception as err:  # Hydra raises OverrideParseException with the grammar's message
        if _CALL.match(spec) or "," in spec:
            detail = str(err).splitlines()[1] if "\n" in str(err) else str(err)
            raise fail(
                key,
                spec,
                f"not a valid sweep ({detail})",
                "see https://hydra.cc/docs/advanced/override_grammar/extended/",
            ) from None
        return Param(key=key, kind="fixed", value=spec, spec=spec)
    if isinstance(value, ChoiceSweep):
        if "log" in value.tags:
            raise fail(key, spec, "log applies to interval() and range()", "drop the tag")
        return _choice_param(key, spec, list(value.list))
    if isinstance(value, RangeSweep):
        return _range_param(key, spec, value)
    if isinstance(value, IntervalSweep):
        low, high, log_ = value.start, value.end, "log" in value.tags
        is_int = isinstance(low, int) and isinstance(high, int)
        if low > high:
            raise fail(key, spec, f"low {low} > high {high}", f"write interval({high},{low})")
        if log_ and low <= 0:
            raise fail(key, spec, "a log scale needs low > 0", "raise the lower bound")
        return Param(
            key=key,
            kind="int" if is_int else "float",
            low=low,
            high=high,
            step=1 if is_int else None,
            log=log_,
            spec=spec,
        )
    if not isinstance(value, _SCALARS):
        raise fail(
            key,
            spec,
            f"{type(value).__name__} values are not supported",
            "use a scalar, choice(), range(), interval() or a YAML list",
        )
    # A plain element. YAML already typed it as a string, so keep a string ('3' stays '3'); only
    # Hydra's quotes are taken off.
    return Param(key=key, kind="fixed", value=value if isinstance(value, str) else spec, spec=spec)


def _choice_param(key: str, spec: Any, items: list[Any]) -> Param:
    if not items:
        raise fail(key, spec, "empty choice", "list at least one value")
    from hydra.core.override_parser.types import QuotedString

    # a quoted element ('nan', 'null') is the string itself, not what the bare word would parse to
    items = [c.text if isinstance(c, QuotedString) else c for c in items]
    bad = [c for c in items if not isinstance(c, _SCALARS)]
    if bad:
        raise fail(
            key,
            spec,
            f"choices must be str/int/float/bool/null, got {bad!r}",
            "list scalar values only",
        )
    unique = tuple(dict.fromkeys(items))  # keeps order; 1 and True collapse, as in a dict
    return Param(key=key, kind="categorical", choices=unique, spec=str(spec))


def parse_param(key: str, spec: Any, ctx: SpaceContext) -> Param:
    return drop_gpu_levers(_parse_param(key, spec, ctx), ctx)


def _parse_param(key: str, spec: Any, ctx: SpaceContext) -> Param:
    prefixes = (*PREFIXES, f"{hooks.SECTION}.") if hooks.enabled() else PREFIXES  # test hooks
    if not isinstance(key, str) or not key.startswith(prefixes):
        raise fail(str(key), spec, "unknown key", f"keys must start with one of {prefixes}")
    if key in NOT_SEARCHED and not isinstance(spec, _SCALARS):
        raise fail(key, spec, "cannot be searched", NOT_SEARCHED[key])
    if isinstance(spec, Mapping):  # a dict, or an OmegaConf DictConfig
        return _parse_split(key, dict(spec), ctx)
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return _choice_param(key, spec, list(spec))
    if isinstance(spec, str):
        return _parse_string(key, spec, ctx)
    if isinstance(spec, _SCALARS):
        return Param(key=key, kind="fixed", value=spec, spec=str(spec))
    raise fail(
        key,
        spec,
        f"unsupported spec type {type(spec).__name__}",
        "use a sweep string, a list, a scalar or {split: true}",
    )


def clamp_workers(p: Param, cpus: int) -> Param:
    """Data workers beyond the CPU count only fight the trainer for cores: drop them up front."""
    if p.kind == "int":
        if p.low > cpus:
            raise fail(
                p.key,
                p.spec,
                f"every value exceeds the {cpus} CPUs here",
                f"search values <= {cpus}",
            )
        high = p.low + (cpus - p.low) // p.step * p.step
        if high < p.high:
            log.info(
                "%s: dropped values above the %d CPUs here (high %s -> %s)",
                p.key,
                cpus,
                p.high,
                high,
            )
            return replace(p, high=high)
    elif p.kind == "categorical":
        kept = tuple(c for c in p.choices if not (isinstance(c, int) and c > cpus))
        if not kept:
            raise fail(
                p.key,
                p.spec,
                f"every choice exceeds the {cpus} CPUs here",
                f"choose values <= {cpus}",
            )
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


def _keep_choices(
    p: Param, reasons: Mapping[Any, Refusal | str | None], *, problem: str, fix: str
) -> Param:
    """`p` without the choices that have a reason not to run here (said in the log); an error
    naming the key and `fix` when none is left."""
    kept = tuple(c for c in p.choices if reasons[c] is None)
    if not kept:
        raise fail(p.key, p.spec, f"{problem} ({'; '.join(map(str, reasons.values()))})", fix)
    if len(kept) < len(p.choices):
        log.warning(dropped_text(p.key, reasons))
        return replace(p, choices=kept)
    return p


def dropped_text(key: str, reasons: Mapping[Any, Refusal | str | None]) -> str:
    """The dropped choices folded for a reader: a line that counts and names them, then a line
    per distinct reason with the choices it drops (a rule's `Refusal` by its reason alone, the
    choice it names being listed before it), e.g.
    `runtime.attention: dropped 4 of 7 choices: efficient, cudnn, fa3, fa4` and under it
    `  efficient, cudnn: has no CPU kernel`."""
    dropped = [str(c) for c, why in reasons.items() if why]
    by_reason: dict[str, list[str]] = {}
    for c, why in reasons.items():
        if why:
            shown = why.reason if isinstance(why, Refusal) else why
            by_reason.setdefault(shown, []).append(str(c))
    head = f"{key}: dropped {len(dropped)} of {len(reasons)} choices: {', '.join(dropped)}"
    return "\n".join([head, *(f"  {', '.join(cs)}: {why}" for why, cs in by_reason.items())])


def drop_missing_dirs(p: Param) -> Param:
    """Checkpoint targets this machine lacks (e.g. /dev/shm off Linux) are dropped, not tried."""
    return _keep_choices(
        p,
        {c: _unusable_dir(c) for c in p.choices},
        problem="no target is writable here",
        fix="list folders that exist (or whose parent exists) on this machine",
    )


def drop_unsupported(p: Param, ctx: SpaceContext) -> Param:
    """A choice the device cannot run would only ever be refused: drop it before sampling, so it
    costs no trial (a sampler learns nothing from refused points)."""
    device = str(ctx.base.get(DEVICE, "auto"))
    device_type = "cpu" if device == "cpu" else ctx.device_type
    return _keep_choices(
        p,
        {c: unsupported_here(p.key, c, device_type=device_type, ctx=ctx) for c in p.choices},
        problem="no choice runs here",
        fix="search values this device supports, or run the sweep where they exist",
    )


def gpu_memory_lever(key: str, value: Any) -> bool:
    """Whether `key=value` is a lever a CPU sweep does not search (`drop_gpu_levers`): the chunked
    loss, and recompute other than none/every (selective, every_<k> with k >= 2)."""
    if key == LOSS:
        return value == "chunked"
    if key == RECOMPUTE and isinstance(value, str):
        try:
            return value == SELECTIVE or parse_activation_checkpointing(value) >= 2
        except ValueError:
            return False  # the trainer's schema refuses it, with its own message
    return False


def drop_gpu_levers(p: Param, ctx: SpaceContext) -> Param:
    """A CPU sweep does not search the levers that trade compute for device memory (the chunked
    loss, selective or every-k-th-block recompute): it models no device memory
    (SpaceContext.device_memory_gib is None there), so they could only cost it trials, and the
    default CPU sweep keeps the space it had. A searched key made only of them keeps them (the
    user asked for exactly those), and a pinned value runs on a CPU as anywhere."""
    device = str(ctx.base.get(DEVICE, "auto"))
    if p.kind != "categorical" or (ctx.device_type != "cpu" and device != "cpu"):
        return p
    kept = tuple(c for c in p.choices if not gpu_memory_lever(p.key, c))
    if not kept or len(kept) == len(p.choices):
        return p
    log.info(
        "%s: %s searched on a GPU only (memory levers; a CPU sweep models no device memory)",
        p.key,
        [c for c in p.choices if c not in kept],
    )
    return replace(p, choices=kept)
