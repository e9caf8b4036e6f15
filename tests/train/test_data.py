"""train.data.dataset (token files, batches, loaders, prefetch) and train.data.synthetic."""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import PROJECT_DIR
from train.data.dataset import (
    DataConfig,
    DevicePrefetcher,
    TokenBatches,
    batch_loader,
    build_loader,
    open_tokens,
)
from train.data.synthetic import GENERATOR, ensure_dataset, generate, may_generate_into

VOCAB = 50257
B, T = 4, 16


def write_nanogpt(path: Path, tokens: np.ndarray) -> Path:
    path.write_bytes(tokens.astype("<u2").tobytes())
    return path


def write_llmc(path: Path, tokens: np.ndarray, *, magic=20240520, version=1, count=None) -> Path:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    dtype = "<u2" if version == 1 else "<u4"
    path.write_bytes(header.tobytes() + tokens.astype(dtype).tobytes())
    return path


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok") / "synthetic"
    generate(root, num_tokens=50_000, seed=0)
    return root


def cfg_for(root: Path, **kw) -> DataConfig:
    return DataConfig(dir=str(root), **kw)


def collect(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


# ---- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"num_workers": -1}, r"data\.num_workers must be >= 0, got -1; use 0"),
        ({"prefetch_factor": 0}, r"data\.prefetch_factor must be >= 1, got 0"),
        ({"format": "parquet"}, r"data\.format must be one of"),
        ({"dir": " "}, r"data\.dir must be a non-empty path"),
        ({"train_file": ""}, r"data\.train_file must be a non-empty path"),
    ],
)
def test_config_rejects(kw, match):
    with pytest.raises(ValueError, match=match):
        DataConfig(**kw)


def test_config_resolves_relative_to_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(dir="a/b", val_file="v.bin")
    assert cfg.split_path("val") == tmp_path.resolve() / "a" / "b" / "v.bin"
    assert DataConfig(dir="~/x").resolve_dir() == Path.home() / "x"


# ---- token files ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["auto", "nanogpt"])
def test_nanogpt_file(tmp_path, fmt):
    tokens = np.arange(1000, dtype=np.uint16) * 7
    tf = open_tokens(
        write_nanogpt(tmp_path / "t.bin", tokens), format=fmt, block_size=T, vocab_size=VOCAB
    )
    assert (tf.format, tf.offset, tf.num_tokens) == ("nanogpt", 0, 1000)
    np.testing.assert_array_equal(tf.read(0, tf.num_tokens), tokens)


@pytest.mark.parametrize(
    "fmt, magic, version, dtype, vocab",
    [
        ("auto", 20240520, 1, np.uint16, VOCAB),
        ("llmc", 20240520, 1, np.uint16, VOCAB),
        ("auto", 20240801, 7, np.uint32, 128256),  # llama-3 shards
    ],
)
def test_llmc_file_round_trip(tmp_path, fmt, magic, version, dtype, vocab):
    tokens = (np.arange(3000) * 13 % (vocab - 1)).astype(dtype)
    path = write_llmc(tmp_path / "shard.bin", tokens, magic=magic, version=version)
    tf = open_tokens(path, format=fmt, block_size=T, vocab_size=vocab)
    assert (tf.format, tf.offset, tf.num_tokens) == ("llmc", 1024, 3000)
    assert tf.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(tf.read(0, tf.num_tokens), tokens)


def _bad_missing(d: Path) -> tuple[Path, str]:
    return d / "nope.bin", "auto"


def _bad_too_small(d: Path) -> tuple[Path, str]:
    return write_nanogpt(d / "small.bin", np.arange(T, dtype=np.uint16)), "auto"


def _bad_magic(d: Path) -> tuple[Path, str]:
    return write_nanogpt(d / "plain.bin", np.arange(2000, dtype=np.uint16)), "llmc"


def _bad_version(d: Path) -> tuple[Path, str]:
    return write_llmc(d / "v3.bin", np.arange(2000), version=3), "auto"


def _bad_count(d: Path) -> tuple[Path, str]:
    return write_llmc(d / "trunc.bin", np.arange(2000), count=2500), "llmc"


def _bad_odd_size(d: Path) -> tuple[Path, str]:
    path = d / "odd.bin"
    path.write_bytes(b"\x01" * 201)
    return path, "nanogpt"


def _bad_vocab(d: Path) -> tuple[Path, str]:
    tokens = np.full(2000, 5, dtype=np.uint16)
    tokens[-1] = 60000  # only the tail is bad: the sample must cover both ends
    return write_nanogpt(d / "bigvocab.bin", tokens), "auto"


