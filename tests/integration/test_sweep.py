"""The real sweep, end to end, in a temporary directory: `python sweep.py -m ...`, tiny preset."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from sweeper.study.optuna_study import DUPLICATE_ATTR, REQUEUED_ATTR
from tests.sweep_helpers import (
    finished_sweep,
    load_study,
    run_sweep,
    sweep_argv,
    sweep_dirs,
    train_best,
)

REPO = Path(__file__).resolve().parents[2]


def test_smoke_sweep_records_trials_exports_best_and_trains(tmp_path) -> None:
    proc, study = finished_sweep(
        tmp_path,
        "smoke",
        "search=smoke",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.verify.repeats=2",
    )
    # a point the random sampler proposes again is recorded, not run again, and costs no budget
    finished = [
        t for t in study.trials if t.state.is_finished() and DUPLICATE_ATTR not in t.user_attrs
    ]
    assert len(finished) == 3
    assert len({tuple(sorted(t.params.items())) for t in finished}) == 3
    assert all(t.state == TrialState.COMPLETE for t in finished)
    for t in finished:
        assert t.value > 0
        assert t.user_attrs["metrics"]["tokens_per_s"] == pytest.approx(t.value)
        # grad_accum follows micro_batch so the tokens per step stay pinned
        assert set(t.params) == {"batch.micro_batch", "data.num_workers"}
    verdict = study.user_attrs["verdict"]
    assert verdict["winner_trial"] in {t.number for t in finished}

    (sweep_dir,) = sweep_dirs(tmp_path)
    best = sweep_dir / "best.yaml"
    text = best.read_text()
    assert "provenance:" in text and "tokens_per_s" in text
    assert "study_storage: ''" in text  # sweep-only keys are reset in the exported config
    assert (sweep_dir / "plots" / "summary.png").stat().st_size > 10_000
    assert "Verified top configurations" in proc.stdout
    assert str(best) in proc.stdout
    # verification (job 3 on) re-measures with real full steps, never projected ones, and always
    # includes the starting config (trial 0, measured first)
    verify_jobs = [d for d in sweep_dir.iterdir() if d.name.isdigit() and int(d.name) >= 3]
    assert verify_jobs
    for job in verify_jobs:
        assert re.search(r"project_above_s: 0(\.0)?\n", (job / "trial_config.yaml").read_text())
    assert study.trials[0].user_attrs.get("baseline")
    assert "starting config (trial 0):" in proc.stdout
    assert "real full steps" in proc.stdout

    # the exported config trains as is
    train = train_best(sweep_dir, tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "step 2 | loss" in train.stderr + train.stdout


def test_invalid_space_fails_before_any_trial(tmp_path) -> None:
    proc = run_sweep(
        tmp_path,
        "search=smoke",
        "hydra.sweeper.space={batch.micro_batch: 'choice(3, 5)'}",
    )
    assert proc.returncode != 0
    assert "batch.micro_batch" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("multirun/*/*/0"))  # no trial ran


def _trial_processes(marker: str) -> list[int]:
    """Pids of live train.trial.measurement processes whose command line mentions `marker`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = next(
                line
                for line in (proc / "status").read_text().splitlines()
                if line.startswith("State:")
            )
        except (OSError, StopIteration):
            continue
        if "train.trial" in cmd and marker in cmd and "zombie" not in state:
            pids.append(int(proc.name))
    return pids


def test_sweep_killed_mid_trial_resumes_with_nothing_lost_or_repeated(tmp_path) -> None:
    overrides = [
        "search=smoke",
        "hydra.sweeper.study_name=resume",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        "hydra.sweeper.mlflow.enabled=false",
        "trial.max_steps=40",
        "trial.max_seconds=6",
    ]
    first = subprocess.Popen(
        sweep_argv(*overrides), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if not (tmp_path / "sweeps" / "optuna.db").exists():
                continue
            try:
                states = [t.state for t in load_study(tmp_path, "resume").trials]
            except KeyError:  # study not created yet
                continue
            # the sweep is creating the tables (or stamping their alembic version) right now
            except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):
                continue
            if TrialState.COMPLETE in states and states[-1] == TrialState.RUNNING:
                break
        else:
            pytest.fail("the first sweep never reached a running second trial")
        time.sleep(2)  # well inside the running trial
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    before = load_study(tmp_path, "resume")
    done_before = {t.number: t.value for t in before.trials if t.state == TrialState.COMPLETE}
    (cut,) = [t for t in before.trials if t.state == TrialState.RUNNING]
    # the trial's process died with its sweep (no orphan keeps the CPU busy)
    deadline = time.monotonic() + 10
    while _trial_processes(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _trial_processes(str(tmp_path)) == []

    proc = run_sweep(tmp_path, *overrides)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = load_study(tmp_path, "resume")
    trials = after.trials
    assert trials[cut.number].state == TrialState.FAIL
    assert trials[cut.number].user_attrs["failure_kind"] == "interrupted"
    (retry,) = [t for t in trials if t.user_attrs.get(REQUEUED_ATTR) == cut.number]
    assert retry.state == TrialState.COMPLETE
    assert retry.params == cut.params
    # finished trials kept as they were, none run twice, and the budget counts each once
    for number, value in done_before.items():
        assert trials[number].state == TrialState.COMPLETE
        assert trials[number].value == value
    counted = [
        t
        for t in trials
        if t.state.is_finished()
        and t.user_attrs.get("failure_kind") != "interrupted"
        and DUPLICATE_ATTR not in t.user_attrs
    ]
    assert len(counted) == 4


@pytest.mark.parametrize(
    ("search", "top_k", "repeats"),
    [("smoke", 2, 1), ("throughput", 3, 3)],  # smoke sets both; throughput keeps the defaults
)
def test_a_search_preset_sets_the_sweeper_settings_it_names(search, top_k, repeats) -> None:
    from hydra import compose, initialize_config_dir

    import train.core.config  # noqa: F401  (registers train_schema)

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[f"search={search}"], return_hydra_config=True)
    assert cfg.hydra.sweeper.verify.top_k == top_k
    assert cfg.hydra.sweeper.verify.repeats == repeats
    assert cfg.hydra.sweeper.search_name == search


