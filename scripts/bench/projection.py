"""Check the trial's projected steps against real full steps on this CPU.

    python -m scripts.bench.projection               # small-cpu, grad_accum 32, 3 interleaved pairs
    python -m scripts.bench.projection --pairs 5 --grad-accum 64

A long optimizer step (large grad_accum) is measured as short steps of a few micro-batches and
projected to the full step (train/core/meters.py project_step). Here the same configuration runs
as a projected trial and as a real full-step trial (`trial.project_above_s=0`), interleaved P F / F
P so machine drift hits both alike, each a real bounded trial (`train.trial.measurement.run_trial`).
Printed, all measured now: each pair's projected and real step-time medians, the projection's error,
and both trials' wall time. Goals (issue 10): projected within 5% of the real full-step median, and
the projected trial's wall at least 3x shorter. Exit code 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from scripts.bench.configs import add_cpu_trial_args, compose_config, cpu_trial_overrides_of
from scripts.bench.harness import (
    bench_parser,
    pair_ratios,
    ratio_summary,
    run_pairs,
    timed,
    verdict,
)
from train.trial.measurement import run_trial

log = logging.getLogger("bench_projection")
ERROR_GOAL = 0.05  # |projected / real - 1| of the step-time medians
WALL_GOAL = 3.0  # real trial wall / projected trial wall


def trial_config(args: argparse.Namespace, tmp: Path, *, projected: bool):
    overrides = [
        *cpu_trial_overrides_of(args, tmp),
        f"trial.project_micro_steps={args.micro_steps}",
        # forced either way: projected whatever the step's length, or real full steps
        f"trial.project_above_s={1e-9 if projected else 0}",
    ]
    return compose_config(overrides)


def run(args: argparse.Namespace, tmp: Path, *, projected: bool) -> dict:
    cfg = trial_config(args, tmp, projected=projected)
    out_path = tmp / f"{'p' if projected else 'f'}-{time.time_ns()}.json"
    result, wall_s = timed(lambda: run_trial(cfg, out_path=out_path))
    if result["status"] != "complete":
        raise SystemExit(f"trial failed: {result['failure']}")
    assert (result["projection"] is not None) == projected
    result["process_wall_s"] = wall_s
    return result


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, pairs=3, arms="projected and real")
    add_cpu_trial_args(p, model="small-cpu", grad_accum=32, warmup_steps=1, steps=6)
    p.add_argument("--micro-steps", type=int, default=4, help="micro-batches per projected step")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")

    def show(i: int, got: dict[bool, dict]) -> None:
        proj, real = got[True], got[False]
        print(
            f"pair {i + 1}: projected {proj['step_time_s']['p50']:.4f} s (from short steps of "
            f"{proj['projection']['short_step_s']['p50']:.4f} s) | real "
            f"{real['step_time_s']['p50']:.4f} s | error "
            f"{proj['step_time_s']['p50'] / real['step_time_s']['p50'] - 1:+.2%} | wall "
            f"{proj['process_wall_s']:.1f} s vs {real['process_wall_s']:.1f} s",
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="bench-projection-") as tmp_name:
        tmp = Path(tmp_name)
        pairs = run_pairs(
            (True, False),
            args.pairs,
            lambda projected, _: run(args, tmp, projected=projected),
            after_pair=show,
        )
    projected = [p[True]["step_time_s"]["p50"] for p in pairs]
    real = [p[False]["step_time_s"]["p50"] for p in pairs]
    errors = [r - 1 for r in pair_ratios(projected, real)]
    walls = pair_ratios(
        [p[False]["process_wall_s"] for p in pairs], [p[True]["process_wall_s"] for p in pairs]
    )
    proj_med, real_med = statistics.median(projected), statistics.median(real)
    error = proj_med / real_med - 1
    wall = statistics.median(walls)
    print(
        f"\n{args.model}, micro_batch {args.micro_batch} x grad_accum {args.grad_accum}, "
        f"projected from steps of {args.micro_steps} micro-batches, {args.pairs} interleaved pairs"
    )
    print(
        f"projected step p50 (median of trials) {proj_med:.4f} s vs real {real_med:.4f} s: "
        f"error {error:+.2%} (pairs {min(errors):+.2%} .. {max(errors):+.2%}); goal within "
        f"{ERROR_GOAL:.0%}: {verdict(abs(error) <= ERROR_GOAL)}"
    )
    print(
        f"trial wall real / projected: {ratio_summary(walls)}; "
        f"goal >= {WALL_GOAL:.0f}x: {verdict(wall >= WALL_GOAL)}"
    )
    return 0 if abs(error) <= ERROR_GOAL and wall >= WALL_GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
