"""The embedded default dataset, made offline: a seeded sparse Markov chain over few token ids.

Why synthetic: the tool measures throughput, so it must run anywhere with no download, yet the loss
must fall like a real run's (a model that learns nothing hides bugs). The chain:
- `num_active` distinct token ids drawn from [0, id_space - 1); id `id_space - 1` separates
  documents of `doc_len` tokens. The default id space (4096) keeps every id valid for the GPT-2
  presets and for the CPU ones, whose 4096-entry vocabulary stops the lm_head dominating a step.
- every active token has `branching` distinct successors with fixed Zipf weights w_r ∝ 1/r; with
  probability `jump_prob` the next token is instead uniform over the active set (keeps the chain
  ergodic, so no small cycle takes over).
Every state's next-token distribution is the same multiset of probabilities, so the entropy rate is
exact: with the defaults (2048 active, branching 4, jump 0.02) it is ≈ 1.47 nats/token, against
ln(2048) ≈ 7.6 for the unigram. A tiny GPT-2 drops from ~ln(vocab) to the unigram level within tens
of steps and then towards the entropy rate as it learns the bigrams.
The exact value is written to meta.json as `entropy_rate_nats` (the loss floor). Beside it goes
meta.pkl, `{'vocab_size': N}` pickled as nanoGPT's prepare scripts write it, since nanoGPT's
train.py sizes its model from that file (50304 without one); this project writes it, never reads it.

Chains are simulated in parallel, one per document, so making 4M tokens takes well under a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from train.core.first_record import locked
from train.core.paths import check_folder_target, folder_problem
from train.data.dataset import DataConfig

log = logging.getLogger(__name__)

GENERATOR = "train.data.synthetic.markov_v2"
GPT2_VOCAB_SIZE = 50257  # GPT-2 BPE vocabulary (Radford et al. 2019; tiktoken "gpt2")
DEFAULT_ID_SPACE = 4096  # token ids lie in [0, 4096); the last one separates documents
DEFAULT_NUM_TOKENS = 4_000_000  # train + val; 8 MB of uint16
DEFAULT_SEED = 1337
META_FILE = "meta.json"
# what nanoGPT's train.py reads the vocabulary size from (its data/*/prepare.py write it)
NANOGPT_META_FILE = "meta.pkl"
# folder name that `ensure_dataset` may generate into (see may_generate_into)
SYNTHETIC_DIR_NAME = "synthetic"


def entropy_rate_nats(*, num_active: int, branching: int, jump_prob: float) -> float:
    """Exact entropy rate of the chain (nats/token, document separators ignored)."""
    weights = 1.0 / np.arange(1, branching + 1)
    weights /= weights.sum()
    uniform = jump_prob / num_active
    probs = np.concatenate(
        [(1 - jump_prob) * weights + uniform, np.full(num_active - branching, uniform)]
    )
    probs = probs[probs > 0]
    return float(-(probs * np.log(probs)).sum())


def _successors(rng: np.random.Generator, num_active: int, branching: int) -> np.ndarray:
    """(num_active, branching) distinct successor states per state, none equal to itself."""
    offsets = rng.integers(1, num_active, size=(num_active, branching))
    # redraw the (rare) rows with a repeated offset so each row's successors are distinct
    while True:
        srt = np.sort(offsets, axis=1)
        bad = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
        if bad.size == 0:
            break
        offsets[bad] = rng.integers(1, num_active, size=(bad.size, branching))
    return (np.arange(num_active)[:, None] + offsets) % num_active


def _write_atomic(path: Path, data: bytes) -> None:
    # a unique temp name in the same folder + os.replace: concurrent generators (parallel sweep
    # jobs) never expose a half-written file, and the last rename wins with identical content
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def generate(
    out_dir: str | Path,
    *,
    num_tokens: int = DEFAULT_NUM_TOKENS,
    seed: int = DEFAULT_SEED,
    val_fraction: float = 0.1,
    num_active: int = 2048,
    id_space: int = DEFAULT_ID_SPACE,
    branching: int = 4,
    jump_prob: float = 0.02,
    doc_len: int = 1024,
    train_file: str = "train.bin",
    val_file: str = "val.bin",
) -> dict[str, Any]:
    """Write nanoGPT-format uint16 train/val files plus meta.json into out_dir; return the meta."""
    if num_tokens < 1000:
        raise ValueError(f"num_tokens must be >= 1000, got {num_tokens}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if not 2 <= branching < num_active < id_space <= GPT2_VOCAB_SIZE:
        raise ValueError(
            f"need 2 <= branching < num_active < id_space <= {GPT2_VOCAB_SIZE}, got "
            f"{branching}, {num_active}, {id_space}"
        )
    eot = id_space - 1
    if not 0 <= jump_prob <= 1:
        raise ValueError(f"jump_prob must be in [0, 1], got {jump_prob}")
    if doc_len < 1:
        raise ValueError(f"doc_len must be >= 1, got {doc_len}")

    rng = np.random.default_rng(seed % 2**64)
    vocab = rng.choice(eot, size=num_active, replace=False).astype(np.uint16)
    succ = _successors(rng, num_active, branching)
    cum_weights = np.cumsum(1.0 / np.arange(1, branching + 1))
    cum_weights /= cum_weights[-1]

    # one chain per document, stepped together: (num_docs,) state vectors, doc_len steps
    num_docs = math.ceil(num_tokens / (doc_len + 1))
    states = np.empty((num_docs, doc_len), dtype=np.int64)
    s = rng.integers(0, num_active, size=num_docs)
    for t in range(doc_len):
        states[:, t] = s
        rank = np.minimum(np.searchsorted(cum_weights, rng.random(num_docs)), branching - 1)
        jump = rng.random(num_docs) < jump_prob
        s = np.where(jump, rng.integers(0, num_active, size=num_docs), succ[s, rank])
    docs = np.empty((num_docs, doc_len + 1), dtype=np.uint16)
    docs[:, :doc_len] = vocab[states]
    docs[:, doc_len] = eot
    tokens = docs.reshape(-1)[:num_tokens]

    num_val = max(1, round(num_tokens * val_fraction))
    train, val = tokens[:-num_val], tokens[-num_val:]
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / train_file, train.astype("<u2").tobytes())
    _write_atomic(out / val_file, val.astype("<u2").tobytes())
    meta: dict[str, Any] = {
        "generator": GENERATOR,
        "format": "nanogpt",
        "dtype": "uint16",
        "vocab_size": id_space,
        "eot_token": eot,
        "seed": seed,
        "num_active": num_active,
        "branching": branching,
        "jump_prob": jump_prob,
        "doc_len": doc_len,
        "entropy_rate_nats": entropy_rate_nats(
            num_active=num_active, branching=branching, jump_prob=jump_prob
        ),
        "train_file": train_file,
        "val_file": val_file,
        "train_tokens": int(train.size),
        "val_tokens": int(val.size),
    }
    _write_atomic(out / META_FILE, (json.dumps(meta, indent=2) + "\n").encode())
    write_nanogpt_meta(out, vocab_size=id_space)
    return meta


def write_nanogpt_meta(out: Path, *, vocab_size: int) -> None:
    """meta.pkl as nanoGPT's prepare scripts write it: a pickled plain dict. nanoGPT's train.py
    reads `vocab_size` from it and builds a 50304-token model where the folder has none."""
    blob = pickle.dumps({"vocab_size": int(vocab_size)}, protocol=pickle.DEFAULT_PROTOCOL)
    _write_atomic(out / NANOGPT_META_FILE, blob)


def add_missing_nanogpt_meta(root: Path) -> None:
    """A folder this module made before meta.pkl was written gets one, from its meta.json."""
    if (root / NANOGPT_META_FILE).exists() or not may_generate_into(root):
        return
    meta = json.loads((root / META_FILE).read_text())
    if isinstance(meta.get("vocab_size"), int):
        write_nanogpt_meta(root, vocab_size=meta["vocab_size"])


def may_generate_into(path: Path) -> bool:
    """The rule for generating unasked: the folder is named "synthetic" AND it is absent, empty
    (but for this module's temporary files), or holds a meta.json written by this module. A
    user's folder that merely lacks files is never written into."""
    if path.name != SYNTHETIC_DIR_NAME:
        return False
    if not path.exists():
        return True
    if not path.is_dir():
        return False
    meta = path / META_FILE
    if meta.is_file():
        try:
            return json.loads(meta.read_text()).get("generator") == GENERATOR
        except (OSError, ValueError):
            return False
    # empty but for the temporary files of a generation that was killed before its meta.json
    return all(_is_partial(p) for p in path.iterdir())


def _is_partial(path: Path) -> bool:
    """A temporary file of `_write_atomic` (`.<name>.<random>.tmp`): this module's own."""
    return path.name.startswith(".") and path.name.endswith(".tmp")


def check_token_paths(root: Path, paths: tuple[Path, Path]) -> None:
    """data.dir is a folder if it exists, and no token path is one (ValueError)."""
    if root.exists() and not root.is_dir():
        raise ValueError(
            f"data.dir={root} is a file, not a folder: point data.dir at the folder that holds "
            f"the token files ({', '.join(p.name for p in paths)})"
        )
    for setting, path in zip(("data.train_file", "data.val_file"), paths, strict=True):
        if path.is_dir():
            raise ValueError(
                f"{setting}: {path} is a folder, not a token file: name the .bin file in it"
            )


def ensure_dataset(cfg: DataConfig) -> Path:
    """Make sure cfg's train/val files exist, generating the synthetic set if allowed.

    Returns the resolved data folder. Raises ValueError naming the missing files otherwise."""
    root = cfg.resolve_dir()
    paths = (root / cfg.train_file, root / cfg.val_file)
    check_token_paths(root, paths)
    missing = [p for p in paths if not p.is_file()]
    if not missing:
        if root.name == SYNTHETIC_DIR_NAME and (root / META_FILE).is_file():
            add_missing_nanogpt_meta(root)
        return root
    # only into the folder itself: a token path that leads elsewhere is the user's, not ours
    if cfg.generate_if_missing and all(p.parent == root for p in paths):
        # Parallel trials of a sweep start on the same absent folder: one generates, the others
        # wait for it and then find its files (unlocked, one that looked while the first wrote
        # saw a half-made folder, no meta.json yet, and refused it as a user's). The lock file,
        # `.synthetic.lock`, goes beside the folder where that can be written.
        writable = root.name == SYNTHETIC_DIR_NAME and folder_problem(root.parent) is None
        with locked(root.parent / f".{root.name}") if writable else contextlib.nullcontext():
            missing = [p for p in paths if not p.is_file()]
            if not missing:
                return root
            if may_generate_into(root):
                check_folder_target("data.dir", root)
                _generate_logged(root, cfg)
                return root
    why = (
        "data.generate_if_missing is false"
        if not cfg.generate_if_missing
        else f"only a folder named {SYNTHETIC_DIR_NAME!r} that is absent, empty or made by "
        "train.data.synthetic is generated into"
    )
    files = ", ".join(map(str, missing))
    raise ValueError(f"token file(s) missing: {files} ({why}); {missing_data_hint(cfg, root)}")


def _generate_logged(root: Path, cfg: DataConfig) -> None:
    meta = generate(root, train_file=cfg.train_file, val_file=cfg.val_file)
    log.info(
        "generated synthetic dataset in %s (%d train / %d val tokens, entropy %.2f nats/token)",
        root,
        meta["train_tokens"],
        meta["val_tokens"],
        meta["entropy_rate_nats"],
    )


def missing_data_hint(cfg: DataConfig, root: Path) -> str:
    """What to run for a missing token file. Synthetic tokens are offered only under a folder name
    that says so: a folder named for a real corpus gets that corpus's own preparation script."""
    if root.name == SYNTHETIC_DIR_NAME:
        return (
            f"create them with `python scripts/prepare_data.py --out {root}` (synthetic "
            f"tokens) or point data.dir at your token files"
        )
    if cfg.format == "llmc":
        real = "llm.c's `python dev/data/fineweb.py` writes GPT-2 shards"
    else:
        real = "nanoGPT's `python data/openwebtext/prepare.py` writes train.bin and val.bin"
    synthetic = f"data/{SYNTHETIC_DIR_NAME}"
    return (
        f"prepare real tokens and point data.dir at their folder ({real}), or measure on "
        f"generated tokens with data=synthetic (made on first use; `python "
        f"scripts/prepare_data.py --out {synthetic}` writes them by hand)"
    )
