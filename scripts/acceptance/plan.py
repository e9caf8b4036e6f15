"""The plan stage's choices, pure: the sweep's starting config and the memory points to measure.

Both come from the memory model (train/core/memory_model.py) and the probed device's memory.
The starting config is the best one predicted to fit: the largest micro-batch first (the seed's 16
where it fits: larger matmuls run nearer the ceiling), without activation checkpointing before
with it (recompute costs a third more compute), compiled before eager (on the 2026-11-23 H100 run,
+14% for gpt2-xl). The memory points are that start, the largest eager point without recompute
that fits, and the start's micro-batch with recompute: three different paths through the model
(compiled, eager, checkpointed), each cheap to measure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from acceptance.profiles import Profile
from train.core.memory_model import inputs_from_config, predict_memory, usable_gib


@dataclass(frozen=True, kw_only=True)
class Point:
    """One trainer configuration at the profile's tokens per step."""

    micro_batch: int
    compile: str  # runtime.compile
    activation_checkpointing: str  # none | every

    @property
    def name(self) -> str:
        return f"mb{self.micro_batch}-{self.compile}-ac_{self.activation_checkpointing}"

    def grad_accum(self, profile: Profile) -> int:
        return profile.tokens_per_step // (self.micro_batch * profile.block_size)

    def overrides(self, profile: Profile) -> list[str]:
        return [
            f"batch.micro_batch={self.micro_batch}",
            f"batch.grad_accum={self.grad_accum(profile)}",
            f"runtime.compile={self.compile}",
            f"runtime.compile_unit={profile.compile_unit}",
            f"runtime.activation_checkpointing={self.activation_checkpointing}",
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def predicted_gib(
    profile: Profile, model: dict[str, Any], point: Point, *, device_type: str
) -> float:
    """The memory model's peak for `point` (model: the preset's fields, as in conf/model)."""
    cfg = {f"model.{k}": v for k, v in model.items()}
    cfg.update(
        {
            "batch.micro_batch": point.micro_batch,
            "batch.tokens_per_step": profile.tokens_per_step,
            "runtime.dtype": profile.dtype,
            "runtime.compile": point.compile,
            "runtime.activation_checkpointing": point.activation_checkpointing,
        }
    )
    return predict_memory(inputs_from_config(cfg, device_type=device_type)).peak_gib


def candidates(profile: Profile) -> list[Point]:
    """Starting configs, best first (see the module docstring)."""
    splits = [
        mb
        for mb in profile.micro_batches
        if profile.tokens_per_step % (mb * profile.block_size) == 0
    ]
    return [
        Point(micro_batch=mb, compile=c, activation_checkpointing=ac)
        for ac in ("none", "every")
        for mb in splits
        for c in profile.compile_modes
    ]


def _fits(
    profile: Profile, model: dict, point: Point, *, device_type: str, memory_gib: float | None
) -> bool:
    if memory_gib is None:  # a CPU: the memory model refuses nothing there
        return True
    return predicted_gib(profile, model, point, device_type=device_type) <= usable_gib(memory_gib)


def starting_point(
    profile: Profile, model: dict, *, device_type: str, memory_gib: float | None
) -> Point:
    """The best candidate predicted to fit; ValueError when none does."""
    for point in candidates(profile):
        if _fits(profile, model, point, device_type=device_type, memory_gib=memory_gib):
            return point
    raise ValueError(
        f"no starting config of {profile.model} at {profile.tokens_per_step:,} tokens per step is "
        f"predicted to fit {memory_gib:.1f} GiB (micro-batches {profile.micro_batches}, with and "
        f"without activation checkpointing); use a device with more memory"
    )


def memory_points(
    profile: Profile, model: dict, start: Point, *, device_type: str, memory_gib: float | None
) -> list[Point]:
    """Up to profile.memory_points points to check the memory model on: the start, the largest
    eager point without recompute that fits, the start's micro-batch with recompute (eager)."""
    eager = [
        p
        for p in candidates(profile)
        if p.compile == "none"
        and p.activation_checkpointing == "none"
        and _fits(profile, model, p, device_type=device_type, memory_gib=memory_gib)
    ]
    picked = [start]
    if eager:
        picked.append(eager[0])
    picked.append(
        Point(micro_batch=start.micro_batch, compile="none", activation_checkpointing="every")
    )
    unique = list(dict.fromkeys(picked))
    return unique[: profile.memory_points]
