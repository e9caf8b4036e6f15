"""The race runs at the production run's torch threads, never a parallel launcher's cap (issue 24,
item 4): under `hydra/launcher=joblib hydra.sweeper.n_jobs=2` the search's trials share the 2 cores
at 1 thread each (joblib's cap), while the race, one config at a time, runs at torch's default in
a fresh process (what `python -m train --config-name best` gets), and best.yaml says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.launch import threads
from sweeper.report.best_yaml import pin_measured_threads
from tests.conftest import python_says
from tests.sweep_helpers import finished_sweep, sweep_dirs
from train.core.result import read_result

LIMITS = ["trial.max_steps=4", "trial.max_seconds=60"]


@pytest.mark.parametrize(
    "launcher,overrides,base,expected",
    [
        # joblib caps: a config that leaves threads to torch gets the production default
        ("JoblibLauncher", ["batch.micro_batch=8"], {"runtime.threads": 0}, "runtime.threads=2"),
        ("JoblibLauncher", ["runtime.threads=0"], {}, "runtime.threads=2"),
        # an explicit count (set or searched) is kept: last override wins, then the base
        ("JoblibLauncher", ["runtime.threads=1"], {"runtime.threads": 0}, None),
        ("JoblibLauncher", [], {"runtime.threads": 1}, None),
        ("JoblibLauncher", ["runtime.threads=1", "runtime.threads=0"], {}, "runtime.threads=2"),
        # data-parallel ranks share the cores out themselves
        ("JoblibLauncher", ["runtime.nproc=2"], {"runtime.threads": 0}, None),
        # no cap: nothing changes
        ("BasicLauncher", [], {"runtime.threads": 0}, None),
        ("LocalLauncher", [], {"runtime.threads": 0}, None),
        ("SlurmLauncher", [], {"runtime.threads": 0}, None),
    ],
)
def test_uncapped(launcher, overrides, base, expected):
    out = threads.uncapped([*overrides, *LIMITS], base=base, launcher=launcher, threads=2)
    if expected is None:
        assert out == [*overrides, *LIMITS]
    else:
        assert out == [*overrides, *LIMITS, expected]


def test_no_production_count_keeps_the_overrides():
    out = threads.uncapped(LIMITS, base={}, launcher="JoblibLauncher", threads=0)
    assert out == LIMITS


def test_production_threads_is_torchs_default_in_a_fresh_process():
    import os

    assert threads.production_threads() >= 1
    # a fresh interpreter without a thread cap says the same (this test process's own count may
    # have been set by an earlier test's torch.set_num_threads)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    fresh = python_says("import torch; print(torch.get_num_threads())", env=env)
    assert threads.production_threads() == int(fresh.split()[-1])


def test_best_yaml_says_when_the_race_lifted_the_cap():
    lifted = {"fingerprint": {"torch_threads": 2}, "config": {"runtime": {"threads": 2}}}
    pinned = {"runtime": {"threads": 0}}
    said = pin_measured_threads(pinned, [lifted, lifted])
    assert pinned["runtime"]["threads"] == 2 and said["uncapped"] is True
    assert said["source"].startswith("the race, uncapped")
    capped = {"fingerprint": {"torch_threads": 1}, "config": {"runtime": {"threads": 0}}}
    said = pin_measured_threads({"runtime": {"threads": 0}}, [capped])
    assert said["uncapped"] is False and said["threads"] == 1
    assert said["source"].startswith("the race: one config at a time")


@pytest.mark.slow
def test_a_joblib_sweeps_race_runs_at_the_production_threads(tmp_path: Path) -> None:
    """Search trials at joblib's cap (1 thread on 2 cores), race runs and best.yaml at torch's
    default in a fresh process, and best.yaml's provenance says the race ran uncapped."""
    proc, study = finished_sweep(
        tmp_path,
        "uncapped",
        "search=smoke",
        "hydra/launcher=joblib",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
    )
    production = threads.production_threads()
    (sweep_dir,) = sweep_dirs(tmp_path)
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    runs = best["provenance"]["sweep"]["runs"]
    search_dirs = {
        Path(t.user_attrs["job_dir"]).name for t in study.trials if t.user_attrs.get("job_dir")
    }
    race_runs = [r for r in runs[1:] if r not in search_dirs]
    assert race_runs, runs
    for run in race_runs:
        result = read_result(sweep_dir / run / "result.json")
        assert result["fingerprint"]["torch_threads"] == production, run
    cap = max(1, production // 2)  # joblib: cpus // n_jobs
    if cap != production:  # a machine where the cap is visible: the search ran under it
        search = read_result(sweep_dir / runs[0] / "result.json")
        assert search["fingerprint"]["torch_threads"] == cap
    assert best["runtime"]["threads"] == production
    measured_as = best["provenance"]["measured_as"]
    assert measured_as["uncapped"] is True and measured_as["threads"] == production
    said = proc.stdout + proc.stderr
    assert "the race runs one config at a time without JoblibLauncher's thread cap" in said
    # smoke searches no checkpoint knob: no window saves, the save measured once per target (by
    # each of the first two parallel trials at most) and every run carries the recorded one
    saves = [read_result(p) for p in sweep_dir.glob("*/result.json")]
    assert all(r["checkpoint_s"] == [] for r in saves)
    recorded = {r["checkpoint_save"]["stall_s"] for r in saves if r["status"] == "complete"}
    assert len(recorded) == 1 and recorded.pop() > 0
    assert 1 <= sum(r["checkpoint_save"]["here"] for r in saves) <= 2
    # ... from which best.yaml's interval is chosen (issue 24 said NONE: no save was measured)
    assert best["checkpoint"]["every_steps"] > 0
    assert "checkpoints: best.yaml saves NONE" not in said
