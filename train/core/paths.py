"""Paths a run will write, checked before any step: the trial's result (`trial.out`), the
checkpoint folder, the folder the embedded data is generated into.

A path through a regular file, a read-only disk or a virtual file system such as /proc fails only
at the first write otherwise: after the model is built, in a traceback, or mid-run. Each check
raises ValueError in one line naming the setting, the path, why and the fix.

Part of the torch-free core (train/core/).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# the repository root (train/ and sweeper/ in it): a cwd for the children, a PYTHONPATH, git
PROJECT_DIR = Path(__file__).resolve().parents[2]


def folder_problem(folder: Path) -> str | None:
    """Why files cannot be made in `folder` (made first if absent), or None.

    The nearest existing folder on the path must take a new entry: it is probed by making and
    removing an empty folder there (access bits say too little: root may write anything, and
    /proc refuses what its modes allow), so nothing is left behind."""
    probe = Path(folder).expanduser().absolute()
    while not probe.is_dir():
        if os.path.lexists(probe):  # a file, or a link to nothing
            return f"{probe} is {'a file, ' if probe.is_file() else ''}not a folder"
        probe = probe.parent
    try:
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".write-probe-"))
    except OSError as exc:
        return f"{probe} takes no new files ({exc.strerror})"
    return None


def check_folder_target(setting: str, folder: Path) -> None:
    """`setting` names a folder the run writes into: it is one, or can be made (ValueError)."""
    problem = folder_problem(folder)
    if problem:
        raise ValueError(
            f"{setting}={folder} cannot be written: {problem}; set {setting} to a folder you can "
            f"write"
        )


def check_file_target(setting: str, file: Path, *, example_name: str) -> None:
    """`setting` names a file the run writes: not a folder, and its folder can be made
    (ValueError)."""
    if file.is_dir():
        raise ValueError(
            f"{setting}={file} is a folder: name a file, e.g. {setting}={file / example_name}"
        )
    problem = folder_problem(file.parent)
    if problem:
        raise ValueError(
            f"{setting}={file} cannot be written: {problem}; set {setting} to a file in a folder "
            f"you can write"
        )


def check_checkpoint_target(*, every_steps: int, folder: str) -> None:
    """A run that saves (checkpoint.every_steps > 0) can write checkpoint.dir (ValueError)."""
    if every_steps > 0:
        check_folder_target("checkpoint.dir", Path(folder).expanduser())
