"""Race two configurations whose true gap is planted, many times, and count the verdicts.

    python -m scripts.bench.race                       # gaps 5% and 10%, 10 races each
    python -m scripts.bench.race --gaps 0.10 --races 3

The slower configuration is the faster one plus `hooks.inject_latency_s` (with `data.num_workers=0`,
so nothing hides it) sized to the planted share of the faster one's measured step: each micro-batch
sleeps `gap x step / grad_accum`. Each race is the sweep's own race (sweeper/verify/race_rounds.py
`run_race`, its rules from the sweep settings: 3 to 8 rounds, 95% paired test, 2% margin) over
real bounded trials (`train.trial.measurement.run_trial`) on this CPU. Unlike a sweep, each trial
runs in this process (a sweep forks a fresh one): the trials' own noise is real, the process
start-up is not paid, so 20 races fit in minutes.

Printed, all measured now: per gap, how often the faster config is declared the winner, how often
the race ends equivalent or not significant, how often the slower one is declared the winner, and
the median number of rounds. Goals (issue 12): the slower one wins 0 of 10 races at 10% and at most
1 of 10 at 5%. Exit code 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import optuna

from train.core import hooks

hooks.enable()  # the slower config's latency is a test hook; on before the schema is registered

from scripts.bench.configs import add_cpu_trial_args, compose_config, cpu_trial_overrides_of  # noqa: E402
from scripts.bench.harness import bench_parser, verdict  # noqa: E402
from sweeper.settings import settings_from  # noqa: E402
from sweeper.verify.race_rounds import run_race  # noqa: E402
from sweeper.verify.race_rules import DECIDED, TIED  # noqa: E402
from sweeper.verify.winner import Candidate  # noqa: E402
from tests.race_helpers import race_context  # noqa: E402
from train.trial.measurement import run_trial  # noqa: E402

log = logging.getLogger("bench_race")
FAST, SLOW = 0, 1  # contender numbers
GOALS = {0.10: 0, 0.05: 1}  # planted gap -> most races the slower config may win (of 10)


class InProcessJobs:
    """The race's launcher: each job is one real bounded trial, run here."""

    def __init__(self, tmp: Path, base: list[str]) -> None:
        self.tmp, self.base, self.job_idx = tmp, base, 0

    def launch(self, batch: list[list[str]], names: list[str] | None = None) -> list[dict]:
        outs = []
        for overrides in batch:
            out = self.tmp / f"job-{self.job_idx}" / "result.json"
            self.job_idx += 1
            result = run_trial(compose_config([*self.base, *overrides]), out_path=out)
            state = "complete" if result["status"] == "complete" else "crash"
            outs.append(
                {
                    "state": state,
                    "result": result,
                    "job_dir": str(out.parent),
                    "reason": str(result.get("failure")),
                }
            )
        return outs


def base_overrides(args: argparse.Namespace, tmp: Path) -> list[str]:
    """The faster config: no checkpoint saves, real full steps (nothing projected)."""
    return [
        *cpu_trial_overrides_of(args, tmp),
        "checkpoint.every_steps=0",
        "trial.project_above_s=0",
    ]


def race_once(jobs: InProcessJobs, latency_s: float, *, seed: int) -> tuple[int | None, str, int]:
    """One race of the fast config against the planted-slow one; (winner, outcome, rounds)."""
    settings = settings_from(
        {"verify.repeats": 3, "verify.max_rounds": 8, "seed": seed, "mlflow.enabled": False}
    )
    ctx = race_context(jobs=jobs, settings=settings)
    cands = {
        n: Candidate(key=str(n), params={"n": n}, overrides=ov, values=[], simplicity=0)
        for n, ov in ((FAST, []), (SLOW, [f"hooks.inject_latency_s={latency_s}"]))
    }
    _, standing = run_race(cands, ctx)
    winner = standing.alive[0] if standing.outcome == DECIDED else None
    return winner, standing.outcome or "failed", standing.rounds


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    add_cpu_trial_args(p, model="tiny", grad_accum=4, warmup_steps=2, steps=12)
    p.add_argument("--gaps", type=float, nargs="+", default=[0.05, 0.10])
    p.add_argument("--races", type=int, default=10, help="races per gap")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-race-") as tmp_name:
        tmp = Path(tmp_name)
        jobs = InProcessJobs(tmp, base_overrides(args, tmp))
        # the faster config's step, measured now (median of 3 trials), sizes the planted latency
        steps = [jobs.launch([[]])[0]["result"]["step_time_s"]["p50"] for _ in range(3)]
        step_s = statistics.median(steps)
        print(
            f"{args.model}, micro_batch {args.micro_batch} x grad_accum {args.grad_accum}: "
            f"step p50 {step_s * 1e3:.1f} ms (median of 3 trials)"
        )
        for gap in args.gaps:
            latency = gap * step_s / args.grad_accum
            tally = {"faster": 0, "equivalent": 0, "not significant": 0, "slower": 0}
            rounds, started = [], time.perf_counter()
            for i in range(args.races):
                winner, outcome, n = race_once(jobs, latency, seed=i)
                rounds.append(n)
                key = {FAST: "faster", SLOW: "slower"}.get(
                    winner, "equivalent" if outcome == TIED else "not significant"
                )
                tally[key] += 1
                print(
                    f"  gap {gap:.0%} race {i + 1}: {outcome} after {n} rounds -> {key}", flush=True
                )
            goal = GOALS.get(round(gap, 2))
            said = ""
            if goal is not None and args.races == 10:
                ok = tally["slower"] <= goal
                failed |= not ok
                said = f"; goal slower <= {goal} of 10: {verdict(ok)}"
            print(
                f"planted gap {gap:.0%} ({latency * 1e3:.2f} ms per micro-batch), {args.races} "
                f"races: faster declared {tally['faster']}, equivalent {tally['equivalent']}, "
                f"not significant {tally['not significant']}, slower declared {tally['slower']}; "
                f"median rounds {statistics.median(rounds):g} (min {min(rounds)}, max "
                f"{max(rounds)}); {time.perf_counter() - started:.0f} s{said}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
