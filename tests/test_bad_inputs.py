"""Every bad input a user can type, tried with the real command (issue 13): refused with a non-zero
exit, one line naming the setting and the fix, no traceback, and nothing started (no trial, no sweep
dir content). The last test prints how many were tried and how many were rejected cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper import preflight
from tests.sweep_helpers import REPO, run_sweep
from train import keys

TRIED: list[str] = []  # every input _judge saw
CLEAN: list[str] = []  # the ones it saw rejected cleanly
JUDGED_BY: set[str] = set()  # node ids of the tests that called _judge

# (override, words the one line must contain: the setting and the fix)
SWEEP_CASES = [
    ("hydra.sweeper.storage=sqlite:////proc/nope.db", ["hydra.sweeper.storage", "sqlite:///"]),
    ("hydra.sweeper.storage=notaurl://x", ["hydra.sweeper.storage=notaurl://x", "storage URL"]),
    (
        "hydra.sweeper.storage=postgresql://u:hunter2@127.0.0.1:1/db",
        ["hydra.sweeper.storage", "***"],
    ),
    ("hydra.sweeper.sampler=bogus", ["hydra.sweeper.sampler='bogus'", "tpe, random, grid"]),
    ("hydra.sweeper.pruner=bogus", ["hydra.sweeper.pruner='bogus'", "median"]),
    ("hydra.sweep.dir=/proc/nope", ["hydra.sweep.dir=/proc/nope", "writable"]),
    ("batch.micro_batch=3,5", ["batch.micro_batch=3,5", "1x32"]),
    ("+batch.micro_bach=8", ["batch.micro_bach", "did you mean batch.micro_batch"]),
    ("+runtime.compiel=none", ["runtime.compiel", "did you mean runtime.compile"]),
    ("batch.micro_bach=8", ["batch.micro_bach", "did you mean batch.micro_batch"]),
    ("hydra.sweeper.n_trails=3", ["hydra.sweeper.n_trails", "did you mean hydra.sweeper.n_trials"]),
]

TRAIN_CASES = [
    ("+batch.micro_bach=8", ["batch.micro_bach", "did you mean batch.micro_batch"]),
    ("batch.micro_bach=8", ["batch.micro_bach", "did you mean batch.micro_batch"]),
    ("runtime.compile=bogus", ["runtime.compile", "one of"]),
    ("batch.micro_batch=-1", ["batch.micro_batch", "positive"]),
    ("model.n_head=5", ["model.n_head", "divisible"]),
    ("batch.tokens_per_step=1000", ["batch.tokens_per_step", "multiple"]),
]


def _judge(name: str, proc: subprocess.CompletedProcess, words: list[str]) -> str:
    """The error line; records whether the input was rejected cleanly."""
    out = proc.stdout + proc.stderr
    TRIED.append(name)
    # pytest sets it to "<node id> (call)" while a test runs
    JUDGED_BY.add(os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0])
    lines = [ln for ln in out.splitlines() if all(w in ln for w in words)]
    assert proc.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    assert len(lines) == 1, out[-2000:]
    CLEAN.append(name)
    return lines[0]


@pytest.mark.parametrize("override,words", SWEEP_CASES, ids=[c[0] for c in SWEEP_CASES])
def test_sweep_refuses_before_anything_starts(tmp_path: Path, override: str, words: list[str]):
    storage = f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}"
    proc = run_sweep(tmp_path, storage, override, timeout=120)
    _judge(f"sweep {override}", proc, words)
    made = list((tmp_path / "multirun").rglob("*")) if (tmp_path / "multirun").exists() else []
    assert made == [], made  # no zygote log, no trial folder
    assert "zygote ready" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("override,words", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_trainer_refuses_before_any_step(tmp_path: Path, override: str, words: list[str]):
    argv = [sys.executable, "-m", "train", "train.max_steps=2", f"hydra.run.dir={tmp_path}",
            f"checkpoint.dir={tmp_path / 'ck'}", override]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    _judge(f"train {override}", proc, words)
    assert not (tmp_path / "train_summary.json").exists()
    assert "step 1" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "key,expected",
    [
        ("batch.micro_bach", " (did you mean batch.micro_batch?)"),
        ("runtime.compiel", " (did you mean runtime.compile?)"),
        ("zzz.qqq", ""),
    ],
)
def test_did_you_mean(key: str, expected: str):
    assert keys.did_you_mean(key, keys.schema_keys()) == expected


def test_known_keys_pass():
    keys.check_trainer_keys(["batch.micro_batch", "runtime.compile", "provenance.sweep"])
    with pytest.raises(ValueError, match=r"did you mean batch\.micro_batch"):
        keys.check_trainer_keys(["batch.micro_bach"])


def test_command_line_keys():
    """Plain overrides are checked before Hydra; group choices, flags and + additions are not."""
    fields = ["n_trials", "space", "storage"]
    keys.check_command_line(
        ["-m", "search=smoke", "model=tiny", "hydra/launcher=joblib", "batch.micro_batch=4",
         "hydra.sweep.dir=x", "hydra.sweeper.n_trials=3", "hydra.sweeper.space.a=1", "+x.y=1",
         "model.n_layer=2", "provenance.sweep=a"],
        sweeper_fields=fields,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"did you mean hydra\.sweeper\.n_trials"):
        keys.check_command_line(["hydra.sweeper.n_trails=3"], sweeper_fields=fields)
    with pytest.raises(ValueError, match=r"unknown setting model\.n_layers"):
        keys.check_command_line(["model.n_layers=3"])


@pytest.mark.parametrize(
    "spec,expected",
    [("3,5", [3, 5]), ("choice(3, 5)", [3, 5]), ([2, 4], [2, 4]), ("range(1,4)", None),
     ("interval(1,2)", None), ("a,b", None)],
)  # fmt: skip
def test_listed_ints(spec, expected):
    assert preflight.listed_ints(spec) == expected


def test_micro_batches_feasible_pass():
    base = {"batch.tokens_per_step": 2048, "model.block_size": 64}
    preflight.check_micro_batches({"batch.micro_batch": "3,4"}, base)  # 4 x 8 keeps it
    with pytest.raises(ValueError, match="1x32, 2x16, 4x8, 8x4, 16x2, 32x1"):
        preflight.check_micro_batches({"batch.micro_batch": "3,5"}, base)


def _judges_inputs(item: pytest.Item) -> bool:
    """A test of this file whose own code calls _judge (a new table or test function counts
    without being listed anywhere)."""
    function = getattr(item, "function", None)
    return (
        getattr(item, "module", None) is sys.modules[__name__]
        and function is not None
        and "_judge" in function.__code__.co_names
    )


def test_zz_count(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture):
    """The closing count (runs last in this module: keep it the file's last test).

    Counted against this session's collected cases that judge inputs (after -k and other
    deselection), so it fails when run without them, when one of them never reached _judge, and
    when any input was not rejected cleanly."""
    expected = {item.nodeid for item in request.session.items if _judges_inputs(item)}
    with capsys.disabled():
        print(f"\nbad inputs tried {len(TRIED)} / rejected cleanly {len(CLEAN)}")
    assert expected, "no bad-input case ran: run this file's tests with the count"
    missing = sorted(expected - JUDGED_BY)
    assert not missing, f"cases that never judged their input (failed early, ran after): {missing}"
    assert CLEAN == TRIED, f"not rejected cleanly: {[t for t in TRIED if t not in CLEAN]}"
