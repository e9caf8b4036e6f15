"""train/run/checkpoint.py: schedule, file names, pruning, round trip, atomicity, async."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import train.run.checkpoint as ckpt_mod
from train.core import disk_full
from train.core.disk_full import DISK_FULL_ERRNOS, disk_full_errno
from train.run.checkpoint import (
    CheckpointConfig,
    CheckpointDiskFull,
    Checkpointer,
    CheckpointWriteError,
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
    payload_bytes,
    restore_rng_state,
    rng_state,
)
from train.trial.failure import classify


def _model_and_opt(seed: int = 0, device: str = "cpu") -> tuple[nn.Module, torch.optim.Optimizer]:
    """Tiny model + AdamW after one step, so exp_avg/exp_avg_sq state exists."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train_step(model, opt, device)
    return model, opt


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, device: str = "cpu") -> None:
    x = torch.randn(5, 8, device=device)
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _ckpt_names(dir: Path) -> list[str]:
    return sorted(p.name for p in dir.iterdir())


# --- config validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"every_steps": -1}, r"checkpoint\.every_steps must be >= 0.*-1"),
        ({"mode": "later"}, r"checkpoint\.mode must be one of.*'later'"),
        ({"keep": 0}, r"checkpoint\.keep must be >= 1.*0"),
        ({"slow_write_s": -0.1}, r"checkpoint\.slow_write_s must be >= 0.*-0\.1"),
        ({"dir": " "}, r"checkpoint\.dir must be a non-empty path"),
    ],
)
def test_bad_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CheckpointConfig(**kwargs)


def test_config_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        CheckpointConfig(5)  # type: ignore[misc]


# --- schedule, names, pruning ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every_steps", "step", "due"),
    [
        (0, 1, False),
        (0, 100, False),
        (1, 1, True),
        (3, 1, False),
        (3, 2, False),
        (3, 3, True),
        (3, 6, True),
        (3, 7, False),
        (10, 10, True),
        (10, 15, False),
    ],
)
def test_due_table(every_steps: int, step: int, due: bool) -> None:
    assert Checkpointer(CheckpointConfig(every_steps=every_steps)).due(step) is due


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_n_steps_writes_and_prunes(tmp_path: Path, mode: str) -> None:
    model, opt = _model_and_opt()
    cfg = CheckpointConfig(every_steps=2, dir=str(tmp_path / "ck"), mode=mode, keep=2)
    written_after: dict[int, list[str]] = {}
    with Checkpointer(cfg) as ckpt:
        for step in range(1, 8):
            _train_step(model, opt)
            if ckpt.due(step):
                ckpt.save(step=step, model=model, optimizer=opt, extra={"step_seen": step})
                ckpt.wait()
                written_after[step] = _ckpt_names(tmp_path / "ck")
    assert sorted(written_after) == [2, 4, 6]
    assert written_after[2] == ["ckpt_00000002.pt"]
    assert written_after[4] == ["ckpt_00000002.pt", "ckpt_00000004.pt"]
    # keep=2: step 2 is pruned once step 6 is complete
    assert written_after[6] == ["ckpt_00000004.pt", "ckpt_00000006.pt"]
    assert latest_checkpoint(tmp_path / "ck") == tmp_path / "ck" / "ckpt_00000006.pt"


def test_keep_one_and_size_and_timing_recorded(tmp_path: Path) -> None:
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path), keep=1))
    assert ckpt.last_write_s is None and ckpt.bytes_written is None
    for step in (1, 2, 3):
        ckpt.save(step=step, model=model, optimizer=opt, extra={})
    ckpt.close()
    assert _ckpt_names(tmp_path) == ["ckpt_00000003.pt"]
    assert ckpt.bytes_written == (tmp_path / "ckpt_00000003.pt").stat().st_size
    # weights + two AdamW moments: the file is at least ~3x the fp32 parameter bytes
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert ckpt.bytes_written >= 3 * param_bytes
    assert ckpt.last_write_s is not None and ckpt.last_write_s > 0


