"""A launcher plugin the command line names but this install lacks (issue 25): the sweep answers in
one line that names the `[scale]` extra, not with Hydra's "Could not find 'hydra/launcher/joblib'";
so does a PostgreSQL storage without its driver.

The plugin is made unimportable for the child only, by a sitecustomize on its PYTHONPATH that
refuses the module, as an install without the extra would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.plan import extras
from tests.sweep_helpers import REPO

BLOCKER = """\
import importlib.abc


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in {blocked!r} or name.startswith(tuple(m + "." for m in {blocked!r})):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


import sys

sys.meta_path.insert(0, _NotInstalled())
"""


def _env_without(tmp_path: Path, *modules: str) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCKER.format(blocked=tuple(modules)))
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize(
    "choice,module",
    [
        ("joblib", "hydra_plugins.hydra_joblib_launcher"),
        ("slurm", "hydra_plugins.hydra_submitit_launcher"),
    ],
)
def test_sweep_names_the_extra_when_the_launcher_plugin_is_missing(tmp_path, choice, module):
    env = _env_without(tmp_path, module)
    probe = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # the shim holds
    argv = [
        sys.executable,
        str(REPO / "sweep.py"),
        "-m",
        "search=smoke",
        f"hydra/launcher={choice}",
        "hydra.sweeper.n_jobs=2",
    ]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    assert f"hydra/launcher={choice}" in lines[0] and 'pip install -e ".[scale]"' in lines[0], out
    assert "Could not find" not in out and "Traceback" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shim"]  # nothing started


def test_sweep_names_the_extra_when_the_postgresql_driver_is_missing(tmp_path):
    env = _env_without(tmp_path, "psycopg2")
    url = "postgresql+psycopg2://user:hunter2@127.0.0.1:1/db"
    argv = [
        sys.executable,
        str(REPO / "sweep.py"),
        "-m",
        "search=smoke",
        f"hydra.sweeper.storage={url}",
    ]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, out
    assert "psycopg2" in lines[0] and 'pip install -e ".[scale]"' in lines[0], out
    assert "hunter2" not in out  # the URL's password is never repeated


def test_installed_plugins_pass():
    """With the extra installed (CI's `.[dev,scale]`), nothing is said."""
    assert extras.missing_plugin_error(["-m", "hydra/launcher=joblib"]) is None
    assert extras.missing_plugin_error(["-m", "hydra/launcher=submitit_local"]) is None
    assert extras.missing_plugin_error(["hydra.sweeper.storage=postgresql://u@h/db"]) is None
    assert extras.missing_plugin_error(["hydra.sweeper.storage=sqlite:///x.db"]) is None


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], None),
        (["hydra/launcher=joblib"], "joblib"),
        (["hydra/launcher=joblib", "hydra/launcher=basic"], "basic"),
        (["+hydra/launcher=slurm"], "slurm"),
        (["hydra.launcher.n_jobs=2"], None),
    ],
)
def test_launcher_choice(args, expected):
    assert extras.launcher_choice(args) == expected


def test_unknown_or_basic_launchers_are_left_to_hydra():
    assert extras.missing_plugin_error(["hydra/launcher=basic"]) is None
    assert extras.missing_plugin_error(["hydra/launcher=nosuch"]) is None
