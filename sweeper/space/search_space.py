"""The search space: which trainer keys a sweep varies, parsed from YAML, and which points are safe.

`parse_space` turns `params: {dotted.key: spec}` into a SearchSpace, each spec parsed by
sweeper/space/params.py (Hydra's override grammar, plus the batch split); `batch.grad_accum` is
derived from the micro-batch, never searched. Whether a point may run is
sweeper/space/constraints.py's `check_point`.

Pure and light: no torch (the child process does the torch work). Optuna is imported only where
distributions are built.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.space.constraints import DEVICE_BOUND, SpaceContext, check_point, derive_grad_accum
from sweeper.space.memory import OutOfMemory
from sweeper.space.params import (
    Param,
    clamp_workers,
    drop_missing_dirs,
    drop_unsupported,
    fail,
    parse_param,
)
from sweeper.space.point import Point
from train.core.keys import (
    BLOCK_SIZE,
    CHECKPOINT_DIR,
    CHECKPOINT_EVERY,
    DEVICE,
    DTYPE,
    GRAD_ACCUM,
    MICRO_BATCH,
    RECOMPUTE,
    TOKENS_PER_STEP,
    WORKERS,
)
from train.core.rules import resolve_dtype_name

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

SAMPLE_POINTS = 5_000  # random draws that estimate feasibility when a grid cannot be enumerated


def parse_space(params: dict[str, Any] | None, ctx: SpaceContext) -> SearchSpace:
    """Turn `params: {dotted.key: spec}` into a SearchSpace; every user error is a ValueError."""
    if params is not None and not isinstance(params, dict):
        from omegaconf import OmegaConf  # a DictConfig straight from Hydra

        params = OmegaConf.to_container(params, resolve=True)  # type: ignore[assignment]
    parsed = [parse_param(k, v, ctx) for k, v in (params or {}).items()]
    parsed = [clamp_workers(p, ctx.cpu_count) if p.key == WORKERS else p for p in parsed]
    parsed = [
        drop_missing_dirs(p) if p.key == CHECKPOINT_DIR and p.kind == "categorical" else p
        for p in parsed
    ]
    if not any(p.key == DEVICE for p in parsed):  # else the device is searched too
        parsed = [
            drop_unsupported(p, ctx) if p.key in DEVICE_BOUND and p.kind == "categorical" else p
            for p in parsed
        ]
    by_key = {p.key: p for p in parsed}
    accum, mb = by_key.get(GRAD_ACCUM), by_key.get(MICRO_BATCH)
    # grad_accum follows micro_batch: searching it, or pinning it while micro_batch varies, would
    # change the tokens per step.
    if accum is not None and (accum.kind != "fixed" or (mb is not None and mb.kind != "fixed")):
        raise fail(
            GRAD_ACCUM,
            accum.spec,
            "batch.grad_accum cannot be searched",
            "search batch.micro_batch with split: true and grad_accum follows",
        )
    if mb is not None and mb.split:
        for pinned in (BLOCK_SIZE, TOKENS_PER_STEP):
            if pinned in by_key:
                raise fail(
                    pinned,
                    by_key[pinned].spec,
                    "the split is computed for one value",
                    f"remove {pinned} from the search space (set it in the trainer config)",
                )
    recompute = by_key.get(RECOMPUTE)
    if recompute is not None and recompute.kind == "categorical":
        # the dominance rule compares a point with the space's cheaper recompute choices
        ctx.recompute_choices = tuple(recompute.choices)
    return SearchSpace(params=tuple(parsed), ctx=ctx)


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

    def point(self, params: Mapping[str, Any]) -> Point:
        """A trial's point from its searched values (Optuna's params): the fixed and searched
        knobs, plus the derived grad_accum."""
        missing = [p.key for p in self.searched if p.key not in params]
        unknown = [k for k in params if k not in {p.key for p in self.searched}]
        if missing or unknown:
            raise ValueError(
                f"params must hold exactly the searched keys: missing {missing}, unknown {unknown}"
            )
        explicit = {p.key: params[p.key] if p.kind != "fixed" else p.value for p in self.params}
        out: dict[str, Any] = {}
        for key, value in explicit.items():
            out[key] = value
            if key == MICRO_BATCH and GRAD_ACCUM not in explicit:
                accum = derive_grad_accum(value, explicit, self.ctx)
                if accum is not None:  # otherwise check_point names the invalid split
                    out[GRAD_ACCUM] = accum
        return Point(knobs=out)

    @property
    def base(self) -> dict[str, Any]:
        """The composed trainer config the points are set over (flat dotted keys)."""
        return self.ctx.base

    def record_oom(self, trial: int, point: Point) -> None:
        """Trial `trial` ran out of memory at `point`: larger micro-batches with its other knobs
        are refused from now on (sweeper/space/memory.py)."""
        self.ctx.note_ooms([OutOfMemory(trial=trial, config=point.over(self.ctx.base))])

    def to_overrides(self, params: Mapping[str, Any]) -> list[str]:
        """Hydra overrides for the child, e.g. ["batch.micro_batch=4", "batch.grad_accum=16"]."""
        return self.point(params).overrides()

    def check(self, params: Mapping[str, Any], *, dominance: bool = True) -> str | None:
        """check_point for searched params, with the fixed ones and the derived grad_accum added:
        whether the search may run them, so a point that cannot win is refused too (dominance;
        the starting config, measured whatever it is, passes False)."""
        return check_point(self.point(params), self.ctx, dominance=dominance)

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
            raise ValueError(
                f"search space: the grid has {size} points, more than {limit}; "
                "narrow it or use a sampler other than grid"
            )
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
            1
            for p in self.searched
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
        if p.key == DTYPE and value == "auto":  # the trainer's resolution
            value = resolve_dtype_name(value, device_type=device_type, bf16_supported=bf16)
        if p.key == CHECKPOINT_EVERY and value == 0 and p.kind == "categorical":
            value = p.choices[0]
        if p.kind == "categorical" and value not in p.choices:
            return None
        if p.kind in ("int", "float") and (value is None or not p.low <= value <= p.high):
            return None
        params[p.key] = value
    # the starting config is measured even where it cannot win: it is what the user runs
    return params if space.check(params, dominance=False) is None else None