def test_dir_expanduser_and_relative_to_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Checkpointer(CheckpointConfig(dir="~/ck")).dir == tmp_path / "home" / "ck"
    monkeypatch.chdir(tmp_path)
    ckpt = Checkpointer(CheckpointConfig(dir="rel/ck"))
    monkeypatch.chdir("/")  # resolved at construction: a later chdir does not move the target
    model, opt = _model_and_opt()
    ckpt.save(step=1, model=model, optimizer=opt, extra={})
    assert (tmp_path / "rel" / "ck" / "ckpt_00000001.pt").is_file()


# --- round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_round_trip_restores_params_optimizer_and_extra(tmp_path: Path, mode: str) -> None:
    model, opt = _model_and_opt(seed=0)
    extra = {
        "data_index": 1234,
        "rng_cpu": torch.get_rng_state(),
        "config": {"model": {"n_layer": 2}, "lr": 1e-2, "name": "tiny", "tags": ["a", "b"]},
        "betas": (0.9, 0.95),
    }
    # slow_write_s delays serialisation, so in async mode the two train steps below run while the
    # write is in flight: the file must still hold the state at save() time (the snapshot).
    cfg = CheckpointConfig(dir=str(tmp_path), mode=mode, slow_write_s=0.2)
    with Checkpointer(cfg) as ckpt:
        ckpt.save(step=7, model=model, optimizer=opt, extra=extra)
        extra["data_index"] = -1  # caller reusing its dict must not change the checkpoint either
        _train_step(model, opt)
        _train_step(model, opt)
    saved_params = {k: v.clone() for k, v in model.state_dict().items()}

    fresh_model, fresh_opt = _model_and_opt(seed=1)
    path = latest_checkpoint(tmp_path)
    assert path is not None
    rest = load_checkpoint(path, model=fresh_model, optimizer=fresh_opt, map_location="cpu")

    assert rest["step"] == 7
    assert rest["extra"]["data_index"] == 1234
    assert torch.equal(rest["extra"]["rng_cpu"], extra["rng_cpu"])
    assert rest["extra"]["config"] == extra["config"]
    assert tuple(rest["extra"]["betas"]) == (0.9, 0.95)

    # Reference: the same model state at save time, rebuilt deterministically.
    ref_model, ref_opt = _model_and_opt(seed=0)
    for k, v in ref_model.state_dict().items():
        assert torch.equal(fresh_model.state_dict()[k], v), k
        assert not torch.equal(saved_params[k], v), f"{k}: later steps should have moved it"
    ref_sd, got_sd = ref_opt.state_dict(), fresh_opt.state_dict()
    assert got_sd["param_groups"] == ref_sd["param_groups"]
    assert ref_sd["state"].keys() == got_sd["state"].keys()
    for idx, st in ref_sd["state"].items():
        for name, val in st.items():
            assert torch.equal(got_sd["state"][idx][name], val), (idx, name)


def test_load_without_optimizer(tmp_path: Path) -> None:
    model, opt = _model_and_opt(seed=0)
    Checkpointer(CheckpointConfig(dir=str(tmp_path))).save(
        step=1, model=model, optimizer=opt, extra={}
    )
    fresh, _ = _model_and_opt(seed=3)
    rest = load_checkpoint(tmp_path / "ckpt_00000001.pt", model=fresh, optimizer=None)
    assert rest == {"step": 1, "extra": {}}
    assert all(
        torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True)
    )


