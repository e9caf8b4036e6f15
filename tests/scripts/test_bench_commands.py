"""Every benchmark in scripts/bench/ imports and answers `--help` (an import error would otherwise
show only when someone runs it), and one runs as the documented `python -m scripts.bench.<name>`."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from train.core.paths import PROJECT_DIR

BENCH = PROJECT_DIR / "scripts" / "bench"
LIBRARIES = {"__init__", "harness", "configs", "step_pairs"}  # the shared modules: no command
COMMANDS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in LIBRARIES)


def test_the_benchmarks_are_found() -> None:
    assert {"trainer", "race", "guard", "compile_unit", "noise_floor"} <= set(COMMANDS)
    assert not list((PROJECT_DIR / "scripts").glob("bench_*.py"))  # none left behind


@pytest.mark.parametrize("name", COMMANDS)
def test_each_benchmark_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"scripts.bench.{name}")
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_benchmark_runs_as_a_module_from_the_repo_root() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.bench.forecast", "--help"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: python -m scripts.bench.forecast [-h]"), proc.stdout


def test_the_benchmarks_compose_configs_from_the_repositorys_conf() -> None:
    from scripts.bench.configs import CONF_DIR, compose_config

    assert CONF_DIR == PROJECT_DIR / "conf"
    cfg = compose_config(["model=tiny", "runtime.device=cpu"])
    assert (cfg.model.name, cfg.runtime.device) == ("tiny", "cpu")