@pytest.mark.parametrize(
    "make, match",
    [
        (_bad_missing, r"does not exist; run `python scripts/prepare_data.py"),
        (_bad_too_small, rf"holds {T} tokens, fewer than one window of block_size \+ 1"),
        (_bad_magic, r"llm\.c header \(magic \d+, version \d+\) is not one of"),
        (_bad_version, r"llm\.c header \(magic 20240520, version 3\)"),
        (_bad_count, r"header says 2500 tokens .* but the file has 5024 bytes"),
        (_bad_odd_size, r"201 bytes, not a multiple of 2"),
        (_bad_vocab, r"token id 60000 >= vocab_size 50257 .* raise model\.vocab_size"),
    ],
)
def test_bad_token_files_name_the_file(tmp_path, make, match):
    path, fmt = make(tmp_path)
    with pytest.raises(ValueError, match=match) as err:
        open_tokens(path, format=fmt, block_size=T, vocab_size=VOCAB)
    assert path.name in str(err.value)


def test_token_file_pickles_without_data(data_dir):
    tf = open_tokens(data_dir / "train.bin", format="auto", block_size=T, vocab_size=VOCAB)
    first = tf.read(0, 100)
    fd = tf._fd
    tf.read(100, 100)
    assert tf._fd == fd  # opened once, reused
    blob = pickle.dumps(tf)
    assert len(blob) < 2000  # metadata only, never the 90 KB of tokens
    np.testing.assert_array_equal(pickle.loads(blob).read(0, 100), first)


# ---- batches and loaders --------------------------------------------------------------------


def test_batch_shapes_and_shift(data_dir):
    tf = open_tokens(data_dir / "train.bin", format="auto", block_size=T, vocab_size=VOCAB)
    ds = TokenBatches(tf, micro_batch=B, block_size=T, seed=3)
    x, y = ds[7]
    assert x.shape == y.shape == (B, T)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row, o in enumerate(ds.offsets(7)):  # each row is the file's window at its offset
        np.testing.assert_array_equal(x[row].numpy(), tf.read(int(o), T))
        np.testing.assert_array_equal(y[row].numpy(), tf.read(int(o) + 1, T))


def test_split_and_seed_change_batches(data_dir):
    tf = open_tokens(data_dir / "train.bin", format="auto", block_size=T, vocab_size=VOCAB)
    base = TokenBatches(tf, micro_batch=B, block_size=T, seed=1).offsets(0)
    assert not np.array_equal(
        base, TokenBatches(tf, micro_batch=B, block_size=T, seed=2).offsets(0)
    )
    other = TokenBatches(tf, micro_batch=B, block_size=T, seed=1, split="val").offsets(0)
    assert not np.array_equal(base, other)


def test_same_batches_for_any_num_workers(data_dir):
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=5, num_batches=6)
    serial = collect(build_loader(cfg_for(data_dir, num_workers=0), **kw))
    parallel = collect(build_loader(cfg_for(data_dir, num_workers=2), **kw))
    assert len(serial) == len(parallel) == 6
    for (xs, ys), (xp, yp) in zip(serial, parallel, strict=True):
        assert torch.equal(xs, xp) and torch.equal(ys, yp)
    assert not torch.equal(serial[0][0], serial[1][0])


def test_resume_at_start_index_continues_exactly(data_dir):
    cfg = cfg_for(data_dir, num_workers=0)
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=9)
    full = collect(build_loader(cfg, num_batches=8, **kw))
    resumed = collect(build_loader(cfg, start_index=5, num_batches=3, **kw))
    assert len(resumed) == 3
    for (xf, yf), (xr, yr) in zip(full[5:], resumed, strict=True):
        assert torch.equal(xf, xr) and torch.equal(yf, yr)


def test_endless_loader_and_loader_kwargs(data_dir):
    kw = dict(split="val", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=0)
    endless = build_loader(cfg_for(data_dir, num_workers=0), **kw)
    assert len(endless) > 10**15
    assert endless.pin_memory is False  # pinning only on CUDA
    workers = build_loader(
        cfg_for(data_dir, num_workers=2, prefetch_factor=3), num_batches=2, device_type="cuda", **kw
    )
    assert (workers.prefetch_factor, workers.persistent_workers) == (3, True)
    assert workers.pin_memory is True
    assert workers.worker_init_fn is not None


class _PidBatches(TokenBatches):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return x, y, os.getpid()


