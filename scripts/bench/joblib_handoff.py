"""Does training from best.yaml run at the race's verified speed under a parallel launcher?

    python -m scripts.bench.joblib_handoff [--workdir DIR] [--pairs 3] [--steps 100] [--trials 4]
                                           [--reuse-sweep]

Issue 24, must-show 3. Runs a small sweep under `hydra/launcher=joblib hydra.sweeper.n_jobs=2` on
this machine (`search=smoke`: micro-batch {4, 8} x DataLoader workers {0, 1}, `--trials` trials,
its race of 3 rounds), then `--pairs` interleaved pairs of:
  production  `python -m train --config-path <sweep dir> --config-name best` for `--steps` steps
              (logging every step; its own fresh checkpoint folder; no evaluation), tokens/s =
              its tokens over the total time of its steps after the first, as a trial counts;
  race config `python -m train.trial --pinned <the winner's race run>/trial_config.yaml`: the
              config the race measured, run again the way the race ran it (real full steps).
Prints the race's verified tokens/s (best.yaml's provenance), each pair, the production median
over the verified figure and over the re-measured race config (ratio and range; target: within
10%), best.yaml's pinned threads and what it says of them (provenance.measured_as), and the line of
`python -m train.explain --result <sweep dir>` that names the exported trial.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import yaml

from scripts.bench.harness import (
    REPO,
    Child,
    bench_parser,
    pair_ratios,
    ratio_summary,
    run_child,
    run_pairs,
    sweep_argv,
    trial_argv,
    verdict,
    workdir_of,
)

# three race rounds: the verified figure is a median of 3 runs, not one 20-step draw of a machine
# whose fixed work varies by 12-23% from run to run
SWEEP_OVERRIDES = [
    "search=smoke",
    "hydra/launcher=joblib",
    "hydra.sweeper.n_jobs=2",
    "hydra.sweeper.verify.repeats=3",
]


def run(argv: list[str], *, cwd: Path = REPO, timeout: float = 900) -> Child:
    child = run_child(argv, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=timeout)
    if child.proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {child.proc.returncode}:\n{child.output[-3000:]}")
    return child


def sweep(work: Path, trials: int) -> Path:
    """The sweep's folder (with best.yaml) under `work`."""
    sweep_dir = work / "sweep"
    argv = sweep_argv(
        *SWEEP_OVERRIDES,
        f"hydra.sweeper.n_trials={trials}",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.sweeper.storage=sqlite:///{work / 'optuna.db'}",
        f"hydra.sweeper.study_name=handoff-{int(time.time())}",
    )
    print("$ python sweep.py -m " + " ".join(argv[3:]), flush=True)
    print(f"sweep: {run(argv, cwd=work).wall_s:.0f} s", flush=True)
    return sweep_dir


def production_tokens_per_s(sweep_dir: Path, out: Path, steps: int) -> float:
    argv = [
        sys.executable,
        "-m",
        "train",
        "--config-path",
        str(sweep_dir),
        "--config-name",
        "best",
        f"train.max_steps={steps}",
        "train.log_every=1",
        "train.eval_every=0",
        "train.resume=never",
        f"checkpoint.dir={out / 'ck'}",
        f"hydra.run.dir={out}",
    ]
    run(argv)
    history = json.loads((out / "train_summary.json").read_text())["history"]
    per_step = [h["tokens_per_s"] for h in history if "tokens_per_s" in h][1:]  # first: warm-up
    # tokens over the steps' total time, as a trial's tokens_per_s is (the steps hold equal tokens)
    return statistics.harmonic_mean(per_step)


def race_config_tokens_per_s(trial_config: Path, out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    run(trial_argv("--pinned", str(trial_config), f"trial.out={out / 'trial.json'}"))
    return json.loads((out / "trial.json").read_text())["tokens_per_s"]


def ratio_line(name: str, ratios: list[float]) -> str:
    ok = abs(statistics.median(ratios) - 1) <= 0.10
    return (
        f"production / {name}: {ratio_summary(ratios, '{:.3f}')}; target within 10%: {verdict(ok)}"
    )


def explain_line(sweep_dir: Path, trial: int) -> str:
    child = run([sys.executable, "-m", "train.explain", "--result", str(sweep_dir)])
    lines = [ln for ln in child.output.splitlines() if f"trial {trial}" in ln]
    return lines[0] if lines else f"(no line names trial {trial}:)\n{child.proc.stdout[-1500:]}"


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, pairs=3, arms="production and race config", workdir=True)
    ap.add_argument("--steps", type=int, default=100, help="production steps per run")
    ap.add_argument("--trials", type=int, default=4, help="hydra.sweeper.n_trials")
    ap.add_argument(
        "--reuse-sweep",
        action="store_true",
        help="measure the sweep already in --workdir (its best.yaml) again",
    )
    args = ap.parse_args(argv)
    work = workdir_of(args, "handoff-")
    print(f"work dir: {work}; CPUs here: {len(os.sched_getaffinity(0))}", flush=True)
    sweep_dir = work / "sweep"
    if args.reuse_sweep and (sweep_dir / "best.yaml").is_file():
        print(f"reusing the sweep in {sweep_dir} (--reuse-sweep)", flush=True)
    else:
        sweep_dir = sweep(work, args.trials)
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    prov = best["provenance"]
    verified = prov["metrics"]["tokens_per_s"]
    trial = prov["sweep"]["trial"]
    race_runs = prov["sweep"]["runs"][1:]  # the first is the search run
    print(
        f"exported trial {trial}: verified {verified:,.0f} tokens/s (median of "
        f"{prov['metrics']['n']} race runs: {race_runs})"
    )
    print(
        f"best.yaml runtime.threads={best['runtime']['threads']}; measured_as: "
        f"{json.dumps(prov.get('measured_as'))}"
    )
    race_config = sweep_dir / race_runs[-1] / "trial_config.yaml"

    def one(which: str, i: int) -> float:
        out = work / f"pair{i}-{which.replace(' ', '-')}"
        if which == "production":
            return production_tokens_per_s(sweep_dir, out, args.steps)
        return race_config_tokens_per_s(race_config, out)

    def show(i: int, got: dict[str, float]) -> None:
        print(
            f"pair {i} ({' then '.join(got)}): production {got['production']:,.0f} tokens/s, "
            f"race config {got['race config']:,.0f} tokens/s, "
            f"ratio {got['production'] / got['race config']:.3f}",
            flush=True,
        )

    rows = run_pairs(("production", "race config"), args.pairs, one, after_pair=show)
    prod = [r["production"] for r in rows]
    print(
        f"production median {statistics.median(prod):,.0f} tokens/s "
        f"(range {min(prod):,.0f}-{max(prod):,.0f}); race verified {verified:,.0f}"
    )
    print(ratio_line("the race's verified tokens/s", [p / verified for p in prod]))
    print(
        ratio_line(
            "the race config re-measured (paired)",
            pair_ratios([r["production"] for r in rows], [r["race config"] for r in rows]),
        )
    )
    print(f"explain --result names: {explain_line(sweep_dir, trial)}")


if __name__ == "__main__":
    main()
