"""False alarms of the numerics guard: its comparison run N times on identical math.

    python -m scripts.bench.guard [--reruns 10] [--steps 20] [--seeds 2] [--k 2] [--floor 0.01]
                                  [--processes] [--candidate KEY=VALUE ...] [overrides ...]

Each rerun does what the sweep's guard does (sweeper/verify/guard.py), outside a sweep: it trains
the reference config from `--seeds` fresh seeds (rerun r: 1000 + 10 r, + 1, ...), all in one
`python -m train.trial` process (trial.seeds), and the candidate from the first of them in its own,
each curve `--steps` optimizer steps with the guard's curve keys (train/core/curve.py), derives the
tolerance from the reference's seed spread and judges the candidate
(sweeper/verify/guard_rules.py). The candidate is the reference config itself (identical math)
unless `--candidate` adds overrides (e.g. `--candidate hooks.fault=coarse_weights` to see the
planted precision loss alarm every time). Every run trains at the production schedule's first lrs
(warm-up included), as the sweep's curve runs do. `--processes` also trains the reference a process
per seed (as the guard did before its seeds shared one), checks the curves are the same, and prints
both walls and their ratio by rerun. Prints each rerun's tolerance derivation, whether the
reference trained (it must fall by more than the seed spread) and the verdict, then the alarms
count and the spread of the tolerances and divergences. Exits 1 when identical math raised an alarm
or a reference did not train.
Default config: the tiny preset, 2048 tokens a step (8 x 4 micro-batches), one torch thread.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.harness import (
    REPO,
    bench_args,
    pair_ratios,
    ratio_summary,
    run_child,
    spread,
    trial_argv,
)
from sweeper.space.overrides import format_override
from sweeper.verify.guard_rules import check, descent, tolerance, window_size
from sweeper.verify.guard_text import check_text, descent_text, tolerance_text
from train.core import hooks
from train.core.curve import curve_keys, seed_curves

log = logging.getLogger("bench_guard")
DEFAULTS = [
    "model=tiny",
    "batch.tokens_per_step=2048",
    "batch.micro_batch=8",
    "batch.grad_accum=4",
    "runtime.threads=1",
    "data.num_workers=0",
]


def curve_runs(
    overrides: list[str], *, seeds: list[int], steps: int, out_dir: Path
) -> tuple[dict[int, list[float]], float]:
    """The curves of `seeds` trained in one fresh process (trial.seeds, as the sweep's guard
    trains its reference) and that process's wall; every curve must complete."""
    keys = curve_keys(steps=steps, seed=seeds[0], seeds=len(seeds))
    out = out_dir / "trial.json"
    argv = trial_argv(
        *overrides,
        *(format_override(k, v) for k, v in keys.items()),
        f"trial.out={out}",
        f"hydra.run.dir={out_dir}",
    )
    started = time.perf_counter()
    child = run_child(
        argv, env={**os.environ, "PYTHONPATH": str(REPO), hooks.ENV: "1"}, timeout=900
    )
    wall = time.perf_counter() - started
    result = json.loads(out.read_text()) if out.exists() else None
    curves, why = seed_curves(result, seed0=seeds[0], seeds=len(seeds))
    if len(curves) < len(seeds):
        proc = child.proc
        raise SystemExit(f"curve run failed (exit {proc.returncode}; {why}): {proc.stderr[-2000:]}")
    return curves, wall


def reference(
    args: argparse.Namespace, base: list[str], seeds: list[int], work: Path, *, r: int
) -> tuple[dict[int, list[float]], float, float | None]:
    """The reference's curves and walls: one process of every seed, and with --processes also a
    process per seed (which goes first alternating by rerun `r`), whose curves must be the same."""

    def one() -> tuple[dict[int, list[float]], float]:
        return curve_runs(base, seeds=seeds, steps=args.steps, out_dir=work / "ref")

    def apart() -> tuple[dict[int, list[float]], float]:
        curves, wall = {}, 0.0
        for s in seeds:
            got, s_wall = curve_runs(base, seeds=[s], steps=args.steps, out_dir=work / f"ref-{s}")
            curves.update(got)
            wall += s_wall
        return curves, wall

    if not args.processes:
        curves, one_s = one()
        return curves, one_s, None
    if r % 2:
        (apart_curves, apart_s), (curves, one_s) = apart(), one()
    else:
        (curves, one_s), (apart_curves, apart_s) = one(), apart()
    if apart_curves != curves:
        raise SystemExit(f"seeds in one process trained other curves: {curves} {apart_curves}")
    return curves, one_s, apart_s


