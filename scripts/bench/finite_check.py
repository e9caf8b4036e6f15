"""What the finite check before each checkpoint save costs, against the step it guards.

    python -m scripts.bench.finite_check [--rounds 40] [--every 3] [overrides ...]

Builds the default CPU trial's session (conf/train.yaml: the tiny preset, 4096 tokens a step as
8 x 8 micro-batches, eager; overrides as in `python -m train.trial`) and, after warm-up steps,
interleaves one training step (train_step plus its one sync) with one finite check of the loss,
the weights and the AdamW state (train/run/finite.py), round after round, so both see the same
machine noise. Prints the step and check times (p50, p10-p90), the per-round ratio check / step
(the cost on a step that saves; median and p10-p90) and that ratio spread over `--every` steps (the
sweep's trials save every 3 or 6 steps; production intervals are longer). Goal: the per-save-step
ratio under 1%. Exits 1 when the goal fails.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
from pathlib import Path

from scripts.bench.configs import compose_config
from scripts.bench.harness import bench_parser, format_table, pair_ratios, quantile, timed, verdict

log = logging.getLogger("bench_finite_check")
GOAL = 0.01  # the check's share of a step that saves


def measure(overrides: list[str], *, rounds: int, warmup: int) -> tuple[list[float], list[float]]:
    """Interleaved (step seconds, check seconds), one pair a round, after `warmup` steps."""
    from train.run.finite import check_state_finite
    from train.run.loop import (
        build_session,
        close_session,
        finish_step,
        make_phase_clock,
        train_step,
    )

    s = build_session(compose_config(overrides))
    clock = make_phase_clock(s.device)
    steps: list[float] = []
    checks: list[float] = []
    try:

        def step() -> float:
            loss = train_step(s, lr=s.cfg.optim.lr, clock=clock)
            finish_step(s, clock)
            return loss

        for i in range(warmup + rounds):
            loss, step_s = timed(step)
            _, check_s = timed(
                lambda i=i, loss=loss: check_state_finite(
                    step=i + 1, loss=loss, model=s.raw_model, optimizer=s.optimizer, last_good=None
                )
            )
            if i >= warmup:
                steps.append(step_s)
                checks.append(check_s)
    finally:
        close_session(s)
    return steps, checks


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="interleaved step/check pairs")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the first pair")
    parser.add_argument("--every", type=int, default=3, help="steps between saves, amortised")
    parser.add_argument(
        "overrides", nargs="*", help="trainer overrides (default: the default CPU trial)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    tmp = Path(tempfile.mkdtemp(prefix="bench_finite_"))
    data = tmp / "data" / "synthetic"  # the embedded default, generated there
    base = [f"data.dir={data}", f"checkpoint.dir={tmp / 'ckpt'}", "runtime.device=cpu"]
    steps, checks = measure([*base, *args.overrides], rounds=args.rounds, warmup=args.warmup)
    ratios = pair_ratios(checks, steps)
    ratio = statistics.median(ratios)
    rows = [
        [
            "step",
            f"{statistics.median(steps) * 1e3:.2f} ms",
            f"{quantile(steps, 0.1) * 1e3:.2f}-{quantile(steps, 0.9) * 1e3:.2f} ms",
        ],
        [
            "finite check",
            f"{statistics.median(checks) * 1e3:.3f} ms",
            f"{quantile(checks, 0.1) * 1e3:.3f}-{quantile(checks, 0.9) * 1e3:.3f} ms",
        ],
        [
            "check / step (a step that saves)",
            f"{ratio:.3%}",
            f"{quantile(ratios, 0.1):.3%}-{quantile(ratios, 0.9):.3%}",
        ],
        [
            f"amortised over a save every {args.every} steps",
            f"{ratio / args.every:.3%}",
            f"{quantile(ratios, 0.1) / args.every:.3%}-{quantile(ratios, 0.9) / args.every:.3%}",
        ],
    ]
    print(f"{args.rounds} interleaved rounds, overrides: {' '.join(args.overrides) or '(default)'}")
    print(format_table(["what", "median", "p10-p90"], rows))
    said = verdict(ratio < GOAL)
    print(f"goal: the check under {GOAL:.0%} of a step that saves: {ratio:.3%} {said}")
    return 0 if ratio < GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
