"""Checkpointing: model + AdamW state to `dir/ckpt_<step:08d>.pt`, sync or async, keep-N.

Why this lives in a throughput tool: a checkpoint is a real cost of training (AdamW keeps two fp32
moments per parameter, so a checkpoint is ~3x the fp32 weights) and the trainer charges the time the
caller is blocked by `save()` to the step it happens in.

Two modes:
- "sync": the caller serialises and writes the file itself; the stall is the whole write.
- "async": the caller only queues copies of the state to host memory (a snapshot) and hands it to
  ONE background writer thread; the stall is queueing the snapshot plus any wait for the previous
  write (at most one write is in flight). On CUDA the copies run on the device's stream; the writer
  waits for a CUDA event recorded after them before it reads a byte. A failed background write is
  re-raised on the next `save()`/`wait()`/`close()`, naming the file.

Every write goes to `ckpt_<step>.pt.tmp`, is fsync'ed, then `os.replace`d onto its final name, so
a kill mid-write never leaves a truncated file under a completed name; `latest_checkpoint` ignores
`.tmp` files. A write that fails because the target is full, over quota or read-only raises
`CheckpointDiskFull`, whose one-line message names the path, the free space and the fix.

Each checkpoint may record the run's identity (train/run/identity.py: the config values that
determine the weights and the batches), so a production run can refuse to resume someone else's.

We use a thread rather than `torch.distributed.checkpoint.async_save`: DCP does work without a
process group on CPU (checked on torch 2.13: it warns and assumes one process), but it writes a
directory of shards, not one `.pt` file that `torch.load` opens, and we need neither resharding nor
multi-rank writes here.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from train.core.config import CheckpointConfig
from train.core.disk_full import recognise

log = logging.getLogger(__name__)

_CKPT_RE = re.compile(r"^ckpt_(\d+)\.pt$")


class CheckpointWriteError(RuntimeError):
    """A checkpoint write failed; the message names the target file."""


class CheckpointReadError(RuntimeError):
    """A file under a completed checkpoint name could not be read back."""


class CheckpointDiskFull(CheckpointWriteError):
    """A checkpoint write failed for want of room: the disk is full, the quota is spent, or the
    target is read-only. The message is one line: the path, the free space and the fix."""


def payload_bytes(obj: Any) -> int:
    """Bytes of tensor data in a checkpoint payload (a storage shared by tensors counted once):
    what a write needs, give or take the zip headers."""
    storages: dict[tuple[str, int], int] = {}

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            storages[(str(o.device), st.data_ptr())] = st.nbytes()
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list | tuple):
            for v in o:
                walk(v)

    walk(obj)
    return sum(storages.values())


def checkpoint_path(dir: str | os.PathLike[str], step: int) -> Path:
    """Final (completed) file name of the checkpoint for `step`."""
    return Path(dir) / f"ckpt_{step:08d}.pt"


def _completed_checkpoints(dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of each completed checkpoint in `dir`, oldest first; `.tmp` files skipped."""
    if not dir.is_dir():
        return []
    found = []
    for p in dir.iterdir():
        m = _CKPT_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(dir: str | os.PathLike[str]) -> Path | None:
    """Highest-step completed `ckpt_*.pt` in `dir` (leftover `.tmp` files ignored), or None."""
    found = _completed_checkpoints(Path(dir).expanduser())
    return found[-1][1] if found else None


def checkpoints_newest_first(dir: str | os.PathLike[str]) -> list[Path]:
    """Every completed `ckpt_*.pt` in `dir`, highest step first (`.tmp` files ignored)."""
    return [p for _, p in reversed(_completed_checkpoints(Path(dir).expanduser()))]


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A checkpoint's step and identity without reading its tensors (memory-mapped, CPU).

    Raises CheckpointReadError when the file is not a readable checkpoint (truncated, corrupt,
    not ours). `identity` is None for checkpoints written before identities were recorded.
    """
    try:
        payload = torch.load(
            Path(path).expanduser(), map_location="cpu", mmap=True, weights_only=True
        )
        step = payload["step"]
    except Exception as exc:  # zip, unpickler and key errors alike: the file is not usable
        raise CheckpointReadError(f"unreadable checkpoint {path}: {exc}") from exc
    return {"step": step, "identity": payload.get("identity")}


def verified(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a complete checkpoint of ours: it loads with the safe unpickler
    (memory-mapped: the tensors are not read) and names its step."""
    try:
        header = read_header(path)
    except CheckpointReadError:
        return False
    return isinstance(header["step"], int)


def newest_verified(dir: str | os.PathLike[str]) -> Path | None:
    """The highest-step checkpoint in `dir` that `verified`, or None."""
    return next((p for p in checkpoints_newest_first(dir) if verified(p)), None)


