"""Environment fingerprint: what a throughput number was measured on, stored with every result.

Two results are comparable only if these match (same GPU, driver, torch, threads, code). Every
lookup is best effort: a missing piece is None, never an exception. Environment variables are
deliberately never recorded (they hold tokens and paths that do not belong in a results file).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from train.device import cpu_model_name, device_name

log = logging.getLogger(__name__)

# Distribution names (pip's), read from installed metadata without importing the packages:
# `train/` must not import optuna or mlflow.
_PACKAGES = ("hydra-core", "omegaconf", "optuna", "mlflow")


def environment_fingerprint(
    *, device: torch.device, seed: int, threads: int, project_dir: Path
) -> dict[str, Any]:
    """A flat, JSON-ready dict of versions, hardware and code identity."""
    commit, dirty = git_state(project_dir)
    cuda = torch.cuda.is_available()
    fingerprint: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nvidia_driver": nvidia_driver_version(),
        "device": str(device),
        "device_name": device_name(device),
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "cpu_model": cpu_model_name(),
        "cpu_count_logical": os.cpu_count(),
        # CPUs this process may run on (containers and taskset often allow fewer than cpu_count).
        "cpu_count_affinity": (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        ),
        "threads_requested": threads,
        "torch_threads": torch.get_num_threads(),
        "git_commit": commit,
        "git_dirty": dirty,
        "seed": seed,
    }
    for dist in _PACKAGES:
        fingerprint[f"pkg_{dist.replace('-', '_')}"] = package_version(dist)
    return fingerprint


def package_version(dist: str) -> str | None:
    """Installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_driver_version(nvml: Any | None = None) -> str | None:
    """The NVIDIA driver version via NVML, or None without a driver (CPU machines)."""
    try:
        if nvml is None:
            import pynvml as nvml  # from the nvidia-ml-py package
        nvml.nvmlInit()
    except Exception as err:  # ImportError or NVMLError_LibraryNotFound and friends
        log.debug("no NVIDIA driver version: %s", err)
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception as err:
        log.debug("nvmlSystemGetDriverVersion failed: %s", err)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as err:
            log.debug("nvmlShutdown failed: %s", err)


def git_state(project_dir: Path) -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty flag) of the repository holding project_dir; (None, None) if none.

    Dirty means `git status --porcelain` lists anything, untracked files included: an
    untracked module can change what runs just as an edited one can.
    """
    commit = _git(project_dir, "rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git(project_dir, "status", "--porcelain")
    return commit, (bool(status) if status is not None else None)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as err:  # no git binary, missing dir, hang
        log.debug("git %s failed: %s", " ".join(args), err)
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()
