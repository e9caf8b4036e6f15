"""Token data: read nanoGPT / llm.c `.bin` files, serve random-window micro-batches, prefetch.

Formats (both little-endian):
- "nanogpt": headerless uint16 token ids, as nanoGPT's `data/*/prepare.py` writes them.
- "llmc": llm.c shards (karpathy/llm.c dev/data/data_common.py `write_datafile`): a header of 256
  int32 (1024 bytes) with header[0] = magic, header[1] = version, header[2] = number of tokens, then
  the tokens. (magic 20240520, version 1) = GPT-2, uint16 tokens; (magic 20240801, version 7) =
  llama-3, uint32 tokens.
- "auto": llm.c if the first int32 is a known magic, else nanoGPT. A nanoGPT file cannot collide:
  the magics' low uint16 halves (0xD888 = 55432, 0xD9A1 = 55713), which a nanoGPT file
  would hold as its first token, are not GPT-2 ids (< 50257).

Batches: item i of `TokenBatches` is a whole micro-batch (x, y), windows at offsets drawn from a
generator seeded by (seed, split, i). Batch i is therefore the same for any num_workers, and a
resumed run that starts its sampler at `start_index` sees exactly the batches it would have seen.
In a data-parallel run the generator draws the global micro-batch (micro_batch x world windows)
and rank r takes windows r*micro_batch .. (r+1)*micro_batch - 1 of it: the global batch i is the
one a single process with micro_batch x world would read, whatever the number of processes.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from train.core.config import DATA_FORMATS as _FORMATS
from train.core.config import Config, DataConfig
from train.core.hooks import hooks_of
from train.data.fetch import ThreadedFetch

_LLMC_HEADER_INTS = 256
_LLMC_HEADER_BYTES = _LLMC_HEADER_INTS * 4
# (magic, version) -> token dtype, from llm.c dev/data/data_common.py HEADERS_INFO
_LLMC_KINDS: dict[tuple[int, int], np.dtype] = {
    (20240520, 1): np.dtype("<u2"),  # gpt-2
    (20240801, 7): np.dtype("<u4"),  # llama-3
}
_LLMC_MAGICS = {magic for magic, _ in _LLMC_KINDS}
# token ids checked against vocab_size at each end of the file: a cheap sample, not a full scan
_VOCAB_CHECK_TOKENS = 1_000_000
# "endless" loader length: ~4.6e18 batches, never reached, still a valid len() for DataLoader
_ENDLESS = 2**62
_MAKE_DATA_HINT = (
    "run `python scripts/prepare_data.py --out data/synthetic` for synthetic tokens, or set "
    "data.dir=/path/to/tokens (e.g. made by nanoGPT's data/openwebtext/prepare.py)"
)


class DataChanged(RuntimeError):
    """The token file changed under a running process (truncated, deleted): reading on would come
    back short or train on other tokens."""

    MARK = "token file changed under the run: "

    @classmethod
    def line(cls, exc: BaseException) -> str | None:
        """The one-line reason of a DataChanged, also when a DataLoader worker's re-raise wrapped
        it in its traceback text; None for any other error."""
        text = str(exc)
        if cls.MARK not in text:
            return None
        return cls.MARK + text.split(cls.MARK, 1)[1].splitlines()[0]


class TokenFile:
    """A validated token file, read with `os.pread`: a window past a file cut short under the run
    comes back short (DataChanged, one line) where a memmap's page would raise SIGBUS and kill the
    process without a word. The file opens lazily, once per process: pickling (to a DataLoader
    worker) carries only the metadata, and pread's explicit offset makes an inherited descriptor
    safe to share across forks."""

    def __init__(self, path: Path, *, format: str, dtype: np.dtype, offset: int, num_tokens: int):
        self.path = path
        self.format = format
        self.dtype = dtype
        self.offset = offset  # bytes before the first token (the llm.c header)
        self.num_tokens = num_tokens
        self._fd: int | None = None

    @property
    def size_bytes(self) -> int:
        """The file's size when it was validated: header and tokens."""
        return self.offset + self.num_tokens * self.dtype.itemsize

    def read(self, start: int, count: int) -> np.ndarray:
        """Tokens [start, start + count) as a fresh array; DataChanged when the file no longer
        holds them."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        want = count * self.dtype.itemsize
        raw = os.pread(self._fd, want, self.offset + start * self.dtype.itemsize)
        if len(raw) < want:
            self._shrank(os.fstat(self._fd).st_size)
        return np.frombuffer(raw, dtype=self.dtype)

    def check_intact(self) -> None:
        """Raise DataChanged when the file is gone or shorter than validated (one stat, ~1 us),
        before a batch is read."""
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            gone = f"{DataChanged.MARK}{self.path} can no longer be read ({exc})"
            raise DataChanged(gone) from exc
        if size < self.size_bytes:
            self._shrank(size)

    def _shrank(self, size: int) -> None:
        raise DataChanged(
            f"{DataChanged.MARK}{self.path} shrank from {self.size_bytes:,} to {size:,} bytes "
            "while this run read it; restore the file (or point data.dir at an intact copy) "
            "and resume"
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None}

    def __repr__(self) -> str:
        return f"TokenFile({self.path}, {self.format}, {self.dtype}, {self.num_tokens:,} tokens)"


def _detect_format(path: Path, size: int) -> str:
    if size < _LLMC_HEADER_BYTES:
        return "nanogpt"
    magic = int(np.fromfile(path, dtype="<i4", count=1)[0])
    return "llmc" if magic in _LLMC_MAGICS else "nanogpt"


def open_tokens(path: str | Path, *, format: str, block_size: int, vocab_size: int) -> TokenFile:
    """Validate a token file before any step runs; raise ValueError naming the file and the fix."""
    path = Path(path).expanduser().resolve()
    if format not in _FORMATS:
        raise ValueError(f"data.format must be one of {_FORMATS}, got {format!r}")
    if not path.is_file():
        raise ValueError(f"token file {path} does not exist; {_MAKE_DATA_HINT}")
    size = path.stat().st_size
    if format == "auto":
        format = _detect_format(path, size)

    if format == "llmc":
        if size < _LLMC_HEADER_BYTES:
            raise ValueError(
                f"{path} has {size} bytes, less than llm.c's {_LLMC_HEADER_BYTES}-byte header; "
                "is it a nanoGPT file? set data.format=nanogpt"
            )
        magic, version, count = (int(v) for v in np.fromfile(path, dtype="<i4", count=3))
        dtype = _LLMC_KINDS.get((magic, version))
        if dtype is None:
            raise ValueError(
                f"{path}: llm.c header (magic {magic}, version {version}) is not one of "
                f"{sorted(_LLMC_KINDS)}; re-run llm.c's data prep, or set data.format=nanogpt "
                "for a headerless uint16 file"
            )
        expected = _LLMC_HEADER_BYTES + count * dtype.itemsize
        if count < 0 or size != expected:
            raise ValueError(
                f"{path}: header says {count} tokens ({expected} bytes with the header) but the "
                f"file has {size} bytes; the file is truncated or corrupt, re-create it"
            )
        token_file = TokenFile(
            path, format="llmc", dtype=dtype, offset=_LLMC_HEADER_BYTES, num_tokens=count
        )
    else:
        dtype = np.dtype("<u2")
        if size % dtype.itemsize:
            raise ValueError(
                f"{path} has {size} bytes, not a multiple of {dtype.itemsize} (uint16 tokens); "
                "the file is truncated or not a nanoGPT token file, re-create it"
            )
        token_file = TokenFile(
            path, format="nanogpt", dtype=dtype, offset=0, num_tokens=size // dtype.itemsize
        )

    if token_file.num_tokens < block_size + 1:
        raise ValueError(
            f"{path} holds {token_file.num_tokens} tokens, fewer than one window of "
            f"block_size + 1 = {block_size + 1}; use a bigger file or a smaller model.block_size"
        )
    n = min(_VOCAB_CHECK_TOKENS, token_file.num_tokens)
    ends = (token_file.read(0, n), token_file.read(token_file.num_tokens - n, n))
    max_id = max(int(end.max()) for end in ends)
    if max_id >= vocab_size:
        raise ValueError(
            f"{path} holds token id {max_id} >= vocab_size {vocab_size} (checked the first and "
            f"last {n:,} tokens); it was tokenized for a bigger vocabulary: raise "
            f"model.vocab_size to > {max_id} or re-tokenize the data"
        )
    return token_file


class TokenBatches(Dataset):
    """Map-style dataset whose item i is a whole micro-batch (x, y) of int64, (B, T) each."""

    def __init__(
        self,
        token_file: TokenFile,
        *,
        micro_batch: int,
        block_size: int,
        seed: int,
        split: str = "train",
        inject_latency_s: float = 0.0,
        rank: int = 0,
        world: int = 1,
    ):
        if micro_batch < 1 or block_size < 1:
            raise ValueError(
                f"micro_batch and block_size must be >= 1, got {micro_batch}, {block_size}"
            )
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in 0..world-1, got rank {rank} of {world}")
        self.rank = rank
        self.world = world
        self.token_file = token_file
        self.micro_batch = micro_batch
        self.block_size = block_size
        self.inject_latency_s = inject_latency_s
        # SeedSequence takes non-negative ints only; the split salt keeps train and val apart
        self._entropy = (seed % 2**64, zlib.crc32(split.encode()))

    def offsets(self, index: int) -> np.ndarray:
        """Window starts of this rank's share of global batch `index`; each window of T+1
        tokens fits in the file."""
        rng = np.random.default_rng([*self._entropy, index])
        high = self.token_file.num_tokens - self.block_size  # exclusive: o + T + 1 <= N
        drawn = rng.integers(0, high, size=self.micro_batch * self.world)
        return drawn[self.rank * self.micro_batch : (self.rank + 1) * self.micro_batch]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.token_file.check_intact()  # a truncated file stops the run in one line
        span = self.block_size + 1
        # one contiguous read per window (B reads), never per token
        read = self.token_file.read
        buf = np.stack([read(int(o), span) for o in self.offsets(index)]).astype(np.int64)
        if self.inject_latency_s > 0:
            time.sleep(self.inject_latency_s)
        x = torch.from_numpy(buf[:, :-1].copy())  # (B, T)
        y = torch.from_numpy(buf[:, 1:].copy())  # (B, T), next-token targets
        return x, y


def _keep_batch(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    # items are already whole batches; the default collate (default_convert) makes tuples lists
    return batch


def _init_worker(worker_id: int) -> None:
    # Each worker is its own process. Left at the default, each would size its intra-op pool to
    # all cores, so workers + the training process oversubscribe the CPU; a worker only slices and
    # casts arrays, so one thread is enough. (torch's worker loop does it too; we make it explicit.)
    torch.set_num_threads(1)


def batch_loader(
    dataset: Dataset,
    cfg: DataConfig,
    *,
    start_index: int = 0,
    num_batches: int | None = None,
    device_type: str = "cpu",
) -> DataLoader:
    """A DataLoader yielding dataset[start_index], dataset[start_index + 1], ... (whole batches)."""
    if start_index < 0:
        raise ValueError(f"start_index must be >= 0, got {start_index}")
    if num_batches is not None and num_batches < 0:
        raise ValueError(f"num_batches must be >= 0 or None (endless), got {num_batches}")
    stop = _ENDLESS if num_batches is None else start_index + num_batches
    workers = cfg.num_workers
    return DataLoader(
        dataset,
        batch_size=None,  # items are whole micro-batches: no per-sample collate
        sampler=range(start_index, stop),
        collate_fn=_keep_batch,
        num_workers=workers,
        prefetch_factor=cfg.prefetch_factor if workers > 0 else None,
        persistent_workers=cfg.persistent_workers and workers > 0,
        pin_memory=cfg.pin_memory and device_type == "cuda",
        worker_init_fn=_init_worker if workers > 0 else None,
    )


def build_loader(
    cfg: DataConfig,
    *,
    split: str,
    micro_batch: int,
    block_size: int,
    vocab_size: int,
    seed: int,
    start_index: int = 0,
    num_batches: int | None = None,
    device_type: str = "cpu",
    rank: int = 0,
    world: int = 1,
    inject_latency_s: float = 0.0,
) -> DataLoader:
    """Validate `split`'s file (train.data.synthetic.ensure_dataset makes the default one) and
    return a loader over batches start_index .. start_index + num_batches (None = endless);
    `inject_latency_s` > 0 sleeps that long per batch (a test hook: train/core/hooks.py)."""
    token_file = open_tokens(
        cfg.split_path(split), format=cfg.format, block_size=block_size, vocab_size=vocab_size
    )
    dataset = TokenBatches(
        token_file,
        micro_batch=micro_batch,
        block_size=block_size,
        seed=seed,
        split=split,
        inject_latency_s=inject_latency_s,
        rank=rank,
        world=world,
    )
    return batch_loader(
        dataset, cfg, start_index=start_index, num_batches=num_batches, device_type=device_type
    )


def make_loader(
    cfg: Config,
    *,
    split: str,
    device_type: str = "cpu",
    start_index: int = 0,
    num_batches: int | None = None,
    rank: int = 0,
    world: int = 1,
) -> DataLoader:
    """`build_loader` for a run's config: the data settings, the micro-batch shape and the seed
    all come from `cfg`, so the trial, the production run and the benchmarks read the same batches;
    `rank` of `world` reads its slice of each global batch.
    """
    return build_loader(
        cfg.data,
        split=split,
        micro_batch=cfg.batch.micro_batch,
        block_size=cfg.model.block_size,
        vocab_size=cfg.model.vocab_size,
        seed=cfg.runtime.seed,
        start_index=start_index,
        num_batches=num_batches,
        device_type=device_type,
        rank=rank,
        world=world,
        inject_latency_s=hooks_of(cfg).inject_latency_s,
    )


class DevicePrefetcher:
    """Keep the NEXT batch's host->device copy in flight while the current batch computes.

    `next_batch()` returns (x, y, wait_s): wait_s is the wall time this call blocked the caller
    (fetching the following batch from the loader and issuing its copy; the first call also pays
    for the first batch). On CUDA the copy runs on a side stream and the consumer's stream waits on
    it, so a caller that wants device-accurate clocks syncs before reading them.
    """

    def __init__(
        self, loader: DataLoader, device: torch.device | str, *, non_blocking: bool = True
    ):
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        # batches from worker processes are received on a thread (train/data/fetch.py explains why)
        self._fetch = ThreadedFetch(loader) if loader.num_workers > 0 else None
        self._it: Iterator[tuple[torch.Tensor, torch.Tensor]] = (
            self._fetch if self._fetch is not None else iter(loader)
        )
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._next: tuple[torch.Tensor, torch.Tensor] | None = None
        self._carry_s = 0.0  # time spent fetching before the first next_batch() call
        t0 = time.perf_counter()
        self._preload()
        self._carry_s = time.perf_counter() - t0

    def _preload(self) -> None:
        try:
            x, y = next(self._it)
        except StopIteration:
            self._next = None
            return
        if self._stream is not None:
            with torch.cuda.stream(self._stream):
                x = x.to(self.device, non_blocking=self.non_blocking)
                y = y.to(self.device, non_blocking=self.non_blocking)
        elif x.device != self.device:
            x, y = x.to(self.device), y.to(self.device)
        self._next = (x, y)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        if self._next is None:
            raise StopIteration
        t0 = time.perf_counter()
        x, y = self._next
        if self._stream is not None:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_stream(self._stream)
            # the tensors were allocated on the side stream: tell the caching allocator they are
            # used on the consumer stream too, so their memory is not reused too early
            x.record_stream(consumer)
            y.record_stream(consumer)
        self._preload()
        wait_s = time.perf_counter() - t0 + self._carry_s
        self._carry_s = 0.0
        return x, y, wait_s

    def close(self) -> None:
        """Stop the receiving thread, if any (it is a daemon: a missed close never hangs exit)."""
        if self._fetch is not None:
            self._fetch.close()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        return self.next_batch()
