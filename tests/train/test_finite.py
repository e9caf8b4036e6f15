"""The finite-state check that guards every checkpoint save (train/run/finite.py): a table of
states, and the in-process step that must refuse to write a non-finite one."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from train.run.checkpoint import checkpoint_path
from train.run.finite import (
    NonFiniteState,
    check_state_finite,
    diverged,
    first_non_finite,
    state_tensors,
)

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("tensors", "expected"),
    [
        ({"a": [1.0, 2.0], "b": [3.0]}, None),
        ({"a": [1.0, NAN], "b": [3.0]}, "a"),
        ({"a": [1.0], "b": [-INF]}, "b"),
        ({"a": [1e38, -3e38]}, None),  # huge but finite: the norm overflows, the values do not
        ({"a": [1e38, NAN]}, "a"),
        ({"a": [], "b": [INF, 1.0]}, "b"),  # an empty tensor is finite
        ({"a": [1.0], "b16": [NAN]}, "b16"),  # another dtype: its own group, still found
        ({}, None),
    ],
)
def test_first_non_finite(tensors: dict[str, list[float]], expected: str | None) -> None:
    named = [
        (k, torch.tensor(v, dtype=torch.bfloat16 if k.endswith("16") else torch.float32))
        for k, v in tensors.items()
    ]
    assert first_non_finite(iter(named)) == expected


def test_one_device_with_several_dtypes_syncs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host read is counted: one `.tolist()` for the device, no `.cpu()` or `.item()`."""
    reads: list[str] = []
    for method in ("tolist", "cpu", "item"):
        real = getattr(torch.Tensor, method)

        def counted(self: torch.Tensor, *a: object, _m: str = method, _r=real, **k: object):
            reads.append(_m)
            return _r(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, method, counted)
    named = [
        ("w32", torch.ones(3)),
        ("w16", torch.ones(4, dtype=torch.bfloat16)),
        ("w64", torch.ones(2, dtype=torch.float64)),
    ]
    assert first_non_finite(iter(named)) is None
    assert reads == ["tolist"]


def _model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt


def test_state_tensors_name_parameters_and_optimizer_moments() -> None:
    model, opt = _model_and_optimizer()
    names = [name for name, _ in state_tensors(model, opt)]
    assert names[:2] == ["weight", "bias"]
    assert "optimizer exp_avg_sq of weight" in names
    assert "optimizer exp_avg of bias" in names


@pytest.mark.parametrize(
    ("plant", "needle"),
    [
        (lambda m, o, loss: loss.fill_(NAN), "loss nan;"),
        (
            lambda m, o, loss: m.weight.data.view(-1)[0].fill_(INF),
            "first non-finite tensor: weight",
        ),
        (
            lambda m, o, loss: o.state[m.bias]["exp_avg_sq"].fill_(NAN),
            "first non-finite tensor: optimizer exp_avg_sq of bias",
        ),
    ],
    ids=["loss", "weight", "moment"],
)
def test_check_state_finite_names_the_step_the_loss_and_the_bad_tensor(
    plant: Callable, needle: str, tmp_path: Path
) -> None:
    model, opt = _model_and_optimizer()
    loss = torch.tensor(2.5)
    check_state_finite(step=3, loss=loss, model=model, optimizer=opt, last_good=None)  # finite
    plant(model, opt, loss)
    kept = checkpoint_path(tmp_path, 5)
    with pytest.raises(NonFiniteState) as info:
        check_state_finite(step=10, loss=loss, model=model, optimizer=opt, last_good=kept)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith("training diverged at step 10: loss ")
    assert needle in line
    assert f"the last good checkpoint is {kept}" in line
    assert "train.resume=force" in line
    assert isinstance(info.value, FloatingPointError)  # a trial records it as `nan`


def test_diverged_without_a_checkpoint_says_none_was_saved() -> None:
    text = str(diverged(step=4, loss=NAN, last_good=None))
    assert "no checkpoint was saved before it" in text


def test_a_step_with_a_non_finite_state_writes_nothing_and_keeps_the_good_files(
    make_config: Callable, tmp_path: Path
) -> None:
    """The shared step (train/run/loop.py:run_step) with keep=2: two good saves, then a poisoned
    weight; the save is refused, the two good files stay, and the stop names the newest."""
    from train.run.loop import build_session, close_session, make_phase_clock, run_step

    cfg = make_config("checkpoint.keep=2", "checkpoint.every_steps=1")
    s = build_session(cfg)
    clock = make_phase_clock(s.device)
    try:
        for step in (1, 2):
            run_step(s, lr=1e-3, clock=clock, checkpoint_step=step)
        s.checkpointer.wait()
        with torch.no_grad():
            next(s.raw_model.parameters()).view(-1)[0] = NAN
        with pytest.raises(NonFiniteState, match=r"ckpt_00000002\.pt"):
            run_step(s, lr=1e-3, clock=clock, checkpoint_step=3)
    finally:
        close_session(s)
    ck = Path(cfg.checkpoint.dir)
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt_00000001.pt", "ckpt_00000002.pt"]
    weights = torch.load(checkpoint_path(ck, 2), weights_only=True)["model"]
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_bench_finite_check_prints_the_measured_ratio() -> None:
    """scripts/bench/finite_check.py in a small mode: a measured ratio, and exit 0 only on PASS."""
    import re
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    argv = [
        sys.executable,
        "-m",
        "scripts.bench.finite_check",
        "--rounds",
        "3",
        "--warmup",
        "1",
        "batch.tokens_per_step=512",
        "batch.micro_batch=4",
        "batch.grad_accum=2",
    ]
    proc = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    goal = re.search(r"goal: the check under 1% of a step that saves: ([\d.]+)% (PASS|FAIL)", out)
    assert goal is not None, out[-2000:]
    assert proc.returncode == (0 if goal.group(2) == "PASS" else 1), out[-2000:]
    assert float(goal.group(1)) > 0  # measured, never a constant
    assert re.search(r"\| finite check +\| [\d.]+ ms", out), out[-2000:]
