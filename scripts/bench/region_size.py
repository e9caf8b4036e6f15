"""Where a block-compiled step's extra time goes: regions of k consecutive blocks against the
whole model, stepped alternately in one process.

    python -m scripts.bench.region_size [--sizes 1 4 24] [--n-layer 24] [--rounds 20]

runtime.compile_unit=block (train/model/regional.py) compiles one block and calls it once per
block: each call pays Dynamo's guard check, AOTAutograd's forward and backward wrappers and the
region's entry, and no fusion crosses a block's edge. This benchmark asks how much of the block
unit's slower step (scripts/bench/compile_unit.py) is that per-call cost, by varying the number of
calls: arm `k` groups each k consecutive blocks into one module and compiles the model region by
region as the block unit does (train/model/regional.py compile_regions), so one region of k blocks
runs n_layer / k times (k = 1 is the block unit itself; k = n_layer one region of every block,
which keeps only the split from the eager embeddings and the separately compiled head). The
trainer has no unit of k > 1 blocks: the grouping is done here, over the trainer's own model,
optimizer, data and step (scripts/bench/step_pairs.py warm_steps), with no activation
checkpointing. All arms are built in this process, warmed up, then stepped in turn, one full
optimizer step each, the order rotating every other round and reversed in between (`rotation`);
each round's arm / model ratio has the machine's drift cancelled (scripts/bench/step_pairs.py
does the same for two arms).

Compile seconds are not reported: arms built in one process share its Inductor kernels and
caches, so no arm's first step is a cold compile (scripts/bench/compile_unit.py measures those, one
fresh process each). Measured numbers only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from torch import nn

from scripts.bench.compile_unit import trial_overrides
from scripts.bench.configs import compose_config
from scripts.bench.harness import bench_parser, emit, spread, timed
from scripts.bench.step_pairs import warm_steps
from train.core.config import Config
from train.model.gpt import GPT
from train.model.regional import compile_regions


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser(__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 24], help="blocks per region")
    p.add_argument("--model", default="tiny", help="a preset of conf/model/")
    p.add_argument("--n-layer", type=int, default=24)
    p.add_argument("--n-embd", type=int, help="model.n_embd (tiny: its own 64)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=4)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20, help="rounds of one step per arm")
    p.add_argument("--compile", default="default", help="runtime.compile mode")
    p.add_argument("--threads", type=int, default=0, help="runtime.threads (0: torch's default)")
    p.add_argument("--out", type=Path, help="also write the output to this file")
    a = p.parse_args(argv)
    for k in a.sizes:
        if k < 1 or a.n_layer % k:
            p.error(f"--sizes: {k} blocks per region must divide --n-layer {a.n_layer}")
    if len(set(a.sizes)) != len(a.sizes):
        p.error(f"--sizes: each size once, got {a.sizes}")
    return a


def group_blocks(model: GPT, *, k: int) -> None:
    """Make each k consecutive blocks of `model` one module (an nn.Sequential), in place, so
    that regional compilation (train/model/regional.py compile_regions: the block function and the
    head compiled, the embeddings eager) compiles one region of k blocks and calls it n_layer / k
    times; k = 1 leaves the blocks as they are, the trainer's runtime.compile_unit=block. The
    parameters stay the same tensors (the optimizer built over them still steps them)."""
    if k > 1:
        h = list(model.transformer.h)
        model.transformer.h = nn.ModuleList(
            nn.Sequential(*h[i : i + k]) for i in range(0, len(h), k)
        )


def arm_name(k: int) -> str:
    return f"{k} per region"


def arm_configs(a: argparse.Namespace, tmp: Path) -> dict[str, Config]:
    """The whole model's config, then one per region size (built eager, compiled here)."""
    probe = argparse.Namespace(
        **{**vars(a), "device": "cpu", "dtype": "auto", "steps": 4},
        activation_checkpointing="none",
    )

    def config(compile_: str) -> Config:
        overrides = trial_overrides(probe, tmp, "model", "in-process")
        keep = [
            o for o in overrides if not o.startswith(("hydra.", "trial.out=", "runtime.compile="))
        ]
        return compose_config([*keep, f"runtime.compile={compile_}"])

    return {"model": config(a.compile)} | {arm_name(k): config("none") for k in a.sizes}


def rotation(index: int, arms: Sequence[str]) -> list[str]:
    """Round `index`'s order: the arms rotated by index // 2, reversed in odd rounds; over
    2 x len(arms) rounds every arm takes every place twice."""
    n = (index // 2) % len(arms)
    order = [*arms[n:], *arms[:n]]
    return order if index % 2 == 0 else order[::-1]


def measure(a: argparse.Namespace, tmp: Path) -> dict[str, list[float]]:
    """Each arm's measured step seconds, round by round, after its warm-up steps."""
    arms = arm_configs(a, tmp)
    sizes = {arm_name(k): k for k in a.sizes}

    def regions(name: str, model: GPT) -> None:
        if name in sizes:  # built eager: grouped, then compiled region by region
            group_blocks(model, k=sizes[name])
            compile_regions(model, mode=a.compile)

    steps = warm_steps(arms, warmup_steps=a.warmup_steps, prepare=regions)
    seconds: dict[str, list[float]] = {n: [] for n in arms}
    for i in range(a.rounds):
        for name in rotation(i, list(arms)):
            seconds[name].append(timed(steps[name])[1])
    return seconds


def report(a: argparse.Namespace, seconds: dict[str, list[float]]) -> str:
    model = seconds["model"]
    lines = [
        f"GPT: model={a.model} n_layer={a.n_layer} n_embd={a.n_embd or 'preset'} "
        f"block_size={a.block_size}, micro-batch {a.micro_batch} x {a.grad_accum}, "
        f"compile={a.compile}, {a.rounds} rounds of one optimizer step per arm, order rotating",
        f"  {'arm':14s} {'calls':>5s}  {'step p50':>9s}  "
        "step / whole model, per round: median (min-max)",
        f"  {'model':14s} {1:5d}  {statistics.median(model) * 1e3:7.1f}ms  -",
    ]
    for k in a.sizes:
        secs = seconds[arm_name(k)]
        ratio = spread([s / m for s, m in zip(secs, model, strict=True)], "{:.3f}")
        p50_ms = statistics.median(secs) * 1e3
        lines.append(f"  {arm_name(k):14s} {a.n_layer // k:5d}  {p50_ms:7.1f}ms  {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_region_size_") as tmp:
        seconds = measure(a, Path(tmp))
    emit(report(a, seconds), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
