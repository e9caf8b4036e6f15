"""Plan against reality on this machine: the default CPU sweep's predicted wall beside the measured.

    python -m scripts.bench.plan_accuracy [--runs 3] [--workdir DIR]

In one work dir (one Optuna storage, one MLflow store), `--runs` + 1 times: plan mode first
(`python sweep.py -m search=throughput hydra.sweeper.plan.enabled=true`, the README's first command
in plan mode), then the sweep itself (the same command, each run with its own study name so it
starts a new study instead of resuming the last). The first plan has no earlier sweep to learn from
(the arithmetic: a conservative 10 GFLOP/s CPU, capped by the CPU wall budget); every later plan is
calibrated from the finished sweeps before it (sweeper/plan/calibration.py). Prints each run's
predicted and measured wall and the error, and whether the calibrated runs are within --goal.
Exit code 1 when a calibrated run misses it.
"""

from __future__ import annotations

import re

from scripts.bench.harness import (
    bench_args,
    bench_parser,
    run_child,
    run_or_stop,
    sweep_argv,
    verdict,
    workdir_of,
)

WALL = re.compile(r"predicted sweep wall: ((?:\d+h)?(?:\d+m)?(?:\d+s)?|[\d.]+ s)")


def seconds(text: str) -> float:
    """fmt_secs back to seconds: 1h32m, 6m30s, 35.4 s."""
    if text.endswith(" s"):
        return float(text[:-2])
    parts = dict((u, int(v)) for v, u in re.findall(r"(\d+)([hms])", text))
    return 3600 * parts.get("h", 0) + 60 * parts.get("m", 0) + parts.get("s", 0)


def readme_sweep(*overrides: str) -> list[str]:
    """The README's first command, `python sweep.py -m search=throughput`, with `overrides`."""
    return sweep_argv("search=throughput", *overrides)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, workdir=True)
    ap.add_argument("--runs", type=int, default=3, help="runs after the first")
    ap.add_argument("--goal", type=float, default=0.25, help="|error| goal of calibrated runs")
    ap.add_argument(
        "--first",
        type=int,
        default=0,
        help="first run's number: continue an earlier --workdir (its sweeps count)",
    )
    args = bench_args(ap, argv)
    workdir = workdir_of(args, "bench-plan-")
    rows = []
    for i in range(args.first, args.first + args.runs + 1):
        plan = run_child(readme_sweep("hydra.sweeper.plan.enabled=true"), cwd=workdir).proc
        found = WALL.search(plan.stdout)
        if plan.returncode != 0 or not found:
            raise SystemExit(f"plan {i} failed (exit {plan.returncode}):\n{plan.stderr[-2000:]}")
        predicted = seconds(found.group(1))
        calibrated = "calibrated from" in plan.stdout
        (workdir / f"plan-{i}.txt").write_text(plan.stdout)
        own_study = f"hydra.sweeper.study_name=plan-accuracy-{i}"  # a new study, none resumed
        run = run_or_stop(
            readme_sweep(own_study), cwd=workdir, log_name=f"sweep-{i}.log", what=f"sweep {i}"
        )
        wall = run.wall_s
        error = predicted / wall - 1
        rows.append((i, calibrated, predicted, wall, error))
        how = "calibrated" if calibrated else "arithmetic"
        print(
            f"run {i}: predicted {predicted:6.0f} s ({how}), measured {wall:6.0f} s, "
            f"error {100 * error:+6.1f}%",
            flush=True,
        )
    print(f"work dir: {workdir}")
    judged = [r for r in rows if r[1]]
    missed = [r for r in judged if abs(r[4]) > args.goal]
    print(
        f"calibrated runs within +-{100 * args.goal:.0f}%: {len(judged) - len(missed)} of "
        f"{len(judged)}  {verdict(bool(judged) and not missed)}"
    )
    return 1 if missed or not judged else 0


if __name__ == "__main__":
    raise SystemExit(main())
