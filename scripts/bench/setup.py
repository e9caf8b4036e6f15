"""Where a trial process's set-up goes, phase by phase: this tree against an earlier revision.

    python -m scripts.bench.setup --before 654353c^ --model gpt2 --pairs 3

Each arm is one `python -m train.trial` child, exec'd (not forked from the sweep's zygote, so its
imports count), on the same generated data: `after` runs this checkout, `before` a git worktree of
`--before` made for the run and removed after it. Every run's result carries the set-up record
(train/trial/setup_clock.py: before_trial_s, session_s, fingerprint_s, device_peaks_s, total_s);
the revision must be one that writes it (result schema 6, 2026-11-27, or later). One unmeasured
run of each arm first generates the data and warms the file cache; then interleaved pairs.
Prints each phase's median (min-max) per arm ('-' where a revision has no such phase) and the
per-pair ratio of the totals, before / after.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from scripts.bench.configs import cpu_trial_overrides
from scripts.bench.harness import (
    REPO,
    bench_parser,
    emit,
    format_table,
    pair_ratios,
    ratio_summary,
    run_child,
    run_pairs,
    spread,
    trial_argv,
)

ARMS = ("before", "after")


def trial_overrides(tmp: Path, *, model: str, block_size: int, tag: str) -> list[str]:
    """A short eager CPU trial: 1 warm-up and 2 measured steps of 2 sequences of `block_size`."""
    return [
        *cpu_trial_overrides(
            tmp,
            model=model,
            micro_batch=2,
            grad_accum=1,
            block_size=block_size,
            warmup_steps=1,
            steps=2,
        ),
        f"model.block_size={block_size}",
        f"trial.out={tmp / tag / 'result.json'}",
        f"hydra.run.dir={tmp / tag}",
    ]


def setup_record(cwd: Path, overrides: list[str], *, tag: str) -> dict[str, float]:
    """The set-up record of one trial run in `cwd` (a checkout); a failed one ends the run."""
    out = Path(next(o for o in overrides if o.startswith("trial.out=")).split("=", 1)[1])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(cwd)  # the checkout's own packages, not this tree's install
    child = run_child(trial_argv(*overrides), cwd=cwd, env=env)
    if child.proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{tag}: trial failed ({child.proc.returncode}):\n{child.output[-3000:]}")
    setup = json.loads(out.read_text()).get("setup")
    if not setup:
        raise SystemExit(f"{tag}: the result has no set-up record (a revision before schema 6?)")
    return {k: float(v or 0.0) for k, v in setup.items()}


def _cell(records: list[dict[str, float]], phase: str) -> str:
    """A phase's median (min-max) over an arm's runs; '-' where that revision has no such phase."""
    if phase not in records[0]:
        return "-"
    return spread([r[phase] for r in records])


def report(records: dict[str, list[dict[str, float]]], *, title: str) -> str:
    phases = [k for k in records["after"][0] if k != "total_s"]
    phases += [k for k in records["before"][0] if k not in phases and k != "total_s"]
    rows = [
        [phase.removesuffix("_s"), *(_cell(records[a], phase) for a in ARMS)] for phase in phases
    ]
    rows.append(["total", *(_cell(records[a], "total_s") for a in ARMS)])
    totals = {a: [r["total_s"] for r in records[a]] for a in ARMS}
    ratio = ratio_summary(pair_ratios(totals["before"], totals["after"]))
    return "\n".join(
        [
            title,
            format_table(["phase (seconds)", *ARMS], rows),
            f"total before / after: {ratio}",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    p = bench_parser(__doc__, pairs=3, arms="before and after")
    p.add_argument("--before", required=True, help="the earlier revision (git rev)")
    p.add_argument("--model", default="gpt2", help="a preset of conf/model/")
    p.add_argument("--block-size", type=int, default=128, help="model.block_size")
    p.add_argument("--out", type=Path, help="also write the output to this file")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_setup_") as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "before-tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(tree), a.before],
            cwd=REPO,
            check=True,
        )
        try:
            cwd = {"before": tree, "after": REPO}

            def run(arm: str, i: int) -> dict[str, float]:
                tag = f"{i}-{arm}"
                overrides = trial_overrides(tmp, model=a.model, block_size=a.block_size, tag=tag)
                return setup_record(cwd[arm], overrides, tag=tag)

            for arm in ARMS:  # generate the data, warm the file cache: not measured
                run(arm, -1)
            pairs = run_pairs(ARMS, a.pairs, lambda arm, i: run(arm, i + 1))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False
            )
    rev = subprocess.run(
        ["git", "rev-parse", "--short", a.before], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    records = {arm: [pair[arm] for pair in pairs] for arm in ARMS}
    title = (
        f"trial set-up, model={a.model} model.block_size={a.block_size} on cpu, "
        f"{a.pairs} interleaved pairs, before = {a.before} ({rev}), after = this tree:"
    )
    emit(report(records, title=title), a.out)


if __name__ == "__main__":
    main()
