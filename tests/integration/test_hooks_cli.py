"""The test hooks through the real commands (train/core/hooks.py): without the switch
(THROUGHPUT_SWEEP_TEST_HOOKS=1), `python -m train` and `python -m train.trial` refuse a hook key in
one line naming it, before anything runs; with it, a trial plants the hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fast_overrides, run_cli
from train.core import hooks


@pytest.mark.parametrize(
    ("module", "override"),
    [
        ("train", "hooks.fault=crash"),
        ("train", "trial.fault=crash"),  # the hook's former key
        ("train", "+hooks.inject_latency_s=0.1"),  # added: refused once Hydra composed it
        ("train.trial", "hooks.fault_rank=1"),
    ],
)
def test_without_the_switch_a_hook_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, override: str
) -> None:
    monkeypatch.delenv(hooks.ENV)  # the child starts without the switch
    key = override.split("=", 1)[0].lstrip("+")
    args = [f"hydra.run.dir={tmp_path / 'run'}", f"checkpoint.dir={tmp_path / 'ck'}", override]
    proc = run_cli(module, args, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    said = [line for line in out.splitlines() if f"{key} is not a setting of the trainer" in line]
    assert proc.returncode == 2, out[-2000:]
    assert len(said) == 1 and hooks.ENV in said[0], out[-2000:]
    assert "Traceback" not in out
    assert not list(tmp_path.rglob("*.json")), "nothing runs"


def test_with_the_switch_a_trial_plants_the_hook(synthetic_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    args = [
        *fast_overrides(synthetic_dir, tmp_path / "ckpt"),
        f"trial.out={out}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "hooks.fault=crash",
    ]
    proc = run_cli("train.trial", args, cwd=tmp_path)  # the suite's switch is on
    assert proc.returncode != 0, proc.stdout[-2000:]
    result = json.loads(out.read_text())
    assert result["status"] == "failed"
    assert "planted crash (hooks.fault=crash)" in result["failure"]["message"]
    assert result["config"]["hooks"]["fault"] == "crash"