def test_two_workers_are_two_processes(data_dir):
    tf = open_tokens(data_dir / "train.bin", format="auto", block_size=T, vocab_size=VOCAB)
    ds = _PidBatches(tf, micro_batch=B, block_size=T, seed=0, inject_latency_s=0.05)
    loader = batch_loader(ds, cfg_for(data_dir, num_workers=2), num_batches=6)
    pids = {pid for _, _, pid in loader}
    assert len(pids) == 2
    assert os.getpid() not in pids


def test_inject_latency_slows_each_batch(data_dir):
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=0, num_batches=3)

    def seconds_per_batch(latency: float) -> float:
        loader = build_loader(cfg_for(data_dir, num_workers=0), inject_latency_s=latency, **kw)
        t0 = time.perf_counter()
        assert len(collect(loader)) == 3
        return (time.perf_counter() - t0) / 3

    base, slow = seconds_per_batch(0.0), seconds_per_batch(0.2)
    assert 0.2 <= slow - base + 0.01 < 0.2 + 0.5  # "about that much", generous on a shared CPU


# ---- prefetcher -----------------------------------------------------------------------------


def test_prefetcher_yields_all_batches_in_order_with_waits(data_dir):
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=2, num_batches=4)
    expected = collect(build_loader(cfg_for(data_dir, num_workers=0), **kw))
    slow = build_loader(cfg_for(data_dir, num_workers=0), inject_latency_s=0.05, **kw)
    got = list(DevicePrefetcher(slow, "cpu"))
    assert len(got) == 4
    for (xe, ye), (x, y, wait_s) in zip(expected, got, strict=True):
        assert torch.equal(xe, x) and torch.equal(ye, y)
        assert isinstance(wait_s, float) and wait_s >= 0
    # each call but the last fetches one batch ahead; the first also paid for the first batch
    assert got[0][2] >= 0.09
    assert all(w >= 0.045 for _, _, w in got[1:3])
    assert got[3][2] < 0.045


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prefetcher_cuda_matches_host(data_dir):
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=2, num_batches=5)
    cfg = cfg_for(data_dir, num_workers=1)
    expected = collect(build_loader(cfg, **kw))
    got = list(DevicePrefetcher(build_loader(cfg, device_type="cuda", **kw), "cuda"))
    torch.cuda.synchronize()
    assert len(got) == 5
    for (xe, ye), (x, y, _) in zip(expected, got, strict=True):
        assert x.is_cuda and y.is_cuda
        assert torch.equal(xe, x.cpu()) and torch.equal(ye, y.cpu())


# ---- synthetic data -------------------------------------------------------------------------


def test_generate_is_deterministic(tmp_path):
    a = generate(tmp_path / "a", num_tokens=20_000, seed=4)
    b = generate(tmp_path / "b", num_tokens=20_000, seed=4)
    c = generate(tmp_path / "c", num_tokens=20_000, seed=5)
    assert c["seed"] == 5
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "train.bin").read_bytes() != (
        tmp_path / "c" / "train.bin"
    ).read_bytes()
    assert a == b
    assert (a["train_tokens"], a["val_tokens"]) == (18_000, 2_000)
    assert json.loads((tmp_path / "a" / "meta.json").read_text()) == a
    assert not list((tmp_path / "a").glob("*.tmp"))  # atomic writes leave no temp files


def test_synthetic_data_is_learnable(tmp_path):
    meta = generate(tmp_path, num_tokens=400_000, seed=0)
    tokens = np.fromfile(tmp_path / "train.bin", dtype="<u2").astype(np.int64)
    assert tokens.max() < VOCAB
    _, uni = np.unique(tokens, return_counts=True)
    p = uni / uni.sum()
    unigram_h = float(-(p * np.log(p)).sum())
    _, pair = np.unique(tokens[:-1] * VOCAB + tokens[1:], return_counts=True)
    q = pair / pair.sum()
    bigram_conditional_h = float(-(q * np.log(q)).sum()) - unigram_h  # H(next | current)
    assert unigram_h > 7.0  # thousands of ids in use (ln 2048 = 7.6), not a toy alphabet
    assert bigram_conditional_h < 2.0 < math.log(VOCAB) / 5  # far below a uniform guess
    assert abs(bigram_conditional_h - meta["entropy_rate_nats"]) < 0.5


def test_ensure_dataset_generates_only_synthetic_dirs(tmp_path, caplog):
    root = tmp_path / "synthetic"
    with caplog.at_level("INFO", logger="train.data.synthetic"):
        assert ensure_dataset(DataConfig(dir=str(root))) == root.resolve()
    assert "generated synthetic dataset" in caplog.text
    assert json.loads((root / "meta.json").read_text())["generator"] == GENERATOR
    open_tokens(root / "val.bin", format="auto", block_size=1024, vocab_size=VOCAB)

    (root / "val.bin").unlink()  # ours (meta.json): regenerated
    ensure_dataset(DataConfig(dir=str(root)))
    assert (root / "val.bin").is_file()