def test_an_exhausted_space_ends_the_search_without_rerunning_points(tmp_path) -> None:
    """smoke has 4 points; asked for 6 trials, the sweep measures each point once, records the
    sampler's re-proposals as duplicates of the first measurement, and stops."""
    proc, study = finished_sweep(
        tmp_path,
        "exhaust",
        "search=smoke",
        "hydra.sweeper.n_trials=6",
        "hydra.sweeper.verify.top_k=1",
    )
    ran = [t for t in study.trials if DUPLICATE_ATTR not in t.user_attrs]
    dups = [t for t in study.trials if DUPLICATE_ATTR in t.user_attrs]
    assert len(ran) == 4
    assert len({tuple(sorted(t.params.items())) for t in ran}) == 4
    assert len(dups) >= 25
    by_number = {t.number: t for t in ran}
    for t in dups:
        twin = by_number[t.user_attrs[DUPLICATE_ATTR]]
        assert t.params == twin.params and t.state == twin.state and t.value == twin.value
    assert "the space looks exhausted" in proc.stdout + proc.stderr
    (sweep_dir,) = sweep_dirs(tmp_path)
    # 4 trial job dirs + 1 repeat (smoke's verify.repeats) of the best config and of the starting
    # config when that is another one (it is always re-measured beside the finalists)
    best = max((t for t in ran if t.value is not None), key=lambda t: t.value)
    verified = 1 if best.user_attrs.get("baseline") else 2
    assert len([p for p in sweep_dir.iterdir() if p.name.isdigit()]) == 4 + verified


def test_the_prior_sampler_measures_the_start_and_the_priors_points_and_nothing_else(
    tmp_path,
) -> None:
    """sampler=prior: the starting config and the prior's points, no design and no drawn point,
    whatever n_trials says; plan mode counts the same trials."""
    from sweeper.start import PRIOR_ATTR

    overrides = ("search=smoke", "hydra.sweeper.sampler=prior", "hydra.sweeper.n_trials=6")
    plan_json = tmp_path / "plan.json"
    planned = run_sweep(
        tmp_path,
        *overrides,
        "hydra.sweeper.plan.enabled=true",
        f"hydra.sweeper.plan.json={plan_json}",
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    _, study = finished_sweep(tmp_path, "prior-only", *overrides)
    prior = [t for t in study.trials if t.user_attrs.get(PRIOR_ATTR)]
    start = [t for t in study.trials if t.user_attrs.get("baseline")]
    assert len(start) == 1 and len(prior) >= 1
    assert len(study.trials) == len(start) + len(prior)  # nothing drawn, although n_trials=6
    assert not any(t.user_attrs.get("design") for t in study.trials)
    numbers = json.loads(plan_json.read_text())
    assert numbers["n_search"] == len(study.trials)
    assert len(numbers["prior"]) == len(prior)


def test_an_out_of_memory_trial_is_no_failure_and_rules_out_larger_micro_batches(tmp_path):
    """A planted OOM at micro-batch 4: the same knobs at 8 are excluded naming that trial, not
    launched; and the OOM does not count toward the failure rate (a zero tolerance would have
    stopped the search after it)."""
    _, study = finished_sweep(
        tmp_path,
        "oom",
        "search=smoke",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=0",
        "hydra.sweeper.budget.max_failure_rate=0.0",
        "hydra.sweeper.budget.min_trials_for_failure_rate=1",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.space={batch.micro_batch: 'choice(4, 8)', data.num_workers: 0}",
        "hooks.fault=oom,none",
    )
    by_point = {
        (t.params["batch.micro_batch"], t.params["hooks.fault"]): t
        for t in study.trials
        if t.state.is_finished()
    }
    assert len(by_point) == 4
    oom = by_point[(4, "oom")]
    assert oom.user_attrs["failure_kind"] == "oom"
    refused = by_point[(8, "oom")]
    assert refused.user_attrs["failure_kind"] == "excluded"
    assert refused.user_attrs["failure_reason"].startswith(
        f"trial {oom.number} ran out of memory at batch.micro_batch=4"
    )
    assert "job_dir" not in refused.user_attrs  # never launched
    assert by_point[(4, "none")].state == TrialState.COMPLETE
    assert by_point[(8, "none")].state == TrialState.COMPLETE