def test_async_tied_weights_stored_once(tmp_path: Path) -> None:
    """Tied wte/lm_head share storage: the async snapshot must not double the file."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(64, 32)
            self.lm_head = nn.Linear(32, 64, bias=False)
            self.lm_head.weight = self.wte.weight

    sizes = {}
    for mode in ("sync", "async"):
        model = Tied()
        opt = torch.optim.AdamW(model.parameters())
        with Checkpointer(CheckpointConfig(dir=str(tmp_path / mode), mode=mode)) as ckpt:
            ckpt.save(step=1, model=model, optimizer=opt, extra={})
        sizes[mode] = ckpt.bytes_written
        fresh = Tied()
        load_checkpoint(tmp_path / mode / "ckpt_00000001.pt", model=fresh, optimizer=None)
        assert fresh.lm_head.weight is fresh.wte.weight
        assert torch.equal(fresh.wte.weight, model.wte.weight)
    assert sizes["async"] <= sizes["sync"] * 1.05


# --- atomicity ----------------------------------------------------------------------------------


def test_tmp_leftover_is_ignored(tmp_path: Path) -> None:
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path)))
    ckpt.save(step=5, model=model, optimizer=opt, extra={})
    # A run killed mid-write leaves a truncated, higher-step .tmp behind.
    (tmp_path / "ckpt_00000009.pt.tmp").write_bytes(b"truncated")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt_00000005.pt"
    assert not any(p.name.endswith(".tmp") and "00000005" in p.name for p in tmp_path.iterdir())


def test_latest_checkpoint_empty_or_missing(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "nope") is None


def test_latest_checkpoint_orders_by_step_number(tmp_path: Path) -> None:
    for step in (9, 10, 123456789):
        (tmp_path / f"ckpt_{step:08d}.pt").write_bytes(b"x")
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt_123456789.pt"


# --- async behaviour ----------------------------------------------------------------------------


def test_async_blocks_caller_less_than_sync(tmp_path: Path) -> None:
    model, opt = _model_and_opt()
    stalls = {}
    for mode in ("sync", "async"):
        cfg = CheckpointConfig(dir=str(tmp_path / mode), mode=mode, slow_write_s=0.5)
        with Checkpointer(cfg) as ckpt:
            stalls[mode] = ckpt.save(step=1, model=model, optimizer=opt, extra={})
            waited = ckpt.wait()
            assert (tmp_path / mode / "ckpt_00000001.pt").is_file()
            assert ckpt.last_write_s is not None and ckpt.last_write_s >= 0.5
        if mode == "async":
            assert waited > 0.2  # the planted slow write happened after save() returned
    assert stalls["sync"] >= 0.5
    assert stalls["async"] < 0.25


def test_async_second_save_waits_for_first(tmp_path: Path) -> None:
    model, opt = _model_and_opt()
    cfg = CheckpointConfig(dir=str(tmp_path), mode="async", slow_write_s=0.5, keep=5)
    with Checkpointer(cfg) as ckpt:
        first = ckpt.save(step=1, model=model, optimizer=opt, extra={})
        assert ckpt.in_flight
        second = ckpt.save(step=2, model=model, optimizer=opt, extra={})
        # step 1 is complete by the time save(step=2) returns: at most one write in flight
        assert (tmp_path / "ckpt_00000001.pt").is_file()
        ckpt.wait()
        assert not ckpt.in_flight
    assert first < 0.25
    assert second >= 0.3  # includes waiting out most of the first 0.5 s write
    assert _ckpt_names(tmp_path) == ["ckpt_00000001.pt", "ckpt_00000002.pt"]


def test_wait_without_pending_returns_quickly(tmp_path: Path) -> None:
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path), mode="async"))
    assert ckpt.wait() < 0.1
    ckpt.close()
    ckpt.close()  # idempotent
    model, opt = _model_and_opt()
    with pytest.raises(RuntimeError, match=r"after close"):
        ckpt.save(step=1, model=model, optimizer=opt, extra={})


# --- failures -----------------------------------------------------------------------------------


def _boom(*args: object, **kwargs: object) -> None:
    raise OSError("disk on fire")


@pytest.mark.parametrize("surface", ["save", "wait", "close"])
def test_async_failure_is_reraised_with_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, surface: str
) -> None:
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path), mode="async"))
    monkeypatch.setattr(torch, "save", _boom)
    stall = ckpt.save(step=3, model=model, optimizer=opt, extra={})  # failure happens later
    assert stall >= 0
    # torch.save stays patched: the background write may not have started yet.
    expected = r"ckpt_00000003\.pt.*disk on fire"
    with pytest.raises(CheckpointWriteError, match=expected):
        if surface == "save":
            ckpt.save(step=4, model=model, optimizer=opt, extra={})
        elif surface == "wait":
            ckpt.wait()
        else:
            ckpt.close()
    # reported once, not forever; the failed .tmp is cleaned up and nothing is "latest"
    ckpt.close()
    assert latest_checkpoint(tmp_path) is None
    assert not list(tmp_path.glob("*.tmp"))


def test_sync_failure_raises_with_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path)))
    monkeypatch.setattr(torch, "save", _boom)
    with pytest.raises(CheckpointWriteError, match=r"ckpt_00000002\.pt.*disk on fire"):
        ckpt.save(step=2, model=model, optimizer=opt, extra={})


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_async_failure_read_only_dir(tmp_path: Path) -> None:
    model, opt = _model_and_opt()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        ckpt = Checkpointer(CheckpointConfig(dir=str(ro), mode="async"))
        ckpt.save(step=1, model=model, optimizer=opt, extra={})
        with pytest.raises(CheckpointWriteError, match=r"ro/ckpt_00000001\.pt"):
            ckpt.wait()
        ckpt.close()
    finally:
        ro.chmod(0o700)


# --- RNG state on resume -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_restores_the_cpu_random_stream_exactly(tmp_path: Path, mode: str) -> None:
    model, opt = _model_and_opt()
    torch.manual_seed(3)
    with Checkpointer(CheckpointConfig(dir=str(tmp_path), mode=mode)) as ckpt:
        ckpt.save(step=1, model=model, optimizer=opt, extra={"rng": rng_state(torch.device("cpu"))})
    expected = torch.rand(5)  # what the run would have drawn next
    torch.rand(100)  # a restarted process is elsewhere in the stream
    rest = load_checkpoint(tmp_path / "ckpt_00000001.pt", model=model, optimizer=None)
    restore_rng_state(rest["extra"]["rng"], torch.device("cpu"))
    assert torch.equal(torch.rand(5), expected)


class _OnDevice:
    """A state as `torch.load(map_location="cuda")` returns it: on the GPU until `.cpu()`."""

    def __init__(self, cpu: torch.Tensor) -> None:
        self.device = torch.device("cuda", 0)
        self._cpu = cpu

    def cpu(self) -> torch.Tensor:
        return self._cpu


def test_restore_hands_the_generators_cpu_tensors_and_the_right_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Generators take a CPU ByteTensor only ("RNG state must be a torch.ByteTensor" otherwise,
    seen on an H100 with torch 2.11), so states loaded onto a GPU are brought back first, and the
    CUDA state goes to the session's device, not the current one."""
    set_cpu: list[torch.Tensor] = []
    set_cuda: list[tuple[torch.Tensor, torch.device]] = []
    monkeypatch.setattr(torch, "set_rng_state", set_cpu.append)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda t, d: set_cuda.append((t, d)))
    cpu_state, cuda_state = torch.get_rng_state(), torch.arange(16, dtype=torch.uint8)

    restore_rng_state(
        {"cpu": _OnDevice(cpu_state), "cuda": _OnDevice(cuda_state)}, torch.device("cuda", 1)
    )
    assert len(set_cpu) == 1 and set_cpu[0] is cpu_state
    assert len(set_cuda) == 1
    assert set_cuda[0][0] is cuda_state and set_cuda[0][1] == torch.device("cuda", 1)