@pytest.mark.parametrize(
    "sub, kw, match",
    [
        ("openwebtext", {}, r"only a folder named 'synthetic'"),
        ("synthetic", {"generate_if_missing": False}, r"data\.generate_if_missing is false"),
        ("foreign/synthetic", {}, r"only a folder named 'synthetic'"),
    ],
)
def test_ensure_dataset_refuses_user_dirs(tmp_path, sub, kw, match):
    root = tmp_path / sub
    if sub.startswith("foreign"):
        root.mkdir(parents=True)
        (root / "notes.txt").write_text("someone else's folder")
    with pytest.raises(ValueError, match=match) as err:
        ensure_dataset(DataConfig(dir=str(root), **kw))
    assert "train.bin" in str(err.value) and "prepare_data.py" in str(err.value)
    assert not (root / "train.bin").exists()
    # synthetic tokens are offered only for a folder whose name says synthetic
    assert (f"--out {root.resolve()}" in str(err.value)) == (root.name == "synthetic")


@pytest.mark.parametrize(
    ("fmt", "script"),
    [("nanogpt", "data/openwebtext/prepare.py"), ("llmc", "dev/data/fineweb.py")],
)
def test_the_missing_data_hint_names_the_real_corpus_script(tmp_path, fmt, script):
    root = tmp_path / "openwebtext"
    with pytest.raises(ValueError, match=re.escape(script)) as err:
        ensure_dataset(DataConfig(dir=str(root), format=fmt, generate_if_missing=False))
    assert "--out data/synthetic" in str(err.value) and "data=synthetic" in str(err.value)
    assert f"--out {root.resolve()}" not in str(err.value)


def test_a_folder_being_generated_is_waited_for_not_refused(tmp_path, caplog):
    """Parallel trials start on the same absent folder: one generates, and another that looks
    while it writes (train.bin there, no meta.json yet) waits for it and uses its files. Without
    the generator's lock it refused the half-made folder as a user's ('token file(s) missing'):
    seen in a two-at-a-time submitit sweep."""
    import threading

    from train.core.first_record import locked

    made = tmp_path / "made" / "synthetic"
    generate(made, num_tokens=5000)
    root = tmp_path / "data" / "synthetic"
    root.mkdir(parents=True)
    outcome: dict[str, object] = {}

    def trial() -> None:
        try:
            outcome["dir"] = ensure_dataset(DataConfig(dir=str(root)))
        except ValueError as exc:
            outcome["error"] = exc

    with locked(root.parent / ".synthetic"):  # the first trial, writing
        (root / "train.bin").write_bytes((made / "train.bin").read_bytes())
        waiting = threading.Thread(target=trial)
        with caplog.at_level("INFO", logger="train.data.synthetic"):
            waiting.start()
            waiting.join(timeout=1.0)  # long enough to look at the half-made folder
            for name in ("val.bin", "meta.json"):
                (root / name).write_bytes((made / name).read_bytes())
    waiting.join(timeout=30)
    assert outcome == {"dir": root.resolve()}
    assert "generated synthetic dataset" not in caplog.text  # the first one's files, as made
    assert (root / "train.bin").read_bytes() == (made / "train.bin").read_bytes()


def test_parallel_processes_on_an_absent_folder_all_get_one_data_set(tmp_path):
    """Four trials started together on an absent folder, a little apart: the first generates
    under the lock, the others wait on it and find its files (exit 1: a refusal)."""
    import multiprocessing

    root = tmp_path / "synthetic"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(4)

    def trial(late_s: float) -> None:
        start.wait()
        time.sleep(late_s)
        try:
            ensure_dataset(DataConfig(dir=str(root)))
        except ValueError:
            os._exit(1)

    procs = [ctx.Process(target=trial, args=(0.05 * i,)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
    meta = json.loads((root / "meta.json").read_text())
    assert os.path.getsize(root / "train.bin") == 2 * meta["train_tokens"]


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(lambda lock, tmp: lock.mkdir(), id="folder"),
        pytest.param(lambda lock, tmp: lock.symlink_to(tmp / "elsewhere"), id="link"),
        pytest.param(lambda lock, tmp: os.mkfifo(lock), id="pipe"),
    ],
)
def test_something_planted_at_the_generators_lock_is_refused_in_one_line(tmp_path, plant):
    """The lock beside an absent synthetic folder is taken as it is found: a folder there was an
    IsADirectoryError traceback, a link was followed to create a file elsewhere."""
    root = tmp_path / "data" / "synthetic"
    root.parent.mkdir()
    lock = root.parent / ".synthetic.lock"
    plant(lock, tmp_path)
    with pytest.raises(ValueError, match=rf"lock file {re.escape(str(lock))} is unusable: remove"):
        ensure_dataset(DataConfig(dir=str(root)))
    assert not (tmp_path / "elsewhere").exists() and not root.exists()


