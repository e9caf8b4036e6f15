"""A data-parallel trial against one process at the same global batch and seed, on this CPU.

    python -m scripts.bench.ddp [--model tiny] [--steps 8] [--pairs 3] [--warmup-steps 3]

Runs `python -m train.trial` as one process (micro-batch 2m) and as `runtime.nproc=2` gloo DDP
ranks (micro-batch m each: the same global batch), fp32, in interleaved pairs. Prints each pair's
largest relative loss difference over the first 5 steps (warm-up included), the tokens per step,
tokens/s, and the 2-process trial's time split with its `comms` share (the all-reduce left after
the backward), then the median tokens/s ratio (2 processes / 1) with its range.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from scripts.bench.configs import add_cpu_trial_args, cpu_trial_overrides_of
from scripts.bench.harness import (
    bench_parser,
    format_table,
    ratio_summary,
    run_child,
    run_pairs,
    trial_argv,
)

log = logging.getLogger("bench_ddp")
COMPARED_STEPS = 5


def trial(tmp: Path, name: str, overrides: list[str]) -> dict:
    """One `python -m train.trial` run; its result JSON."""
    out = tmp / name
    argv = trial_argv(
        *overrides, f"hydra.run.dir={out}", "runtime.dtype=fp32", "trial.project_above_s=0"
    )
    (tmp / f"{name}.log").write_text(run_child(argv).output)
    result = json.loads((out / "trial.json").read_text())
    if result["status"] != "complete":
        raise SystemExit(f"trial {name} {result['status']}: {result['failure']}; see {tmp}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, pairs=3, arms="1 process and 2")
    add_cpu_trial_args(
        parser,
        model="tiny",
        grad_accum=2,
        warmup_steps=3,
        steps=8,
        micro_batch_help="per rank; one process: 2x",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tmp = Path(tempfile.mkdtemp(prefix="bench_ddp_"))

    def overrides(micro_batch: int, *extra: str) -> list[str]:
        base = cpu_trial_overrides_of(args, tmp, micro_batch=micro_batch)
        tokens = 2 * args.micro_batch * args.grad_accum * args.block_size  # the global figure
        return [*base, f"batch.tokens_per_step={tokens}", *extra]

    def run(nproc: int, p: int) -> dict:
        mb = args.micro_batch * (2 // nproc)
        return trial(tmp, f"p{p}-n{nproc}", overrides(mb, f"runtime.nproc={nproc}"))

    rows, ratios = [], []
    for p, runs in enumerate(run_pairs((1, 2), args.pairs, run)):
        one, two = runs[1], runs[2]
        a, b = one["loss"]["steps"][:COMPARED_STEPS], two["loss"]["steps"][:COMPARED_STEPS]
        diff = max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))
        fr = two["time_frac"]
        ratios.append(two["tokens_per_s"] / one["tokens_per_s"])
        rows.append(
            [
                str(p),
                f"{diff:.1e}",
                f"{one['tokens_per_step']} / {two['tokens_per_step']}",
                f"{one['tokens_per_s']:.0f}",
                f"{two['tokens_per_s']:.0f}",
                f"{fr['compute']:.0%} / {fr['comms']:.0%} / {fr['optimizer']:.0%} / "
                f"{fr['data_wait']:.0%} / {fr['other']:.0%}",
            ]
        )
        log.info("pair %d done: loss diff %.1e, comms %.1f%%", p, diff, 100 * fr["comms"])
    print(
        format_table(
            [
                "pair",
                f"max rel loss diff, {COMPARED_STEPS} steps",
                "tokens/step 1 / 2 proc",
                "tokens/s 1 proc",
                "tokens/s 2 proc",
                "2 proc: compute / comms / optim / data / other",
            ],
            rows,
        )
    )
    print(f"tokens/s, 2 processes / 1: {ratio_summary(ratios)}")
    print(f"results and logs: {tmp}")


if __name__ == "__main__":
    main()