def rerun(args: argparse.Namespace, r: int, work: Path) -> dict:
    """One guard comparison: reference seeds, the candidate at the first, the verdict."""
    base = [*DEFAULTS, *args.overrides]
    seeds = [1000 + 10 * r + i for i in range(args.seeds)]
    curves, one_s, apart_s = reference(args, base, seeds, work / f"r{r}", r=r)
    (cand,) = curve_runs(
        [*base, *args.candidate], seeds=seeds[:1], steps=args.steps, out_dir=work / f"r{r}-cand"
    )[0].values()
    tol = tolerance(curves, k=args.k, floor=args.floor, window=window_size(args.steps))
    trained = descent(curves, spread=tol.spread, window=tol.window)
    verdict = check(cand, curves[seeds[0]], tol)
    print(f"rerun {r + 1}: {tolerance_text(tol)}")
    trains = "trains" if trained.trains else "DOES NOT TRAIN"
    print(f"  reference {trains}: {descent_text(trained)}")
    print(f"  candidate: {'passed' if verdict.passed else 'ALARM'}: {check_text(verdict)}")
    if apart_s is not None:
        print(
            f"  reference wall: {one_s:.1f} s in one process, {apart_s:.1f} s in "
            f"{len(seeds)} (the same curves)"
        )
    return {
        "alarm": not verdict.passed,
        "tolerance": tol.value,
        "spread": tol.spread,
        "divergence": verdict.divergence.value,
        "trains": trained.trains,
        "drop": trained.drop,
        "one_s": one_s,
        "apart_s": apart_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reruns", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--k", type=float, default=2.0)
    p.add_argument("--floor", type=float, default=0.01)
    p.add_argument("--candidate", nargs="*", default=[], help="overrides of the candidate only")
    p.add_argument(
        "--processes",
        action="store_true",
        help="also train the reference seeds a process each, and compare the walls",
    )
    p.add_argument("overrides", nargs="*", help="trainer overrides of both (Hydra syntax)")
    args = bench_args(p, argv)
    math_note = (
        "identical math"
        if not args.candidate
        else f"candidate overrides {' '.join(args.candidate)}"
    )
    print(
        f"numerics guard, {args.reruns} reruns of {math_note}: {args.seeds} reference seeds + "
        f"1 candidate run of {args.steps} steps each; tolerance = max({args.k:g} x seed "
        f"spread, {args.floor:g}); config {' '.join([*DEFAULTS, *args.overrides])}"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_guard-") as tmp:
        rows = [rerun(args, r, Path(tmp)) for r in range(args.reruns)]
    alarms = sum(row["alarm"] for row in rows)
    print(f"alarms: {alarms} of {len(rows)} reruns ({math_note})")
    print(f"tolerance (nats): {spread([r['tolerance'] for r in rows], '{:.4f}')}")
    print(f"seed spread (nats): {spread([r['spread'] for r in rows], '{:.4f}')}")
    print(f"candidate divergence (nats): {spread([r['divergence'] for r in rows], '{:.4f}')}")
    print(
        f"reference trained (descent beyond the seed spread): "
        f"{sum(r['trains'] for r in rows)} of {len(rows)}; descent (nats): "
        f"{spread([r['drop'] for r in rows], '{:.4f}')}"
    )
    if args.processes:
        one, apart = [r["one_s"] for r in rows], [r["apart_s"] for r in rows]
        print(
            f"reference wall, {args.seeds} seeds in one process: {spread(one, '{:.1f}')} s; a "
            f"process each: {spread(apart, '{:.1f}')} s; one / apart by rerun: "
            f"{ratio_summary(pair_ratios(one, apart), unit='reruns')}"
        )
    print(f"wall: {time.perf_counter() - started:.0f} s")
    # identical math that alarms, or a reference that did not train (no verdict means anything)
    untrained = any(not r["trains"] for r in rows)
    return 1 if untrained or (alarms and not args.candidate) else 0


if __name__ == "__main__":
    sys.exit(main())
