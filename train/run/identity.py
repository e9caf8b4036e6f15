"""Whose checkpoint is this: the run identity, and the rule for resuming across identities.

A production run resumes from the newest checkpoint in `checkpoint.dir`. That is only right when
the checkpoint was written by the same run: the same model shape, the same seed, the same data,
the same split of each step into micro-batches (batch i is a pure function of the seed, the data
and the split), and the same optimizer settings. The identity is those config values as a flat
`{"model.n_layer": 12, ...}` dict; each checkpoint stores it whole (not only its hash), so a
refusal can say which keys differ, old -> new.

The training file's size and a fingerprint of its ends are part of it: the same path holding other
or changed tokens (a re-tokenised corpus, a file cut short) is another run's data.

Left out on purpose: the speed knobs the sweep tunes (compile, attention, dtype, threads, data
workers, checkpoint mode), which change how fast a step runs, not what it computes from what;
`model.name` (a label) and `train.max_steps` (a resumed run may train longer).

Imports no torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from train.core.config import Config

# section -> keys whose values decide the weights and the batches; None = the whole section
IDENTITY_KEYS: dict[str, tuple[str, ...] | None] = {
    "model": None,
    "runtime": ("seed",),
    "data": ("dir", "train_file", "format"),
    "batch": ("tokens_per_step", "micro_batch", "grad_accum"),
    "optim": ("lr", "min_lr", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip"),
}
IGNORED = ("model.name",)  # a label: the same shape under another name is the same run
FINGERPRINT_BYTES = 1 << 20  # read from each end of the token file: milliseconds, any size
# identity keys a checkpoint written before they were recorded lacks: their absence is no mismatch
LATER_KEYS = ("data.train_bytes", "data.train_fingerprint")


def run_identity(cfg: Config | Mapping[str, Any]) -> dict[str, Any]:
    """The flat identity of a config (a `Config` or its nested dict): key -> value, sorted.
    The data folder is resolved to an absolute path (the trainer's rule), so the same data
    named from another folder is the same run."""
    doc = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg  # type: ignore[arg-type]
    ident: dict[str, Any] = {}
    for section, keys in IDENTITY_KEYS.items():
        values = doc.get(section) or {}
        for key in keys if keys is not None else tuple(values):
            name = f"{section}.{key}"
            if name not in IGNORED and key in values:
                ident[name] = values[key]
    if "data.dir" in ident:
        ident["data.dir"] = str(Path(str(ident["data.dir"])).expanduser().resolve())
        train = Path(ident["data.dir"]) / str(ident.get("data.train_file", "train.bin"))
        ident.update(data_fingerprint(train))
    return dict(sorted(ident.items()))


def data_fingerprint(path: Path) -> dict[str, Any]:
    """The token file's size and a cheap fingerprint (SHA-256 of its size and its first and last
    FINGERPRINT_BYTES), so a resume on other or changed data at the same path is refused; {} where
    the file is not there yet (the embedded default is generated at the run's start)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(FINGERPRINT_BYTES)
            f.seek(max(0, size - FINGERPRINT_BYTES))
            tail = f.read(FINGERPRINT_BYTES)
    except OSError:
        return {}
    digest = hashlib.sha256(str(size).encode() + head + tail).hexdigest()[:16]
    return {"data.train_bytes": size, "data.train_fingerprint": digest}


def identity_hash(identity: Mapping[str, Any]) -> str:
    """A short stable hash of an identity (12 hex digits of SHA-256 over its sorted JSON)."""
    text = json.dumps(dict(identity), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def identity_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) for each key whose value differs; a key one side lacks has
    None there. Sorted by key."""
    keys = sorted(set(old) | set(new))
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def format_diff(diff: list[tuple[str, Any, Any]]) -> str:
    """`runtime.seed 1337 -> 7, batch.micro_batch 2 -> 4`."""
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, old, new in diff)


def check_resume(
    *, saved: Mapping[str, Any] | None, current: Mapping[str, Any], path: Path, mode: str
) -> str | None:
    """Whether a run of identity `current` may resume from the checkpoint at `path`, written
    with identity `saved` (None: a checkpoint from before identities were recorded).

    Returns None (resume), or a warning to log and resume anyway (an old checkpoint, or
    `train.resume=force` over a mismatch); raises ValueError, one line naming the keys that
    differ (old -> new) and the two fixes, when the identities differ and `mode` is not force.
    """
    if saved is None:
        return (
            f"checkpoint {path} records no run identity (written before identities were "
            f"recorded): resuming from it unchecked"
        )
    diff = [d for d in identity_diff(saved, current) if not (d[0] in LATER_KEYS and d[1] is None)]
    if not diff:
        return None
    if mode == "force":
        return f"train.resume=force: resuming from {path} of another run ({format_diff(diff)})"
    raise ValueError(
        f"checkpoint {path} belongs to another run: {format_diff(diff)}. Use a fresh "
        f"checkpoint.dir for this run, or train.resume=force to resume from it anyway"
    )
