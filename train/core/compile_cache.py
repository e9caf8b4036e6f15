"""Where torch.compile keeps what it compiled: one folder a whole sweep shares, or none at all.

Inductor's FX-graph cache and AOTAutograd's cache (on by default since torch 2.11) store each
compiled graph on disk, keyed by the graph, its input shapes, the torch version and the compile
config, under `TORCHINDUCTOR_CACHE_DIR` (torch/_inductor/runtime/cache_dir_utils.py; the kernels
it builds and their .so / Triton binaries live there too, Triton's under `TRITON_CACHE_DIR`). A
process that finds its graph there skips Inductor's code generation: on this 2-core CPU a 2-layer
GPT's first compiled step takes 25-40 s cold and ~3 s warm.

`runtime.compile_cache` names the folder:
    ""          torch's own default (a folder in the temp dir, shared by every process of the user)
    "off"       no reuse: both caches disabled and a private, empty folder per process, so every
                process compiles cold (what a sweep without a shared cache would pay)
    <folder>    that folder, for every process that names it (the sweep passes its own to every
                trial and race run; best.yaml carries it to the production run)

Two halves. `cache_env` (pure) is what a process must START with: torch reads
`TORCHINDUCTOR_FX_GRAPH_CACHE` and `TORCHINDUCTOR_AUTOGRAD_CACHE` once, when its config modules are
imported (env_name_force: they then win over any later assignment), and a sweep's trials are forked
from a zygote that imported them already (train/proc/zygote.py), so the sweeper puts these in the
environment of the zygote and of every trial it starts. `use_compile_cache` is what a process does
before its first compile, for the keys torch reads at call time (the folders) and for a process
started without them (`python -m train` on best.yaml). This module imports no torch when imported.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from train.core.rules import check_compile_cache

log = logging.getLogger(__name__)

OFF = "off"
CACHE_DIR_VAR = "TORCHINDUCTOR_CACHE_DIR"  # read at each use (cache_dir_utils.cache_dir)
TRITON_DIR_VAR = "TRITON_CACHE_DIR"  # read by Triton at each compile (triton_cache_dir)
FX_GRAPH_VAR = "TORCHINDUCTOR_FX_GRAPH_CACHE"  # read once, at import of torch._inductor.config
AUTOGRAD_VAR = "TORCHINDUCTOR_AUTOGRAD_CACHE"  # read once, at import of torch._functorch.config
TRITON_SUBDIR = "triton"
# every variable this module sets, so a caller can tell a cache setting from other environment
CACHE_VARS = (CACHE_DIR_VAR, TRITON_DIR_VAR, FX_GRAPH_VAR, AUTOGRAD_VAR)


def cache_env(setting: str) -> dict[str, str]:
    """The environment a process must start with for `setting` (module docstring): empty for
    torch's default; for "off" both caches disabled (the private folder is the process's own,
    made by `use_compile_cache`); for a folder, that folder (absolute) with both caches on."""
    if setting == "":
        return {}
    if setting == OFF:
        return {FX_GRAPH_VAR: "0", AUTOGRAD_VAR: "0"}
    folder = Path(setting).expanduser().resolve()
    return {
        CACHE_DIR_VAR: str(folder),
        TRITON_DIR_VAR: str(folder / TRITON_SUBDIR),
        FX_GRAPH_VAR: "1",
        AUTOGRAD_VAR: "1",
    }


def use_compile_cache(setting: str) -> str | None:
    """Point this process's compiles at `setting`'s folder before the first one; the folder used
    (None: torch's default). With "off", a private empty folder removed at exit."""
    check_compile_cache(setting)
    env = cache_env(setting)
    if setting == OFF:
        private = tempfile.mkdtemp(prefix="compile-cache-off-")
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        env = {**env, CACHE_DIR_VAR: private, TRITON_DIR_VAR: str(Path(private) / TRITON_SUBDIR)}
    os.environ.update(env)
    if setting:
        _set_loaded_config(enabled=setting != OFF)
    folder = env.get(CACHE_DIR_VAR)
    if folder:
        Path(folder).mkdir(mode=0o755, parents=True, exist_ok=True)  # never writable by others
    log.debug("torch.compile cache: %s", folder or "torch's default")
    return folder


def _set_loaded_config(*, enabled: bool) -> None:
    """The two cache switches in torch's config modules, where already imported (a process not
    started with `cache_env`; for one that was, this agrees with what torch read)."""
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.fx_graph_cache = enabled
    functorch = sys.modules.get("torch._functorch.config")
    if functorch is not None:
        functorch.enable_autograd_cache = enabled


def cache_failure(exc: BaseException, setting: str) -> str | None:
    """One line when `exc` failed inside a file of the compile cache `setting` names (a module
    torch loaded from it, cut short or garbled), else None: what failed (the deepest error with
    such a frame), the file, how to clear the cache. Only a traceback frame in the cache folder
    counts as evidence."""
    if setting in ("", OFF):
        return None
    folder = Path(setting).expanduser().resolve()
    found: tuple[BaseException, Path] | None = None
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and not any(e is s for s in seen):
        seen.append(e)
        tb = e.__traceback__
        while tb is not None:
            path = Path(tb.tb_frame.f_code.co_filename)
            if path.is_absolute() and folder in path.parents:
                found = (e, path)  # a later (deeper) error in the chain wins
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    if found is None:
        return None
    error, path = found
    first = (str(error).splitlines() or [""])[0]
    return (
        f"torch.compile failed loading {path} from the compile cache {folder} "
        f"({type(error).__name__}: {first}): the cache is damaged; clear it (rm -rf {folder}) and "
        "run the same command again, or run with runtime.compile_cache=off"
    )
