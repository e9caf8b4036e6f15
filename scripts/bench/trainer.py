"""Benchmark the trainer on this machine's CPU and check its measurement goals.

    python -m scripts.bench.trainer            # full: 6 trials + 3 overhead pairs (~10-20 min)
    python -m scripts.bench.trainer --quick    # smoke: eager fp32 only, a few steps, one pair

Every figure printed is measured now, never a constant:
- tokens/s, step-time p50 and spread (CV = std/mean), data-wait share and MFU against the measured
  matmul ceiling of the `tiny` preset, for eager vs torch.compile, fp32 vs bf16 and num_workers 0 vs
  1, each from a real bounded trial (`train.trial.measurement.run_trial`): what the sweep measures.
- the instrumentation's cost: trial tokens/s over the tokens/s of a plain loop written below (same
  model init, optimizer, DataLoader, warm-up and step count; no phase clocks, one final sync),
  interleaved A B / B A to cancel drift, median over repeats.
Goals (from the issue): data wait < 1% of step time with num_workers >= 1; step-time CV <= 3%
after warm-up; trial tokens/s >= 0.98x the plain loop. Exit code 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from scripts.bench.configs import compose_config
from scripts.bench.harness import (
    REPO,
    bench_parser,
    format_table,
    run_pairs,
    spread,
    timed,
    verdict,
)
from scripts.bench.noise_floor import Floor, measure_floor
from train import device as dev
from train.core.config import Config
from train.core.result import TrialResult
from train.core.schedule import scheduled_lr
from train.data.dataset import make_loader
from train.run.loop import build_model, check_data, resolve_dtype
from train.trial.measurement import run_trial

log = logging.getLogger("bench_trainer")

# The goals.
DATA_WAIT_GOAL = 0.01  # data wait < 1% of step time with num_workers >= 1
CV_GOAL = 0.03  # std/mean of measured step times <= 3%
OVERHEAD_GOAL = 0.98  # trial tokens/s >= 0.98 x the plain loop's
# The plain loop must see the trainer's very batches and weights: eager fp32 on a CPU is
# deterministic for a fixed thread count, so their losses agree to float rounding.
LOSS_MATCH_RTOL = 1e-4


@dataclass(kw_only=True, frozen=True)
class Variant:
    """One trainer configuration of the tiny preset."""

    # torch.compile mode, or "none" for eager.
    compile: str
    # runtime.dtype: fp32 | bf16.
    dtype: str
    # data.num_workers: 0 builds batches in the training process.
    num_workers: int

    @property
    def label(self) -> str:
        mode = "eager" if self.compile == "none" else f"compile({self.compile})"
        return f"{mode} {self.dtype} nw={self.num_workers}"

    def overrides(self) -> list[str]:
        return [
            f"runtime.compile={self.compile}",
            f"runtime.dtype={self.dtype}",
            f"data.num_workers={self.num_workers}",
        ]


HEADLINE = Variant(compile="none", dtype="fp32", num_workers=1)
# Eager first: a compiled trial leaves inductor state behind, so eager numbers come from a clean
# process.
FULL_VARIANTS = (
    HEADLINE,
    Variant(compile="none", dtype="fp32", num_workers=0),
    Variant(compile="none", dtype="bf16", num_workers=1),
    Variant(compile="default", dtype="fp32", num_workers=1),
    Variant(compile="default", dtype="fp32", num_workers=0),
    Variant(compile="default", dtype="bf16", num_workers=1),
)
QUICK_VARIANTS = (HEADLINE, Variant(compile="none", dtype="fp32", num_workers=0))


def run_variant(
    common: list[str], variant: Variant, out_dir: Path, tag: str, *, required: bool = True
) -> TrialResult:
    """One bounded trial in this process; returns its result dict (schema: train/core/result.py).
    A failed trial raises when `required`, else comes back as a failed result to print."""
    if variant.compile != "none":
        torch._dynamo.reset()  # no guards or cache entries carried over from an earlier trial
    cfg = compose_config([*common, *variant.overrides()])
    log.info("trial %-28s (%s)", variant.label, tag)
    result = run_trial(cfg, out_path=out_dir / f"{tag}.json")
    if result["status"] != "complete":
        if required:
            raise RuntimeError(f"trial {variant.label} {result['status']}: {result['failure']}")
        log.error("trial %s failed: %s", variant.label, result["failure"])
        return result
    log.info(
        "  %.0f tokens/s, p50 %.1f ms, cv %.1f%%",
        result["tokens_per_s"],
        result["step_time_s"]["p50"] * 1e3,
        100 * result["step_time_s"]["cv"],
    )
    return result


@dataclass(kw_only=True, frozen=True)
class PlainRun:
    tokens_per_s: float
    loss_first: float  # mean loss of the first warm-up step, as the trial reports it
    loss_last: float  # mean loss of the last measured step


Step = Callable[[Iterator[tuple[torch.Tensor, torch.Tensor]], int], torch.Tensor]


def plain_step(
    cfg: Config,
    model: torch.nn.Module,
    compiled: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    dtype: torch.dtype,
) -> Step:
    """One nanoGPT-style optimizer step of `compiled` (the model to call; `model` its raw
    parameters): step(batches, accum) takes `accum` micro-batches from `batches`, each at the
    production schedule's lr for the steps this function has run, as a trial's; it returns the
    step's mean loss (on the device, unsynced)."""
    done = 0  # optimizer steps so far

    def step(batches: Iterator[tuple[torch.Tensor, torch.Tensor]], accum: int) -> torch.Tensor:
        nonlocal done
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(cfg, done)
        done += 1
        total = torch.zeros((), device=device)
        for _ in range(accum):
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with dev.autocast(device, dtype):
                _, loss = compiled(x, y)
                loss = loss / accum
            loss.backward()
            total += loss.detach()
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def plain_loop(cfg: Config, *, warmup_steps: int, steps: int) -> PlainRun:
    """The uninstrumented baseline: nanoGPT-style, built from the same parts as the trainer.

    Same seed before the model init, same AdamW groups and lr schedule, the same DataLoader (batch
    i is seeded by i, so both see identical batches), the same warm-up steps (short ones of at most
    trial.project_micro_steps micro-batches, as the trial's); then `steps` steps with one clock
    read and one device sync at each end of the window, nothing in between.
    """
    rt, accum = cfg.runtime, cfg.batch.grad_accum
    device = dev.resolve_device(rt.device)
    dtype = resolve_dtype(rt.dtype, device)
    check_data(cfg)
    dev.set_threads(rt.threads)
    model, compiled, optimizer, _ = build_model(cfg, device)
    loader = make_loader(cfg, split="train", device_type=device.type)
    batches = iter(loader)

    step = plain_step(cfg, model, compiled, optimizer, device, dtype)

    loss_first = float("nan")
    short = min(accum, cfg.trial.project_micro_steps)
    for i in range(warmup_steps):
        loss = step(batches, short).item()
        if i == 0:
            loss_first = loss
    dev.sync(device)

    def window(it: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        for _ in range(steps):
            last = step(it, accum)
        dev.sync(device)
        return last

    last, elapsed = timed(functools.partial(window, batches))
    tokens = cfg.batch.tokens_per_step * steps
    del batches, loader  # stop the loader's worker processes before the next run
    gc.collect()
    return PlainRun(tokens_per_s=tokens / elapsed, loss_first=loss_first, loss_last=last.item())


@dataclass(kw_only=True)
class Overhead:
    ratios: list[float]  # trial tokens/s / plain-loop tokens/s, one per A/B pair
    trials: list[TrialResult]  # the trial results (A runs)
    plain: list[PlainRun]  # the plain-loop runs (B runs)


def measure_overhead(
    common: list[str], out_dir: Path, *, warmup_steps: int, steps: int, repeats: int
) -> Overhead:
    """A B, B A, A B, ...: the headline trial and the plain loop, same config and step count
    (the command line's --warmup-steps and --overhead-steps), `repeats` pairs."""
    # No time budget here: both sides must run exactly `steps` measured steps.
    fixed = [
        *common,
        f"trial.warmup_steps={warmup_steps}",
        f"trial.max_steps={steps}",
        "trial.min_steps=2",
        "trial.max_seconds=1e9",
    ]
    cfg = compose_config([*fixed, *HEADLINE.overrides()])

    def run(side: str, i: int) -> TrialResult | PlainRun:
        if side == "trial":
            return run_variant(fixed, HEADLINE, out_dir, f"overhead-{i}")
        log.info("plain loop %-23s (overhead-%d)", HEADLINE.label, i)
        plain = plain_loop(cfg, warmup_steps=warmup_steps, steps=steps)
        log.info("  %.0f tokens/s", plain.tokens_per_s)
        return plain

    out = Overhead(ratios=[], trials=[], plain=[])
    for pair in run_pairs(("trial", "plain"), repeats, run):
        trial, plain = pair["trial"], pair["plain"]
        assert isinstance(plain, PlainRun) and not isinstance(trial, PlainRun)
        if trial["step_time_s"]["n"] != steps:
            raise RuntimeError(f"trial ran {trial['step_time_s']['n']} steps, expected {steps}")
        out.trials.append(trial)
        out.plain.append(plain)
        out.ratios.append(trial["tokens_per_s"] / plain.tokens_per_s)
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= LOSS_MATCH_RTOL * max(abs(a), abs(b))


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def _spread(values: list[float]) -> str:
    """Shares as 'median% (min%-max%) of n'."""
    return f"{spread([100 * v for v in values], '{:.2f}%')} of {len(values)}"


def variant_row(variant: Variant, r: dict) -> list[str]:
    if r["status"] != "complete":
        return [variant.label, f"FAILED ({r['failure']['kind']})", *[""] * 6]
    st = r["step_time_s"]
    return [
        variant.label,
        f"{r['tokens_per_s']:,.0f}",
        f"{st['p50'] * 1e3:.2f}",
        _pct(st["cv"], 2),
        _pct(r["time_frac"]["data_wait"], 2),
        _pct(r["mfu"]["ceiling"], 2),
        f"{r['compile_s']:.1f}",
        str(st["n"]),
    ]


def report(
    results: list[tuple[Variant, dict]], overhead: Overhead, floors: list[Floor]
) -> tuple[str, bool]:
    """The printed output (per-config figures, the overhead pairs, then the goals) and whether
    every goal passed."""
    first = overhead.trials[0]
    done = [(v, r) for v, r in results if r["status"] == "complete"]
    # the MFU denominator, one per dtype: bf16 and fp32 matmuls run at different speeds
    ceilings = {r["device"]["dtype"]: r["device"] for _, r in [(HEADLINE, first), *done]}
    lines = [
        f"device: {first['device']['name']} ({torch.get_num_threads()} torch threads), "
        f"torch {torch.__version__}",
        *(
            f"ceiling {dtype}: {d['ceiling_flops'] / 1e9:.1f} GFLOP/s ({d['ceiling_source']})"
            for dtype, d in ceilings.items()
        ),
        f"model: tiny preset, {first['tokens_per_step']} tokens/step",
        "",
        format_table(
            [
                "config",
                "tokens/s",
                "step p50 ms",
                "CV",
                "data wait",
                "MFU ceiling",
                "compile s",
                "n",
            ],
            [variant_row(v, r) for v, r in results],
        ),
        "",
        format_table(
            ["pair", "trial tokens/s", "plain tokens/s", "ratio"],
            [
                [str(i), f"{t['tokens_per_s']:,.0f}", f"{p.tokens_per_s:,.0f}", f"{q:.4f}"]
                for i, (t, p, q) in enumerate(
                    zip(overhead.trials, overhead.plain, overhead.ratios, strict=True)
                )
            ],
        ),
    ]
    by_label = {v.label: r for v, r in done}
    fp32, bf16 = by_label.get(HEADLINE.label), by_label.get("eager bf16 nw=1")
    if fp32 and bf16:
        lines.append(
            f"\nfinding: eager bf16 runs at {bf16['tokens_per_s'] / fp32['tokens_per_s']:.2f}x "
            f"eager fp32 tokens/s on this CPU"
        )

    # Goals: the headline config's every trial (the table's and the overhead pairs' A runs).
    headline = [r for v, r in done if v == HEADLINE] + overhead.trials
    waits = [r["time_frac"]["data_wait"] for r in headline]
    cvs = [r["step_time_s"]["cv"] for r in headline]
    ratio = statistics.median(overhead.ratios)
    same = all(
        _close(t["loss"]["first"], p.loss_first) and _close(t["loss"]["last"], p.loss_last)
        for t, p in zip(overhead.trials, overhead.plain, strict=True)
    )
    loss_text = ", ".join(
        f"{t['loss']['last']:.6f} vs {p.loss_last:.6f}"
        for t, p in zip(overhead.trials, overhead.plain, strict=True)
    )
    goals = [
        [
            "data wait, nw>=1",
            "< 1%",
            _spread(waits),
            verdict(statistics.median(waits) < DATA_WAIT_GOAL),
        ],
        ["step-time CV", "<= 3%", _spread(cvs), verdict(statistics.median(cvs) <= CV_GOAL)],
        ["(machine floor: fixed-work CV)", "", _spread([f.cv for f in floors]), ""],
        [
            "trial / plain tokens/s",
            ">= 0.98",
            f"{ratio:.4f} (median of {len(overhead.ratios)})",
            verdict(ratio >= OVERHEAD_GOAL),
        ],
        ["same weights+batches (last loss)", "match", loss_text, verdict(same)],
    ]
    lines += ["", format_table(["goal", "target", "measured", "verdict"], goals)]
    over = [v.label for v, r in done if (r["mfu"]["ceiling"] or 0) > 1]
    if over:
        lines.append(
            f"note: MFU above 100% for {', '.join(over)}: the measured matmul ceiling for that "
            "dtype is below what the model's own matmuls reach, so it is no ceiling there"
        )
    floor = statistics.median(f.cv for f in floors)
    if statistics.median(cvs) > CV_GOAL and floor > CV_GOAL:
        lines.append(
            f"note: CV above goal, and so is the machine's own floor ({100 * floor:.1f}%): "
            "the same fixed matmul work, timed before and after the trials, varies that much here "
            "(scripts/bench/noise_floor.py), so the spread is the machine's, not the trainer's"
        )
    elif statistics.median(cvs) > CV_GOAL:
        lines.append(
            f"note: CV above goal while fixed work varies only {100 * floor:.1f}%: the spread "
            "comes from the training step itself"
        )
    return "\n".join(lines), all(g[-1] != "FAIL" for g in goals)


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-=" else "_" for c in label)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="smoke mode: eager fp32, few steps, 1 pair")
    p.add_argument("--steps", type=int, help="measured steps per trial (default 40; quick 4)")
    p.add_argument("--max-seconds", type=float, default=30.0, help="time budget per trial")
    p.add_argument("--warmup-steps", type=int, help="warm-up steps (default 3; quick 1)")
    p.add_argument("--repeats", type=int, help="overhead A/B pairs (default 3; quick 1)")
    p.add_argument("--overhead-steps", type=int, help="steps per A/B run (default 20; quick 4)")
    p.add_argument("--tokens-per-step", type=int, default=4096, help="batch.tokens_per_step")
    p.add_argument("--micro-batch", type=int, default=8, help="batch.micro_batch (block 64)")
    p.add_argument(
        "--threads", type=int, default=0, help="runtime.threads (0 = torch default, all cores)"
    )
    p.add_argument("--data-dir", default=str(REPO / "data" / "synthetic"), help="token folder")
    p.add_argument("--out-dir", help="trial JSON folder (default: a temporary folder)")
    p.add_argument("--verbose", action="store_true", help="show the trainer's own log lines")
    args = p.parse_args(argv)
    quick = args.quick
    args.steps = args.steps or (4 if quick else 40)
    args.warmup_steps = args.warmup_steps or (1 if quick else 3)
    args.repeats = args.repeats or (1 if quick else 3)
    args.overhead_steps = args.overhead_steps or (4 if quick else 20)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("train").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        out_dir = Path(args.out_dir) if args.out_dir else Path(tmp) / "results"
        block = 64  # tiny preset (conf/model/tiny.yaml)
        accum, rem = divmod(args.tokens_per_step, args.micro_batch * block)
        if rem or accum < 1:
            raise SystemExit(f"--tokens-per-step must be a multiple of micro_batch x {block}")
        common = [
            "model=tiny",
            f"batch.tokens_per_step={args.tokens_per_step}",
            f"batch.micro_batch={args.micro_batch}",
            f"batch.grad_accum={accum}",
            "runtime.device=cpu",
            f"runtime.threads={args.threads}",
            f"data.dir={args.data_dir}",
            f"checkpoint.dir={tmp}/ckpt",
        ]
        windowed = [
            *common,
            f"trial.warmup_steps={args.warmup_steps}",
            f"trial.max_steps={args.steps}",
            f"trial.min_steps={min(5, args.steps)}",
            f"trial.max_seconds={args.max_seconds}",
        ]
        started = time.perf_counter()
        variants = QUICK_VARIANTS if args.quick else FULL_VARIANTS
        # The machine's own spread for fixed work, before and after: the floor under any CV.
        floor_reps = max(10, args.steps)
        floors = [measure_floor(reps=floor_reps, threads=args.threads)]
        # Overhead pairs first: they only run eager, before any compiled trial.
        overhead = measure_overhead(
            common,
            out_dir,
            warmup_steps=args.warmup_steps,
            steps=args.overhead_steps,
            repeats=args.repeats,
        )
        results = [
            (v, run_variant(windowed, v, out_dir, _slug(v.label), required=False)) for v in variants
        ]
        floors.append(measure_floor(reps=floor_reps, threads=args.threads))
        log.info("done in %.0f s", time.perf_counter() - started)
    text, ok = report(results, overhead, floors)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