def test_a_generated_folder_holds_nanogpt_meta_pkl(tmp_path):
    root = tmp_path / "synthetic"
    generate(root, num_tokens=5000, id_space=1024, num_active=512)
    with open(root / "meta.pkl", "rb") as f:  # nanoGPT's train.py reads it so
        assert pickle.load(f) == {"vocab_size": 1024}
    (root / "meta.pkl").unlink()  # a folder made before meta.pkl was written gets one
    ensure_dataset(DataConfig(dir=str(root)))
    with open(root / "meta.pkl", "rb") as f:
        assert pickle.load(f) == {"vocab_size": 1024}


@pytest.mark.parametrize(
    "sub, content, expected",
    [
        ("synthetic", None, True),  # absent
        ("synthetic", {}, True),  # empty
        ("synthetic", {"meta.json": json.dumps({"generator": GENERATOR})}, True),
        ("synthetic", {"meta.json": json.dumps({"generator": "theirs"})}, False),
        ("synthetic", {"meta.json": "not json"}, False),
        ("synthetic", {"readme.txt": "x"}, False),
        # a generation killed before its meta.json leaves only its temporary files
        ("synthetic", {".train.bin.k2j4x.tmp": "x"}, True),
        ("synthetic", {".train.bin.k2j4x.tmp": "x", "train.bin": "x"}, False),
        ("openwebtext", None, False),
        ("openwebtext", {}, False),
    ],
)
def test_may_generate_into(tmp_path, sub, content, expected):
    root = tmp_path / sub
    if content is not None:
        root.mkdir()
        for name, text in content.items():
            (root / name).write_text(text)
    assert may_generate_into(root) is expected


def test_prepare_data_cli(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/prepare_data.py",
            "--out",
            str(out),
            "--tokens",
            "5000",
            "--seed",
            "3",
        ],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert re.search(r"wrote .*cli", proc.stdout)
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["seed"], meta["train_tokens"] + meta["val_tokens"]) == (3, 5000)


def test_a_token_file_cut_short_is_caught_before_a_read_and_named_in_one_line(tmp_path):
    from train.data.dataset import DataChanged, open_tokens

    path = tmp_path / "train.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)
    tokens = open_tokens(path, format="nanogpt", block_size=8, vocab_size=2000)
    tokens.check_intact()  # intact: nothing raised
    with path.open("r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(DataChanged) as caught:
        tokens.check_intact()
    want = f"token file changed under the run: {path} shrank from 2,000 to 1,000 bytes"
    assert DataChanged.line(caught.value).startswith(want)
    # a DataLoader worker re-raises it wrapped in its traceback text: the line is still found
    head = "Caught DataChanged in DataLoader worker process 0.\nOriginal Traceback (most recent"
    wrapped = DataChanged(f"{head} call last):\n  ...\n{caught.value}\n")
    assert DataChanged.line(wrapped) == DataChanged.line(caught.value)
    assert DataChanged.line(RuntimeError("CUDA error")) is None


def test_a_file_cut_short_between_the_check_and_the_read_is_a_short_read_not_a_bus_error(tmp_path):
    """The check before a batch leaves a window: the file may shrink after it. A memmap read of a
    page past the new end raised SIGBUS there (the process died without a line); pread comes back
    short and the same one line is raised."""
    from train.data.dataset import DataChanged, open_tokens

    path = tmp_path / "train.bin"
    np.arange(60_000, dtype=np.uint16).tofile(path)
    tokens = open_tokens(path, format="nanogpt", block_size=8, vocab_size=60_000)
    tokens.check_intact()
    assert tokens.read(50_000, 9).tolist() == list(range(50_000, 50_009))
    with path.open("r+b") as fh:
        fh.truncate(1000)  # after the check, before the next read
    with pytest.raises(DataChanged) as caught:
        tokens.read(50_000, 9)
    want = f"token file changed under the run: {path} shrank from 120,000 to 1,000 bytes"
    assert DataChanged.line(caught.value).startswith(want)
