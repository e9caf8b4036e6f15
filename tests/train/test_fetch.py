"""Tests for train.data.fetch (the receiver of worker batches) and its use by the prefetcher."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from train.data.dataset import DataConfig, DevicePrefetcher, build_loader
from train.data.fetch import ThreadedFetch
from train.data.synthetic import generate

VOCAB, B, T = 4096, 4, 16


def test_items_come_in_order_and_the_iterator_ends():
    fetch = ThreadedFetch(range(50), depth=3)
    assert list(fetch) == list(range(50))
    assert list(fetch) == []  # stays ended
    fetch.close()
    assert not fetch.alive


def test_a_source_error_reaches_the_consumer_after_the_good_items():
    def source():
        yield 1
        yield 2
        raise OSError("disk went away")

    fetch = ThreadedFetch(source())
    assert next(fetch) == 1
    assert next(fetch) == 2
    with pytest.raises(OSError, match="disk went away"):
        next(fetch)
    with pytest.raises(StopIteration):
        next(fetch)


def test_the_thread_stays_at_most_depth_items_ahead():
    pulled: list[int] = []

    def source():
        for i in range(100):
            pulled.append(i)
            yield i

    fetch = ThreadedFetch(source(), depth=2)
    time.sleep(0.3)
    # depth queued + the one item the blocked put holds
    assert len(pulled) == 3
    assert next(fetch) == 0
    fetch.close()
    assert not fetch.alive


def test_close_stops_a_thread_blocked_on_a_full_queue():
    fetch = ThreadedFetch(iter(int, 1), depth=1)  # endless source of zeros
    time.sleep(0.05)
    t0 = time.perf_counter()
    fetch.close()
    assert time.perf_counter() - t0 < 1.0
    assert not fetch.alive


def test_close_waits_for_an_item_being_made_to_finish():
    started = threading.Event()

    def source():
        while True:
            started.set()
            time.sleep(1.5)  # a slow receive: close() comes while the thread is inside it
            yield 0

    fetch = ThreadedFetch(source(), depth=1)
    started.wait()
    fetch.close()
    assert not fetch.alive  # it waited for the item instead of leaving the thread behind


def test_a_process_that_closes_while_the_thread_is_in_torch_code_exits_cleanly(tmp_path: Path):
    # A daemon thread still inside a torch op when the interpreter exits aborts the process
    # ("terminate called without an active exception"): how a DDP rank died at the end of a run
    # in CI. close() must leave no thread behind for the exit to catch.
    script = tmp_path / "close_then_exit.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            import torch
            from train.data.fetch import ThreadedFetch

            a = torch.randn(600, 600)

            def source():
                while True:
                    end = time.perf_counter() + 1.0
                    while time.perf_counter() < end:
                        a @ a  # torch code, the GIL released
                    yield 0

            fetch = ThreadedFetch(source(), depth=1)
            next(fetch)
            time.sleep(0.2)  # the thread is inside the next item's torch work
            fetch.close()
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminate called" not in proc.stderr


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="fetch depth must be >= 1, got 0"):
        ThreadedFetch([], depth=0)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok") / "synthetic"
    generate(root, num_tokens=50_000, seed=0)
    return root


def _fetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "batch-fetch"]


@pytest.mark.parametrize("workers", [0, 1])
def test_prefetcher_uses_a_receiving_thread_only_with_workers(data_dir, workers):
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=3, num_batches=6)
    plain = build_loader(DataConfig(dir=str(data_dir)), **kw)
    expected = [(x.clone(), y.clone()) for x, y in plain]
    before = len(_fetch_threads())
    cfg = DataConfig(dir=str(data_dir), num_workers=workers)
    batches = DevicePrefetcher(build_loader(cfg, **kw), "cpu")
    assert len(_fetch_threads()) - before == (1 if workers else 0)
    got = list(batches)
    batches.close()
    assert len(got) == 6
    for (xe, ye), (x, y, _) in zip(expected, got, strict=True):
        assert torch.equal(xe, x) and torch.equal(ye, y)
    assert len(_fetch_threads()) == before


def test_worker_batches_ready_ahead_cost_the_loop_almost_no_wait(data_dir):
    """The loop's work (a sleep standing in for compute) overlaps the receive: once the worker
    has batches ready, each next_batch() returns in well under a millisecond on average."""
    kw = dict(split="train", micro_batch=B, block_size=T, vocab_size=VOCAB, seed=3, num_batches=21)
    cfg = DataConfig(dir=str(data_dir), num_workers=1, prefetch_factor=4)
    batches = DevicePrefetcher(build_loader(cfg, **kw), "cpu")
    waits = []
    for _ in range(20):
        time.sleep(0.02)  # "compute"
        waits.append(batches.next_batch()[2])
    batches.close()
    steady = sorted(waits[2:])[len(waits[2:]) // 2]
    assert steady < 1e-3, f"median wait {steady * 1e3:.2f} ms"
