"""train/measure/fingerprint.py: keys and types, git state, no environment variables leak."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from train.measure import fingerprint as fp

PROJECT_DIR = Path(__file__).resolve().parents[2]

EXPECTED_TYPES: dict[str, type | tuple[type, ...]] = {
    "python": str,
    "platform": str,
    "hostname": str,
    "torch": str,
    "torch_cuda": (str, type(None)),
    "cudnn": (int, type(None)),
    "nvidia_driver": (str, type(None)),
    "device": str,
    "device_name": str,
    "gpu_count": int,
    "cpu_model": str,
    "cpu_count_logical": int,
    "cpu_count_affinity": (int, type(None)),
    "threads_requested": int,
    "torch_threads": int,
    "git_commit": (str, type(None)),
    "git_dirty": (bool, type(None)),
    "seed": int,
    "pkg_hydra_core": (str, type(None)),
    "pkg_omegaconf": (str, type(None)),
    "pkg_optuna": (str, type(None)),
    "pkg_mlflow": (str, type(None)),
}


@pytest.fixture
def no_parent_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Stop git's upward search at tmp_path, so it is 'not a repository' wherever it lives."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    return tmp_path


def test_keys_and_types() -> None:
    result = fp.environment_fingerprint(
        device=torch.device("cpu"), seed=7, threads=2, project_dir=PROJECT_DIR
    )
    assert set(result) == set(EXPECTED_TYPES)
    for key, expected in EXPECTED_TYPES.items():
        assert isinstance(result[key], expected), (key, result[key])
    assert result["seed"] == 7 and result["threads_requested"] == 2
    assert result["torch"] == torch.__version__
    assert result["torch_threads"] == torch.get_num_threads()
    assert result["device"] == "cpu"
    json.dumps(result)  # goes into the result file as is


def test_installed_packages_are_found_without_import() -> None:
    result = fp.environment_fingerprint(
        device=torch.device("cpu"), seed=0, threads=0, project_dir=PROJECT_DIR
    )
    assert result["pkg_omegaconf"] == fp.package_version("omegaconf") is not None
    assert fp.package_version("surely-not-an-installed-dist") is None


def test_no_environment_variables_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-token-value-4711"
    monkeypatch.setenv("THROUGHPUT_SWEEP_TEST_SECRET", secret)
    text = json.dumps(
        fp.environment_fingerprint(
            device=torch.device("cpu"), seed=0, threads=0, project_dir=PROJECT_DIR
        )
    )
    assert secret not in text and "THROUGHPUT_SWEEP_TEST_SECRET" not in text


def test_not_a_git_dir_gives_none(no_parent_repo: Path) -> None:
    assert fp.git_state(no_parent_repo) == (None, None)
    result = fp.environment_fingerprint(
        device=torch.device("cpu"), seed=0, threads=0, project_dir=no_parent_repo
    )
    assert result["git_commit"] is None and result["git_dirty"] is None


def test_missing_dir_gives_none(tmp_path: Path) -> None:
    assert fp.git_state(tmp_path / "does-not-exist") == (None, None)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")
def test_git_commit_and_dirty_flag(no_parent_repo: Path) -> None:
    repo = no_parent_repo
    identity = {"NAME": "t", "EMAIL": "t@example.invalid"}
    env = dict(os.environ)
    for role in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{role}_{k}": v for k, v in identity.items()})

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    git("init", "-q")
    (repo / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD")
    assert fp.git_state(repo) == (head, False)
    (repo / "a.txt").write_text("two\n")
    assert fp.git_state(repo) == (head, True)


class _FakeNvml:
    class NVMLError(Exception):
        pass

    def __init__(self, *, fail: bool) -> None:
        self.fail = fail
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"  # old pynvml releases return bytes

    def nvmlShutdown(self) -> None:
        self.shutdown = True


@pytest.mark.parametrize(("fail", "expected"), [(False, "550.54.15"), (True, None)])
def test_driver_version(fail: bool, expected: str | None) -> None:
    fake = _FakeNvml(fail=fail)
    assert fp.nvidia_driver_version(fake) == expected
    assert fake.shutdown is not fail  # released exactly when it was opened


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-driver path")
def test_driver_version_real_pynvml_without_gpu() -> None:
    assert fp.nvidia_driver_version() is None