def _unwrap(model: nn.Module) -> nn.Module:
    # torch.compile wraps the module and prefixes keys with "_orig_mod."; save plain GPT-2 keys.
    return getattr(model, "_orig_mod", model)


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    map_location: str | torch.device = "cpu",
    weights_only: bool = True,
) -> dict[str, Any]:
    """Restore model (and optimizer, if given) from `path`; return the rest: {"step", "extra"}.

    `weights_only=True` (the safe unpickler) is the default because our payload is plain dicts,
    lists, tuples, tensors, numbers, strings and None. An `extra` holding other objects (e.g. a
    numpy RNG state) must be converted to those types before saving, or loaded with
    `weights_only=False` — only for files this tool wrote itself.
    """
    payload = torch.load(
        Path(path).expanduser(), map_location=map_location, weights_only=weights_only
    )
    _unwrap(model).load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    log.info("loaded checkpoint %s (step %d)", path, payload["step"])
    return {k: v for k, v in payload.items() if k not in ("model", "optimizer")}


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """The generator states a resumed run needs: the CPU's, and the CUDA generator of `device`."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any] | torch.Tensor, device: torch.device) -> None:
    """Put back what `rng_state` saved (or a bare CPU state, as older checkpoints hold).

    Generators take their state as a CPU ByteTensor, CUDA's too, whatever `map_location` the
    checkpoint was loaded with: `torch.load(map_location="cuda")` puts these on the GPU, and
    `set_rng_state` then raises "RNG state must be a torch.ByteTensor" (seen with torch 2.11).
    """
    if not isinstance(state, dict):
        state = {"cpu": state}
    torch.set_rng_state(state["cpu"].cpu())
    if "cuda" not in state:
        return
    if device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    else:
        log.info("checkpoint holds a CUDA generator state; resuming on %s, it is not used", device)


def _fsync_dir(dir: Path) -> None:
    # Make the rename itself durable; some filesystems (network mounts) refuse a dir fsync: fine.
    try:
        fd = os.open(dir, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def copies_done(device: torch.device) -> torch.cuda.Event:
    """A CUDA event that completes once the work queued so far on `device`'s current stream (the
    snapshot's copies among it) has: recorded on that device's stream, not the current device's.
    """
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


class Checkpointer:
    """Writes checkpoints per `CheckpointConfig`; see the module docstring for the two modes."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.cfg = cfg
        # Resolve now so a later chdir (e.g. by Hydra) does not move the target.
        self.dir = Path(cfg.dir).expanduser().absolute()
        self.last_write_s: float | None = None  # duration of the latest completed write
        self.bytes_written: int | None = None  # size of the latest completed checkpoint file
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._pending_path: Path | None = None
        # Async staging buffers reused across saves (keyed by state path): safe because a new
        # snapshot is only taken after the previous write has finished. Costs one host copy of
        # the state for the checkpointer's lifetime; saves a pinned re-allocation per save on CUDA.
        self._staging: dict[str, torch.Tensor] = {}
        self._closed = False
        # the run's identity (train/run/identity.py), recorded in every checkpoint when set
        self.identity: dict[str, Any] | None = None
        # the newest checkpoint this run saved (a queued async write included: close() finishes
        # it) or resumed from: what a stop names as the last good one
        self.last_saved: Path | None = None

    def due(self, step: int) -> bool:
        """True when `step` (counted from 1 after the optimizer step) should be checkpointed."""
        return self.cfg.every_steps > 0 and step % self.cfg.every_steps == 0

    @property
    def in_flight(self) -> bool:
        """True while a background write is running (async mode only)."""
        return self._pending is not None and not self._pending.done()

    def save(
        self, *, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, extra: dict
    ) -> float:
        """Checkpoint model, optimizer, step and extra; return seconds the caller was blocked."""
        if self._closed:
            raise RuntimeError("Checkpointer.save() called after close()")
        t0 = time.perf_counter()
        payload = {
            "model": _unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "extra": extra,
        }
        if self.identity is not None:
            payload["identity"] = dict(self.identity)
        path = checkpoint_path(self.dir, step)
        if self.cfg.mode == "sync":
            self._write(payload, path)
        else:
            # At most one write in flight: wait for (and surface errors of) the previous one first;
            # this wait is part of the stall the caller sees.
            self._finish_pending()
            snapshot, copied = self._snapshot(payload)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-writer")
            self._pending = self._executor.submit(self._write, snapshot, path, copied)
            self._pending_path = path
        self.last_saved = path
        return time.perf_counter() - t0

    def wait(self) -> float:
        """Block until the in-flight write (if any) finishes; return the seconds waited."""
        t0 = time.perf_counter()
        self._finish_pending()
        return time.perf_counter() - t0

    def close(self) -> None:
        """Finish the in-flight write (re-raising its failure) and stop the writer thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._finish_pending()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            self._staging.clear()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ---------------------------------------------------------------------------

    def _finish_pending(self) -> None:
        pending, path = self._pending, self._pending_path
        self._pending = self._pending_path = None
        if pending is None:
            return
        try:
            pending.result()
        except CheckpointWriteError:
            raise
        except Exception as e:  # the writer wraps its errors; this is a safety net
            raise CheckpointWriteError(f"background checkpoint write to {path} failed: {e}") from e

    def _snapshot(self, payload: dict[str, Any]) -> tuple[dict[str, Any], list[torch.cuda.Event]]:
        """Copy every tensor to host memory so training can keep mutating the live state; return
        the copy and the events the writer must wait for before reading it.

        On CUDA the copies go into pinned buffers with non_blocking=True (device->host DMA queued
        on each device's current stream, behind the step that produced the state and ahead of the
        next one), and one CUDA event per device is recorded after them: the writer thread waits
        for those events, so the caller never waits for the copies, and the wait covers the
        devices the tensors are on, whatever the current device is.
        Tensors sharing storage (tied wte/lm_head) are copied once so the file stays the sync size.
        """
        seen: dict[tuple, torch.Tensor] = {}
        cuda_devices: set[torch.device] = set()

        def stage(t: torch.Tensor, key: str) -> torch.Tensor:
            ident = (t.device, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)
            if ident in seen:
                return seen[ident]
            is_cuda = t.device.type == "cuda"
            if is_cuda:
                cuda_devices.add(t.device)
            buf = self._staging.get(key)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                buf = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=is_cuda)
                self._staging[key] = buf
            buf.copy_(t.detach(), non_blocking=is_cuda)
            seen[ident] = buf
            return buf

        def walk(obj: Any, key: str) -> Any:
            if isinstance(obj, torch.Tensor):
                return stage(obj, key)
            if isinstance(obj, dict):
                return {k: walk(v, f"{key}/{k}") for k, v in obj.items()}
            if type(obj) in (list, tuple):
                return type(obj)(walk(v, f"{key}/{i}") for i, v in enumerate(obj))
            return copy.deepcopy(obj)  # numbers, strings, None: cheap; anything else: safe

        snapshot = walk(payload, "")
        return snapshot, [copies_done(d) for d in sorted(cuda_devices, key=str)]

    def _write(
        self, payload: dict[str, Any], path: Path, copied: Sequence[torch.cuda.Event] = ()
    ) -> None:
        """Atomic write: tmp file, fsync, rename; then record timing/size and prune old files.

        `copied`: CUDA events that complete when the snapshot's device->host copies have landed;
        waited for first, since pinned host buffers are read here while the DMA may still run.
        """
        tmp = path.with_name(path.name + ".tmp")
        t0 = time.perf_counter()
        try:
            for event in copied:
                event.synchronize()
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                if self.cfg.slow_write_s > 0:
                    # Planted slow storage (test/benchmark hook). Sleeping before serialising also
                    # lets tests prove the async snapshot is isolated from later training steps.
                    time.sleep(self.cfg.slow_write_s)
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except Exception as e:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise self._write_error(e, path, payload) from e
        self.last_write_s = time.perf_counter() - t0
        self.bytes_written = path.stat().st_size
        log.info(
            "checkpoint %s: %.1f MB in %.2f s (%s)",
            path,
            self.bytes_written / 1e6,
            self.last_write_s,
            self.cfg.mode,
        )
        self._prune()

    def _write_error(self, e: Exception, path: Path, payload: Any) -> CheckpointWriteError:
        """CheckpointDiskFull (one line: path, free space, fix) when the disk had no room
        (train/core/disk_full.py), else the plain CheckpointWriteError naming the file."""
        kept = newest_verified(path.parent)
        message = recognise(
            e, path=path, needed=payload_bytes(payload), keep=self.cfg.keep, kept=kept
        )
        if message is None:
            return CheckpointWriteError(f"checkpoint write to {path} failed: {e}")
        return CheckpointDiskFull(message)

    def _prune(self) -> None:
        """Delete all but the newest `keep` checkpoints that verify (`verified`) in our dir.

        By content, not by name: a file that does not verify (torn, cut short, another tool's) is
        neither counted among the kept nor deleted; a higher step number on such a file never
        costs a good checkpoint its place."""
        good, bad = [], []
        for step, path in _completed_checkpoints(self.dir):
            (good if verified(path) else bad).append((step, path))
        for _, path in bad:
            log.warning(
                "checkpoint %s does not verify (torn or not a checkpoint): kept aside, "
                "never counted as one of checkpoint.keep=%d",
                path,
                self.cfg.keep,
            )
        for _, old in good[: -self.cfg.keep]:
            try:
                old.unlink(missing_ok=True)
            except OSError as e:  # a failed delete must not fail training
                log.warning("could not delete old checkpoint %s: %s", old, e)
