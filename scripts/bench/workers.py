"""One trial slot or two? The same sweep budget run with `hydra.sweeper.n_jobs=1` and `=2`.

    python -m scripts.bench.workers [--pairs 2] [--workdir DIR]
    python -m scripts.bench.workers --pairs 1 --space "{batch.micro_batch: 'choice(4, 8)'}" \
        --extra trial.max_steps=4 trial.min_steps=2      # a smoke run: 2 points, short trials

Both sweeps use Hydra's joblib launcher (so each trial starts the same way) and the same grid of
8 points (micro-batch 4 or 8, 0 or 1 data worker, 1 or 2 torch threads: the grid sampler gives
every run the same trials), with one verification round. `--one-thread` runs micro-batch 2, 4, 8
or 16 with 0 or 1 worker instead, every trial on one torch thread. The pairs run interleaved, in
alternating order, so the machine's drift hits both sides alike. Prints, per run and as the
median ratio (2 slots / 1 slot) with its range:
  - the sweep's wall time, and its search span (first trial start to last trial end);
  - the summed wall time of the trials, and their median tokens/s: what running two trials at
    once on one machine does to each trial's own measurement.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

import optuna
from optuna.trial import TrialState

from scripts.bench import harness

log = logging.getLogger("bench_workers")

# conf/search/grid.yaml's knobs with micro-batch 4 and 8 only (++: the whole space, 8 points)
SPACE = (
    "++hydra.sweeper.space={batch.micro_batch: 'choice(4, 8)', "
    "data.num_workers: 'choice(0, 1)', runtime.threads: 'choice(1, 2)'}"
)
# --one-thread: every trial on one torch thread, so two trials at once never ask for more
# threads than the machine's 2 cores (8 points again)
ONE_THREAD = (
    "++hydra.sweeper.space={batch.micro_batch: 'choice(2, 4, 8, 16)', "
    "data.num_workers: 'choice(0, 1)'}",
    "runtime.threads=1",
)
SWEEP = (
    "search=smoke",
    "hydra.sweeper.sampler=grid",
    "hydra.sweeper.n_trials=0",
    "hydra.sweeper.verify.top_k=1",
    "hydra.sweeper.verify.repeats=1",
    "hydra.sweeper.verify.max_rounds=1",
    "hydra/launcher=joblib",
    "hydra.sweeper.mlflow.enabled=false",
)


def run(workdir: Path, name: str, n_jobs: int, space: tuple[str, ...]) -> dict:
    """One sweep with `n_jobs` trial slots; its wall, search span, trial walls and speeds."""
    argv = harness.sweep_argv(
        *SWEEP,
        *space,
        f"hydra.sweeper.n_jobs={n_jobs}",
        f"hydra.launcher.n_jobs={n_jobs}",
        f"hydra.sweeper.study_name={name}",
        f"hydra.sweep.dir={workdir / name}",
    )
    child = harness.run_or_stop(argv, cwd=workdir, log_name=f"{name}.log", what=f"sweep {name}")
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{workdir / 'sweeps/optuna.db'}")
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]
    span = max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)
    return {
        "n_jobs": n_jobs,
        "trials": len(trials),
        "wall_s": child.wall_s,
        "search_s": span.total_seconds(),
        "trial_s": sum(t.user_attrs["wall_s"] for t in trials),
        "tokens_per_s": statistics.median(t.value for t in trials),
    }


def ratio_line(label: str, pairs: list[dict[int, dict]], key: str) -> str:
    ratios = harness.pair_ratios([p[2][key] for p in pairs], [p[1][key] for p in pairs])
    return f"{label:<28} {harness.ratio_summary(ratios)}"


def main(argv: list[str] | None = None) -> None:
    parser = harness.bench_parser(__doc__, pairs=2, arms="1 slot and 2 slots", workdir=True)
    parser.add_argument(
        "--one-thread",
        action="store_true",
        help="runtime.threads=1 in every trial (no thread knob)",
    )
    parser.add_argument(
        "--space",
        help="the searched space instead, a Hydra dict: \"{batch.micro_batch: 'choice(4, 8)'}\"",
    )
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every sweep")
    args = parser.parse_args(argv)
    if args.space:
        space: tuple[str, ...] = (f"++hydra.sweeper.space={args.space}",)
    else:
        space = ONE_THREAD if args.one_thread else (SPACE,)
    space += tuple(args.extra)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    workdir = harness.workdir_of(args, "bench_workers_")

    def one(n_jobs: int, p: int) -> dict:
        r = run(workdir, f"pair{p}-jobs{n_jobs}", n_jobs, space)
        log.info(
            "pair %d, %d slot(s): %d trials, sweep %.1f s, search %.1f s, trials %.1f s, "
            "median %.0f tokens/s",
            p,
            n_jobs,
            r["trials"],
            r["wall_s"],
            r["search_s"],
            r["trial_s"],
            r["tokens_per_s"],
        )
        return r

    pairs = harness.run_pairs((1, 2), args.pairs, one)
    rows = [
        [
            str(p),
            str(r["n_jobs"]),
            str(r["trials"]),
            f"{r['wall_s']:.1f}",
            f"{r['search_s']:.1f}",
            f"{r['trial_s']:.1f}",
            f"{r['tokens_per_s']:.0f}",
        ]
        for p, pair in enumerate(pairs)
        for r in (pair[1], pair[2])
    ]
    print(
        harness.format_table(
            ["pair", "slots", "trials", "sweep s", "search s", "sum of trial s", "median tokens/s"],
            rows,
        )
    )
    print(ratio_line("sweep wall, 2 / 1 slots", pairs, "wall_s"))
    print(ratio_line("search span, 2 / 1 slots", pairs, "search_s"))
    print(ratio_line("sum of trial walls, 2 / 1", pairs, "trial_s"))
    print(ratio_line("median tokens/s, 2 / 1", pairs, "tokens_per_s"))
    print(f"logs and sweep dirs: {workdir}")


if __name__ == "__main__":
    main()
