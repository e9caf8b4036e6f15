"""The test hooks through the real commands (train/core/hooks.py): without the switch
(THROUGHPUT_SWEEP_TEST_HOOKS=1), `python -m train` and `python -m train.trial` refuse a hook key in
one line naming it, before anything runs; with it, a trial plants the hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR, fast_overrides
from train.core import hooks


def _run(module: str, args: list[str], *, cwd: Path, switch: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR), "HYDRA_FULL_ERROR": "0"}
    if not switch:
        env.pop(hooks.ENV, None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


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
    tmp_path: Path, module: str, override: str
) -> None:
    key = override.split("=", 1)[0].lstrip("+")
    args = [f"hydra.run.dir={tmp_path / 'run'}", f"checkpoint.dir={tmp_path / 'ck'}", override]
    proc = _run(module, args, cwd=tmp_path, switch=False)
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
    proc = _run("train.trial", args, cwd=tmp_path, switch=True)
    assert proc.returncode != 0, proc.stdout[-2000:]
    result = json.loads(out.read_text())
    assert result["status"] == "failed"
    assert "planted crash (hooks.fault=crash)" in result["failure"]["message"]
    assert result["config"]["hooks"]["fault"] == "crash"