def test_restore_accepts_a_bare_cpu_state_and_skips_cuda_on_a_cpu_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_cpu: list[torch.Tensor] = []
    monkeypatch.setattr(torch, "set_rng_state", set_cpu.append)
    monkeypatch.setattr(torch.cuda, "set_rng_state", _boom)
    state = torch.get_rng_state()
    restore_rng_state(state, torch.device("cpu"))  # checkpoints written before "rng" was a dict
    saved_on_gpu = {"cpu": state, "cuda": torch.zeros(16, dtype=torch.uint8)}
    restore_rng_state(saved_on_gpu, torch.device("cpu"))  # the CUDA state is not used
    assert len(set_cpu) == 2 and all(t is state for t in set_cpu)


def test_rng_state_saves_the_cuda_generator_of_the_session_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []

    def get_cuda_state(device: object) -> torch.Tensor:
        asked.append(device)
        return torch.ones(16, dtype=torch.uint8)

    monkeypatch.setattr(torch.cuda, "get_rng_state", get_cuda_state)
    state = rng_state(torch.device("cuda", 1))
    assert asked == [torch.device("cuda", 1)]
    assert torch.equal(state["cpu"], torch.get_rng_state())
    assert torch.equal(state["cuda"], torch.ones(16, dtype=torch.uint8))
    assert rng_state(torch.device("cpu")).keys() == {"cpu"}


