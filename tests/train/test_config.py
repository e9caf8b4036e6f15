"""train/core/config.py's cross-field rules: the attention/precision rule the sweeper shares, and
the trainer refusing such a combination before anything is built (CUDA faked on a CPU machine)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from train.core.config import Config, DataConfig, RuntimeConfig
from train.core.config_checks import check_combinations
from train.core.rules import attention_dtype_conflict, cudagraph_conflict
from train.run import loop


@pytest.mark.parametrize(
    ("attention", "dtype", "device_type", "bf16_supported", "conflict"),
    [
        # flash and cuDNN attention have no fp32 CUDA kernel
        ("flash", "fp32", "cuda", True, r"runtime\.attention=flash has no fp32 kernel on CUDA"),
        ("cudnn", "fp32", "cuda", True, r"runtime\.attention=cudnn .*runtime\.dtype=fp32 runs"),
        ("flash", "auto", "cuda", False, r"runtime\.dtype=auto resolves to fp32 \(this GPU has"),
        ("cudnn", "auto", "cuda", False, r"runtime\.attention=cudnn has no fp32 kernel"),
        # half precision, or a backend with an fp32 kernel, or auto resolving to bf16: fine
        ("flash", "auto", "cuda", True, None),
        ("flash", "bf16", "cuda", True, None),
        ("cudnn", "fp16", "cuda", False, None),
        ("efficient", "fp32", "cuda", True, None),
        ("math", "fp32", "cuda", True, None),
        ("auto", "fp32", "cuda", True, None),
        # the CPU's flash kernel takes fp32 (the CUDA-only backends are another rule)
        ("flash", "fp32", "cpu", False, None),
        ("flash", "auto", "cpu", False, None),
    ],
)
def test_attention_dtype_conflict_table(
    attention: str, dtype: str, device_type: str, bf16_supported: bool, conflict: str | None
) -> None:
    got = attention_dtype_conflict(
        attention, dtype, device_type=device_type, bf16_supported=bf16_supported
    )
    if conflict is None:
        assert got is None
    else:
        assert got is not None
        assert (got.key, got.value) == ("runtime.attention", attention)
        assert re.search(conflict, str(got)), got


@pytest.mark.parametrize(
    ("mode", "grad_accum", "device_type", "refused"),
    [
        ("reduce-overhead", 2, "cuda", True),
        ("max-autotune", 8, "cuda", True),
        ("reduce-overhead", 1, "cuda", False),  # no accumulation: the graph replays one pass
        ("max-autotune-no-cudagraphs", 2, "cuda", False),
        ("default", 2, "cuda", False),
        ("reduce-overhead", 2, "cpu", False),  # no CUDA graphs on a CPU
    ],
)
def test_cudagraph_conflict_is_a_refusal_naming_the_compile_mode(
    mode: str, grad_accum: int, device_type: str, refused: bool
) -> None:
    got = cudagraph_conflict(mode, grad_accum, device_type=device_type)
    if not refused:
        assert got is None
        return
    assert got is not None and (got.key, got.value) == ("runtime.compile", mode)
    assert str(got) == (
        f"runtime.compile={mode} captures CUDA graphs, unsafe with batch.grad_accum={grad_accum} "
        "> 1 (pytorch/pytorch#169545, #96693)"
    )


@pytest.mark.parametrize(
    ("dtype", "resolved", "match"),
    [
        ("fp32", "fp32", r"runtime\.attention=flash has no fp32 kernel.*runtime\.dtype=fp32"),
        ("auto", "fp32", r"runtime\.dtype=auto resolves to fp32"),
    ],
)
def test_check_combinations_refuses_fp32_flash_on_cuda_naming_the_fix(
    dtype: str, resolved: str, match: str
) -> None:
    cfg = Config(runtime=RuntimeConfig(attention="flash", dtype=dtype))
    with pytest.raises(ValueError, match=match) as err:
        check_combinations(cfg, device_type="cuda", dtype=resolved)
    message = str(err.value)
    assert "Use runtime.dtype=bf16" in message and "runtime.attention=efficient" in message
    check_combinations(cfg, device_type="cpu", dtype="fp32")  # CPU flash runs fp32


def test_check_combinations_takes_auto_as_bf16_on_cuda_when_not_told() -> None:
    check_combinations(Config(runtime=RuntimeConfig(attention="flash")), device_type="cuda")


def test_build_session_refuses_before_building_and_makes_the_device_current(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a (faked) GPU without bf16, runtime.dtype=auto is fp32: flash is refused with the
    rule's message before data, model or probe, after cuda:1 was made the current device."""
    chosen: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(loop, "check_data", _must_not_be_called)
    monkeypatch.setattr(loop, "GPT", _must_not_be_called)
    cfg = Config(
        runtime=RuntimeConfig(device="cuda:1", attention="flash"),
        data=DataConfig(dir=str(tmp_path / "synthetic")),
    )
    with pytest.raises(ValueError, match=r"runtime\.dtype=auto resolves to fp32"):
        loop.build_session(cfg)
    assert chosen == [torch.device("cuda", 1)]


def _must_not_be_called(*args: object, **kwargs: object) -> None:
    raise AssertionError("built before the combination was checked")
