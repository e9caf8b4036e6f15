"""`python -m train.proc.probe`: print what this machine offers as one JSON line.

The sweeper never imports torch (it stays light and its process never holds a CUDA context); it
asks a child process instead, once per sweep, before any trial starts.
"""

from __future__ import annotations

import json
import os


def probe() -> dict:
    import torch

    from train.core.rules import installed_flash_impls
    from train.core.units import GIB

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda_available": cuda,
        "device_type": "cuda" if cuda else "cpu",
        "device_name": torch.cuda.get_device_name(0) if cuda else None,
        "device_count": torch.cuda.device_count() if cuda else 0,
        "bf16_supported": bool(cuda and torch.cuda.is_bf16_supported()),
        # total memory of device 0 in GiB (the memory model's budget); None on a CPU
        "device_memory_gib": (
            torch.cuda.get_device_properties(0).total_memory / GIB if cuda else None
        ),
        "cpu_count": len(os.sched_getaffinity(0)),
        # device 0's compute capability [major, minor] (runtime.float8 needs >= 8.9); None on a CPU
        "cuda_capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        # runtime.attention's flash implementations this torch lists and can activate
        "flash_attention_impls": installed_flash_impls(
            getattr(torch.nn.attention, "list_flash_attention_impls", list)()
        ),
    }


if __name__ == "__main__":
    print(json.dumps(probe()))