# --- async copies on CUDA (fakes of the CUDA API) -----------------------------------------------


class _FakeStream:
    def __init__(self, device: torch.device) -> None:
        self.device = device


class _FakeEvent:
    """Records where it was recorded and when (and on which thread) it was waited for."""

    def __init__(self, wait_s: float = 0.0) -> None:
        self.stream: _FakeStream | None = None
        self.wait_s = wait_s
        self.synced_at: float | None = None
        self.synced_on: str | None = None

    def record(self, stream: _FakeStream) -> None:
        self.stream = stream

    def synchronize(self) -> None:
        time.sleep(self.wait_s)
        self.synced_at = time.perf_counter()
        self.synced_on = threading.current_thread().name


def test_copies_done_is_recorded_on_the_given_devices_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not the current device's (the trainer may run on cuda:1 while cuda:0 is current)."""
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", _FakeStream)
    event = ckpt_mod.copies_done(torch.device("cuda", 1))
    assert isinstance(event, _FakeEvent) and event.stream is not None
    assert event.stream.device == torch.device("cuda", 1)


def test_async_writer_waits_for_the_copies_before_serialising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller returns without waiting for the device->host copies; the writer thread waits
    for their event before torch.save reads the host buffers, and no device-wide sync is used."""
    event = _FakeEvent(wait_s=0.3)
    real_snapshot, real_save = Checkpointer._snapshot, torch.save
    saved_at: list[float] = []

    def snapshot_with_copies(self: Checkpointer, payload: dict) -> tuple[dict, list]:
        host, copied = real_snapshot(self, payload)
        return host, [*copied, event]

    def save(*args: object, **kwargs: object) -> None:
        saved_at.append(time.perf_counter())
        real_save(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Checkpointer, "_snapshot", snapshot_with_copies)
    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(torch.cuda, "synchronize", _boom)
    model, opt = _model_and_opt()
    with Checkpointer(CheckpointConfig(dir=str(tmp_path), mode="async")) as ckpt:
        stall_s = ckpt.save(step=1, model=model, optimizer=opt, extra={})
        assert event.synced_at is None  # still copying: the caller did not wait
        ckpt.wait()
    assert stall_s < event.wait_s
    assert event.synced_on is not None and event.synced_on.startswith("ckpt-writer")
    assert event.synced_at is not None and len(saved_at) == 1 and event.synced_at <= saved_at[0]
    assert (tmp_path / "ckpt_00000001.pt").is_file()


# --- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_async_round_trip(tmp_path: Path) -> None:
    model, opt = _model_and_opt(seed=0, device="cuda")
    with Checkpointer(CheckpointConfig(dir=str(tmp_path), mode="async")) as ckpt:
        ckpt.save(step=1, model=model, optimizer=opt, extra={"k": 1})
        expected = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        _train_step(model, opt, "cuda")  # mutate live state while the write may be in flight
    fresh, fresh_opt = _model_and_opt(seed=1, device="cuda")
    rest = load_checkpoint(
        tmp_path / "ckpt_00000001.pt", model=fresh, optimizer=fresh_opt, map_location="cuda"
    )
    assert rest["extra"] == {"k": 1}
    for k, v in fresh.state_dict().items():
        assert v.is_cuda and torch.equal(v.cpu(), expected[k]), k


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_resume_restores_both_generators_from_a_gpu_mapped_load(tmp_path: Path) -> None:
    """The production run loads with map_location=<its device>; the RNG states still restore."""
    device = torch.device("cuda", torch.cuda.current_device())
    model, opt = _model_and_opt(device="cuda")
    torch.manual_seed(5)
    with Checkpointer(CheckpointConfig(dir=str(tmp_path), mode="async")) as ckpt:
        ckpt.save(step=1, model=model, optimizer=opt, extra={"rng": rng_state(device)})
    expected_cpu, expected_cuda = torch.rand(5), torch.rand(5, device=device)
    torch.rand(100), torch.rand(100, device=device)
    rest = load_checkpoint(
        tmp_path / "ckpt_00000001.pt", model=model, optimizer=opt, map_location=device
    )
    assert rest["extra"]["rng"]["cpu"].device == device  # what torch.load did with it
    restore_rng_state(rest["extra"]["rng"], device)
    assert torch.equal(torch.rand(5), expected_cpu)
    assert torch.equal(torch.rand(5, device=device), expected_cuda)


# --- disk full ----------------------------------------------------------------------------------


class _FullDisk(io.RawIOBase):
    """A file whose writes fail with `code` once `room` bytes are written, as a full disk does."""

    def __init__(self, room: int, code: int = errno.ENOSPC) -> None:
        self.room, self.code = room, code

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        if len(b) > self.room:
            raise OSError(self.code, os.strerror(self.code))
        self.room -= len(b)
        return len(b)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_torch_save_into_a_full_file_is_recognised_through_torchs_wrapper(code: int) -> None:
    """torch.save's real error is its zip writer's "unexpected pos" RuntimeError; the OSError is
    only its __context__. The chain is searched, and the trial's classifier names disk_full."""
    with pytest.raises(RuntimeError) as info:
        torch.save({"w": torch.randn(10_000)}, _FullDisk(room=1000, code=code))
    exc = info.value
    assert "unexpected pos" in str(exc) and not isinstance(exc, OSError)  # what torch hides
    assert disk_full_errno(exc) == code
    failure = classify(exc, during_setup=False)
    assert failure["kind"] == "disk_full"
    assert DISK_FULL_ERRNOS[code] in failure["message"] and "\n" not in failure["message"]
    assert classify(RuntimeError("unexpected pos 1 vs 2"), during_setup=False)["kind"] == "crash"


needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


@needs_dev_full
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_checkpoint_into_a_full_disk_fails_in_one_line_and_keeps_the_earlier_ones(
    tmp_path: Path, mode: str
) -> None:
    """The write of step 4 meets the kernel's ENOSPC (its temporary file links to /dev/full):
    CheckpointDiskFull names the path, the free space and the fix in one line; the checkpoint of
    step 2 is intact and latest, and no temporary file is left."""
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path), mode=mode, keep=3))
    ckpt.save(step=2, model=model, optimizer=opt, extra={})
    ckpt.wait()
    before = checkpoint_path(tmp_path, 2).read_bytes()
    (tmp_path / "ckpt_00000004.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(CheckpointDiskFull) as info:
        ckpt.save(step=4, model=model, optimizer=opt, extra={})
        ckpt.wait()
    ckpt.close()
    message = str(info.value)
    assert "\n" not in message
    assert "no space left on device" in message and "ckpt_00000004.pt" in message
    assert re.search(r"[\d,.]+ [MG]B free there, the checkpoint needs ~[\d,.]+ MB", message)
    assert "checkpoint.dir=<a disk with room> or checkpoint.keep=2" in message
    assert f"; the newest checkpoint kept is {checkpoint_path(tmp_path, 2)}; fix:" in message
    assert classify(info.value, during_setup=False) == {"kind": "disk_full", "message": message}
    assert _ckpt_names(tmp_path) == ["ckpt_00000002.pt"]
    assert checkpoint_path(tmp_path, 2).read_bytes() == before
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 2)


