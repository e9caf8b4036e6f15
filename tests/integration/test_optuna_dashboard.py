"""The README's way to browse a study with `optuna-dashboard` (issue 25), tried for real: the
dashboard (installed by the `[scale]` extra) is started against a finished study's SQLite storage
on a free port, and its JSON API lists the study with its trials."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest

from tests.servers import free_port

STUDY = "throughput-tiny-smoke-cpu"  # named as a sweep names its study


def _finished_study(storage: str) -> int:
    """A study as a sweep leaves it: maximised tokens/s, trials complete and pruned."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    space = {"batch.micro_batch": optuna.distributions.CategoricalDistribution([2, 8, 16])}
    for micro_batch, tokens_per_s in [(8, 30_893.0), (2, 9_596.0), (16, 25_559.0)]:
        study.add_trial(
            optuna.trial.create_trial(
                params={"batch.micro_batch": micro_batch}, distributions=space, value=tokens_per_s
            )
        )
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED))
    return len(study.trials)


def _get_json(url: str, deadline: float) -> dict:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
            time.sleep(0.3)
    raise AssertionError(f"optuna-dashboard did not answer {url}: {last}")


def test_optuna_dashboard_lists_the_study(tmp_path: Path):
    dashboard = shutil.which("optuna-dashboard")
    if dashboard is None:
        pytest.skip('optuna-dashboard is not installed: pip install -e ".[scale]"')
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    n_trials = _finished_study(storage)
    port = free_port()
    argv = [dashboard, storage, "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = _get_json(f"http://127.0.0.1:{port}/api/studies", time.monotonic() + 60)
        studies = {s["study_name"]: s for s in body["study_summaries"]}
        assert STUDY in studies, body
        detail = _get_json(
            f"http://127.0.0.1:{port}/api/studies/{studies[STUDY]['study_id']}",
            time.monotonic() + 30,
        )
        states = sorted(t["state"] for t in detail["trials"])
        assert len(states) == n_trials, detail["trials"]
        assert states == ["Complete", "Complete", "Complete", "Pruned"], states
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
