"""Where a block-compiled step's extra time goes: regions of k consecutive blocks against the
whole model, stepped alternately in one process.

    python -m scripts.bench.region_size [--sizes 1 4 24] [--n-layer 24] [--rounds 20]

runtime.compile_unit=block (train/model/regional.py) compiles one block and calls it once per
block: each call pays Dynamo's guard check, AOTAutograd's forward and backward wrappers and the
region's entry, and no fusion crosses a block's edge. This benchmark asks how much of the block
unit's slower step (scripts/bench/compile_unit.py) is that per-call cost, by varying the number of
calls: each arm `k` compiles one function that runs k consecutive blocks, called n_layer / k times
(k = 1 is the block unit's region; k = n_layer one region of every block, which keeps only the
split from the embeddings and the head). The trainer has no such unit: the arms are built here,
over the trainer's own model, optimizer, data and step (scripts/bench/trainer.py plain_step), with
no activation checkpointing. All arms are built in this process, warmed up, then stepped in turn,
one full optimizer step each, the order rotating every round; each round's arm / model ratio has
the machine's drift cancelled (scripts/bench/step_pairs.py does the same for two arms).

Compile seconds are not reported: arms built in one process share its Inductor kernels and
caches, so no arm's first step is a cold compile (scripts/bench/compile_unit.py measures those, one
fresh process each). Measured numbers only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
from torch import nn

from scripts.bench.compile_unit import trial_overrides
from scripts.bench.configs import compose_config
from scripts.bench.harness import bench_parser, emit, spread, timed
from scripts.bench.trainer import plain_step
from train import device as dev
from train.core.config import Config
from train.data.dataset import make_loader
from train.model.gpt import GPT, run_head
from train.model.regional import compile_mode
from train.run.loop import build_model, check_data, resolve_dtype


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
    return a


def run_blocks(blocks: tuple[nn.Module, ...], x: torch.Tensor) -> torch.Tensor:
    """x through `blocks` in order: one arm's region (compiled once, reused for every group)."""
    for block in blocks:
        x = block(x)
    return x


def compile_groups(model: GPT, *, k: int, mode: str) -> None:
    """Make `model` (built eager) call a compiled `run_blocks` once per k consecutive blocks and a
    compiled head, as runtime.compile_unit=block does with k = 1: its forward is replaced on this
    instance only; its embeddings stay eager, as there."""
    region = torch.compile(run_blocks, mode=compile_mode(mode))
    model.head_fn = torch.compile(run_head, mode=compile_mode(mode))
    h = list(model.transformer.h)
    groups = [tuple(h[i : i + k]) for i in range(0, len(h), k)]

    def forward(
        self: GPT, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        pos = torch.arange(idx.size(1), dtype=torch.long, device=idx.device)  # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for group in groups:
            x = region(group, x)
        return self.head_fn(
            self.transformer.ln_f, self.lm_head.weight, x, targets, loss_mode=self.loss_mode
        )

    model.forward = types.MethodType(forward, model)


def arm_configs(a: argparse.Namespace, tmp: Path) -> dict[str, Config]:
    """The whole model's config, then one per region size (built eager, compiled here)."""
    probe = argparse.Namespace(**{**vars(a), "device": "cpu", "dtype": "auto", "steps": 4})
    probe.activation_checkpointing = "none"

    def config(compile_: str) -> Config:
        overrides = trial_overrides(probe, tmp, "model", "in-process")
        keep = [
            o for o in overrides if not o.startswith(("hydra.", "trial.out=", "runtime.compile="))
        ]
        return compose_config([*keep, f"runtime.compile={compile_}"])

    return {"model": config(a.compile)} | {f"{k} per region": config("none") for k in a.sizes}


def rotation(index: int, arms: Sequence[str]) -> list[str]:
    """Round `index`'s order: the arms rotated by index // 2, reversed in odd rounds; over
    2 x len(arms) rounds every arm takes every place twice."""
    n = (index // 2) % len(arms)
    order = [*arms[n:], *arms[:n]]
    return order if index % 2 == 0 else order[::-1]


def measure(a: argparse.Namespace, tmp: Path) -> dict[str, list[float]]:
    """Each arm's measured step seconds, round by round, after its warm-up steps."""
    arms = arm_configs(a, tmp)
    first = next(iter(arms.values()))
    device = dev.resolve_device("cpu")
    dtype = resolve_dtype(first.runtime.dtype, device)
    dev.set_threads(first.runtime.threads)
    steps: dict[str, Callable[[], object]] = {}
    for name, cfg in arms.items():
        check_data(cfg)
        model, called, optimizer, _ = build_model(cfg, device)
        if name != "model":
            compile_groups(model, k=int(name.split()[0]), mode=a.compile)
        step = plain_step(cfg, model, called, optimizer, device, dtype)
        batches = iter(make_loader(cfg, split="train", device_type=device.type))
        steps[name] = partial(step, batches, cfg.batch.grad_accum)
        for _ in range(a.warmup_steps):  # the first compiles
            steps[name]()
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
    ]
    for name, secs in seconds.items():
        calls = 1 if name == "model" else a.n_layer // int(name.split()[0])
        ratios = [s / m for s, m in zip(secs, model, strict=True)]
        ratio = "-" if name == "model" else spread(ratios, "{:.3f}")
        p50_ms = statistics.median(secs) * 1e3
        lines.append(f"  {name:14s} {calls:5d}  {p50_ms:7.1f}ms  {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_region_size_") as tmp:
        seconds = measure(a, Path(tmp))
    emit(report(a, seconds), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
