"""The run's state between stages: one small .tar.gz of the work folder.

A GPU host gives back only the files written to its output folder (a few, 16 MiB each), and the
next stage may run on a fresh host. So each stage ends by packing what the next one needs: the
Optuna database (the sweep's source of truth, race rounds included), every trial's result.json,
log and config, best.yaml, the production run's summary, and the evidence so far. What can be made
again or is large is left out: the generated data, checkpoints, the plots' HTML (~5 MB each, the
plotly bundle) and caches.

The study stores each trial's folder as an absolute path, so a state unpacks to the folder it was
packed from (`work` in its manifest), wherever the code is. Packing writes a temporary file and
renames it: a stage killed while packing leaves the previous state whole.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

MANIFEST = "acceptance-state.json"  # inside the archive, beside the work folder's files
STATE_VERSION = 1
# left out of the state, by folder name anywhere in the tree
SKIPPED_DIRS = frozenset({"data", "ckpt", "checkpoints", "__pycache__", "mlartifacts"})
SKIPPED_SUFFIXES = (".html", ".pt", ".bin", ".tmp")  # plots' HTML, checkpoints, token files
MAX_STATE_BYTES = 16 * 2**20  # one returned file at most


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a state says of itself."""

    version: int
    profile: str  # the profile that wrote it (a state is never resumed by another)
    work: str  # the absolute work folder it was packed from and unpacks to
    stages_done: list[str]  # stages finished so far, in order (a cut stage is listed once done)
    packed_at: str  # ISO time


def packed_files(work: Path) -> list[Path]:
    """The files of `work` that go into the state, sorted (relative paths)."""
    picked = []
    for root, dirs, files in os.walk(work):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            rel = (Path(root) / name).relative_to(work)
            if not name.endswith(SKIPPED_SUFFIXES):
                picked.append(rel)
    return picked


def pack_state(work: Path, dest: Path, *, manifest: Manifest) -> int:
    """Pack `work` into `dest` (atomically); returns its size in bytes. ValueError when the state
    would not come back from a GPU host (over MAX_STATE_BYTES)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        data = json.dumps(manifest.__dict__, indent=2).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
        for rel in packed_files(work):
            tar.add(work / rel, arcname=f"work/{rel.as_posix()}", recursive=False)
    size = tmp.stat().st_size
    if size > MAX_STATE_BYTES:
        tmp.unlink()
        raise ValueError(
            f"the state of {work} packs to {size / 2**20:.1f} MiB, over the "
            f"{MAX_STATE_BYTES / 2**20:.0f} MiB a GPU host returns per file; look for a large file "
            f"there that the next stage does not need and add it to SKIPPED_SUFFIXES"
        )
    tmp.replace(dest)
    log.info("state: %d files, %.1f KiB in %s", len(packed_files(work)), size / 1024, dest)
    return size


def read_manifest(state: Path) -> Manifest:
    """The manifest of a packed state; ValueError when `state` is not one."""
    try:
        with tarfile.open(state, "r:gz") as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise KeyError(MANIFEST)
            doc = json.loads(member.read())
    except (OSError, tarfile.TarError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"--state {state} is not an acceptance state ({exc}); pass the state.tar.gz the "
            f"previous stage wrote to its --out folder"
        ) from None
    if doc.get("version") != STATE_VERSION:
        raise ValueError(
            f"--state {state} has state version {doc.get('version')}, this script reads "
            f"{STATE_VERSION}; finish that run with the code that started it"
        )
    return Manifest(**doc)


def unpack_state(state: Path, *, profile: str) -> Manifest:
    """Unpack a state into the work folder it came from (its files replace those there; what it
    leaves out, the data, is kept or made again); returns its manifest. ValueError for another
    profile's state."""
    manifest = read_manifest(state)
    if manifest.profile != profile:
        raise ValueError(
            f"--state {state} belongs to a --profile {manifest.profile} run, not {profile}; pass "
            f"--profile {manifest.profile} or start a new run without --state"
        )
    work = Path(manifest.work)
    work.mkdir(parents=True, exist_ok=True)
    with tarfile.open(state, "r:gz") as tar:
        members = []
        for m in tar.getmembers():
            path = PurePosixPath(m.name)
            if m.name == MANIFEST:
                continue
            if path.parts[0] != "work" or ".." in path.parts or not (m.isfile() or m.isdir()):
                raise ValueError(f"--state {state}: unexpected member {m.name!r}")
            m.name = str(PurePosixPath(*path.parts[1:]))
            members.append(m)
        tar.extractall(work, members=members, filter="data")
    log.info(
        "state: %d files from %s unpacked to %s (stages done: %s)",
        len(members),
        state,
        work,
        ", ".join(manifest.stages_done) or "none",
    )
    return manifest
