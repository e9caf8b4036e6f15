"""The learning-rate schedule of the production run, which every trial step follows too.

nanoGPT's: a linear warm-up to optim.lr, then a cosine decay to optim.min_lr at train.max_steps.
A trial's steps, counted from its first warm-up step, train at the lrs the production run starts
with (train/trial/window.py). Pure and torch-free.
"""

from __future__ import annotations

import math

from train.core.config import Config


def cosine_lr(step: int, *, lr: float, min_lr: float, warmup_steps: int, max_steps: int) -> float:
    """Linear warm-up to `lr`, then cosine decay to `min_lr` at `max_steps` (nanoGPT's schedule)."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def scheduled_lr(cfg: Config, step: int) -> float:
    """The lr of optimizer step `step` (0-based) under the production run's schedule
    (optim.lr, optim.min_lr, optim.warmup_steps, train.max_steps). A trial's steps, counted from
    its first warm-up step, train at the lrs the production run starts with: a trial that stepped
    at the peak lr from step 0 measured the same speed but trained a curve that diverged (gpt2-xl,
    H200, 2026-11-26), which the numerics guard cannot compare against."""
    o = cfg.optim
    return cosine_lr(
        step, lr=o.lr, min_lr=o.min_lr, warmup_steps=o.warmup_steps, max_steps=cfg.train.max_steps
    )