@pytest.mark.parametrize(
    ("keep", "kept", "fix"),
    [(3, Path("/ck/ckpt_00000002.pt"), " or checkpoint.keep=2"), (1, None, ", or free ~")],
)
def test_the_disk_full_line_names_what_survived_and_never_a_keep_below_one(keep, kept, fix):
    import errno

    target = Path("/ck/ckpt_00000004.pt")
    line = disk_full.disk_full_message(
        path=target, code=errno.ENOSPC, free=10**6, needed=5 * 10**6, keep=keep, kept=kept
    )
    survived = f"the newest checkpoint kept is {kept}" if kept else "no earlier checkpoint"
    assert f"; {survived}; fix: checkpoint.dir=<a disk with room>{fix}" in line, line
    assert "checkpoint.keep=0" not in line and "<fewer>" not in line


@pytest.mark.parametrize(("free", "full"), [(10, True), (10**12, False)])
def test_torchs_bare_writer_error_is_disk_full_only_when_the_disk_has_no_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, full: bool
) -> None:
    """When torch's C++ writer hides the errno entirely, the target's free space decides."""
    model, opt = _model_and_opt()

    def short_write(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 32")

    monkeypatch.setattr(torch, "save", short_write)
    usage = shutil.disk_usage(tmp_path)._replace(free=free)
    monkeypatch.setattr(disk_full.shutil, "disk_usage", lambda _: usage)
    with pytest.raises(CheckpointWriteError) as info:
        Checkpointer(CheckpointConfig(dir=str(tmp_path))).save(
            step=1, model=model, optimizer=opt, extra={}
        )
    assert isinstance(info.value, CheckpointDiskFull) is full
    assert ("0.0 MB free there" in str(info.value)) is full


def test_payload_bytes_counts_shared_storage_once() -> None:
    w = torch.zeros(100, 10)
    assert payload_bytes({"a": w, "b": [w, w.t()], "c": 3, "d": torch.zeros(5)}) == 4000 + 20


# --- keep-N by content, not by name ------------------------------------------------------------


def test_a_torn_newer_file_never_costs_a_good_checkpoint_its_place(tmp_path: Path) -> None:
    # a newer checkpoint cut short (a copy interrupted, a full disk elsewhere) used to win keep's
    # ordering by step number: the good ones were deleted and the next run started from step 0
    model, opt = _model_and_opt()
    ckpt = Checkpointer(CheckpointConfig(dir=str(tmp_path), keep=1))
    ckpt.save(step=100, model=model, optimizer=opt, extra={})
    good = checkpoint_path(tmp_path, 100).read_bytes()
    torn = checkpoint_path(tmp_path, 900)
    torn.write_bytes(good[: len(good) // 3])
    ckpt.save(step=200, model=model, optimizer=opt, extra={})
    # the newest good one kept, the older good one pruned, the torn one left aside untouched
    assert _ckpt_names(tmp_path) == ["ckpt_00000200.pt", "ckpt_00000900.pt"]
    assert ckpt_mod.verified(checkpoint_path(tmp_path, 200))
    assert not ckpt_mod.verified(torn)


def test_resume_skips_a_torn_newest_file_and_names_the_one_it_uses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from train.__main__ import resume_from
    from train.core.config import CheckpointConfig as CkptCfg
    from train.core.config import Config

    model, opt = _model_and_opt()
    Checkpointer(CheckpointConfig(dir=str(tmp_path), keep=2)).save(
        step=100, model=model, optimizer=opt, extra={}
    )
    checkpoint_path(tmp_path, 900).write_bytes(b"PK\x03\x04 torn")
    cfg = Config(checkpoint=CkptCfg(dir=str(tmp_path)))
    with caplog.at_level("WARNING"):
        assert resume_from(cfg) == checkpoint_path(tmp_path, 100)
    assert "ckpt_00000900.pt" in caplog.text
