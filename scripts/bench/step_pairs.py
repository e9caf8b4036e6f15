"""Two configs' optimizer steps interleaved in one process: a step-time ratio that this noisy
machine's drift cannot bias.

Runs in separate processes are minutes apart, and on a shared 2-core VM a minute can change a
step's time by 10-20%, which hides a difference of a few %. Here both arms are built in one process
(each its own seeded model, AdamW, DataLoader and compile, through the trainer's own build_model),
warmed up, then stepped alternately, A B / B A, one full optimizer step at a time: what slows the
machine during round i slows both of its steps, so the per-round ratio B / A is the arms' own
difference. Both arms hold their weights at once: meant for models that fit twice (a CPU preset).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from scripts.bench.harness import pair_order, timed
from scripts.bench.trainer import Step, plain_step
from train import device as dev
from train.core.config import Config
from train.data.dataset import make_loader
from train.model.gpt import GPT
from train.run.loop import build_model, check_data, resolve_dtype


@dataclass(kw_only=True, frozen=True)
class StepPairs:
    """Each arm's measured step seconds in round order, and each round's second / first arm."""

    seconds: dict[str, list[float]]
    ratios: list[float]


def warm_steps(
    arms: Mapping[str, Config],
    *,
    warmup_steps: int,
    prepare: Callable[[str, GPT], None] | None = None,
) -> dict[str, Callable[[], None]]:
    """Each arm built in this process (its seeded model, AdamW, DataLoader and compile, through
    the trainer's build_model; `prepare(name, raw model)` after the build, where given) and warmed
    up for `warmup_steps` steps, which compile: {name: one full optimizer step, synced}. The arms
    share the first arm's device, dtype and threads."""
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1 (the first step compiles), got {warmup_steps}")
    first = next(iter(arms.values()))
    device = dev.resolve_device(first.runtime.device)
    dtype = resolve_dtype(first.runtime.dtype, device)
    dev.set_threads(first.runtime.threads)
    steps: dict[str, Callable[[], None]] = {}
    for name, cfg in arms.items():
        check_data(cfg)
        model, compiled, optimizer, _ = build_model(cfg, device)
        if prepare is not None:
            prepare(name, model)
        step = plain_step(cfg, model, compiled, optimizer, device, dtype)
        batches = iter(make_loader(cfg, split="train", device_type=device.type))

        def run(
            step: Step = step, batches: Iterator = batches, accum: int = cfg.batch.grad_accum
        ) -> None:
            step(batches, accum)
            dev.sync(device)

        for _ in range(warmup_steps):
            run()
        steps[name] = run
    return steps


def interleaved_steps(arms: Mapping[str, Config], *, warmup_steps: int, rounds: int) -> StepPairs:
    """`rounds` rounds of one full step per arm (two arms, the same batch shape and device), the
    order alternating; after `warmup_steps` steps per arm, which compile."""
    if len(arms) != 2:
        raise ValueError(f"interleaved_steps compares two arms, got {len(arms)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = list(arms)
    steps = warm_steps(arms, warmup_steps=warmup_steps)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds):
        for name in pair_order(i, names):
            seconds[name].append(timed(steps[name])[1])
    ratios = [b / a for a, b in zip(seconds[names[0]], seconds[names[1]], strict=True)]
    return StepPairs(seconds=seconds, ratios=ratios)
