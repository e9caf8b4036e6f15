"""A preloaded process that forks trial processes: `python -m train.proc.zygote`.

Starting `python -m train.trial` costs seconds before the first step (the interpreter, torch,
numpy, hydra and this package, then torch's dynamo on the first attention call: ~5 s on a 2-core
CPU), and a sweep pays it once per trial. The zygote pays it once per sweep: it imports
everything a trial imports, then waits. For each request it forks; the child is a fresh trial
process in every way that matters (its own session and process group, log file, environment and
working directory, a death signal tied to its parent) that skips the imports. What a fork must
not inherit, it cannot: the zygote never runs a torch op (no thread pools started) and never
touches CUDA (a forked CUDA context is unusable), which `main` checks before it serves.

Protocol, one JSON object per line. Requests on stdin:
    {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}   (argv after `python -m train.trial`)
Replies on stdout:
    {"ready": pid}                       once, after the imports
    {"started": pid}                     per request, in request order
    {"exited": pid, "returncode": rc}    when a child is reaped; rc < 0 = killed by signal -rc
The zygote exits when stdin closes, and dies with the process that started it (PR_SET_PDEATHSIG).
Its children die with it the same way, so no trial outlives the sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading

from train.core.deathsig import die_with_parent, libc_prctl

_PRCTL = libc_prctl()
_REAP_POLL_S = 0.05  # how often a quiet zygote checks for exited children


# What a trial imports, heaviest first. The first scaled_dot_product_attention call imports
# dynamo (~2.5 s on a 2-core CPU), eager or not; a compiled trial then imports inductor (~2 s); a
# sweep's trial reports to its Optuna study through an RDB storage (train/core/pruning.py). None of
# these imports starts a thread or touches CUDA.
PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "optuna.storages._rdb.storage",
    # what that storage imports lazily on first use (~0.9 s)
    "optuna.storages._rdb.models",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql",
    "alembic.command",
    "alembic.config",
    "alembic.migration",
    "alembic.script",
    "train.trial.measurement",  # hydra, omegaconf and the whole trainer
)


def preload() -> None:
    """Import what a trial imports, without running any of it."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def forks_poisoned() -> bool:
    """Whether a child forked now would be refused CUDA.

    torch marks every later fork "bad" once this process has asked the CUDA driver anything (a
    device count counts, not only a context): the child's first CUDA call then raises "Cannot
    re-initialize CUDA in forked subprocess". Seen on an H100 (torch 2.11) while the zygote had
    run no torch op and `torch.cuda.is_initialized()` was False. A throwaway child asks torch.
    """
    import torch

    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, running nothing else
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def check_fork_safe() -> None:
    """Refuse to serve from a state a child could not use (the sweep then execs every trial)."""
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("the zygote initialised CUDA; a forked child could not use it")
    extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if extra:
        raise RuntimeError(f"the zygote runs Python threads {extra}; a fork would lose them")
    if forks_poisoned():
        raise RuntimeError(
            "the zygote's imports touched the CUDA driver, so a forked child could not use CUDA"
        )


def _child(request: dict, *, zygote_pid: int, reply_fd: int, session_fd: int) -> None:
    """In the forked child: become a fresh trial process, run it, exit. Never returns."""
    code = 1
    try:
        os.close(reply_fd)  # the zygote's channel; held open here it would hide the zygote's end
        os.setsid()  # own session and process group: the sweep kills the trial as a group
        die_with_parent(zygote_pid, _PRCTL)
        # only now is "kill the group `pid`" sure to reach us: tell the zygote it may say started
        os.write(session_fd, b"s")
        os.close(session_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _fresh_random_state()
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(null_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
        sys.argv = [f"{sys.executable} -m train.trial", *request["argv"]]
        import runpy

        # as under `python -m`: the package's __main__ runs as __main__ (its imports are preloaded)
        runpy.run_module("train.trial", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # a normal interpreter exit: atexit handlers (loggers, DataLoader workers), then flush
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _fresh_random_state() -> None:
    """A fresh interpreter seeds these from the OS; forked children would all share the
    zygote's state, so reseed them the same way."""
    import random

    import numpy as np

    random.seed()
    np.random.seed()


def _reply(out, **message) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _reap(out, children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            _reply(out, exited=pid, returncode=os.waitstatus_to_exitcode(status))


def serve(inp, out) -> None:
    """Fork a child per request line until `inp` closes; report every child's exit."""
    children: set[int] = set()
    buffered = b""
    fd = inp.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], _REAP_POLL_S)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                request = json.loads(line)
                zygote_pid = os.getpid()
                session_r, session_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(session_r)
                    _child(
                        request, zygote_pid=zygote_pid, reply_fd=out.fileno(), session_fd=session_w
                    )
                os.close(session_w)
                # wait for the child's setsid (or its death: then read() returns b"")
                os.read(session_r, 1)
                os.close(session_r)
                children.add(pid)
                _reply(out, started=pid)
        _reap(out, children)
    # stdin closed: the sweep is done with us. Children still running are the sweep's to stop;
    # they die with us anyway (their death signal), so wait for none of them.


def main() -> None:
    parent = int(os.environ.get("ZYGOTE_PARENT_PID", os.getppid()))
    die_with_parent(parent, _PRCTL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle, not ours
    # torch.cuda.is_available() and device_count() ask NVML instead of the CUDA driver, which
    # would poison every fork (forks_poisoned); anything imported below that asks stays harmless
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    preload()
    check_fork_safe()
    out = os.fdopen(os.dup(1), "w")
    # anything else that writes to stdout (a stray print) must not corrupt the protocol
    os.dup2(2, 1)
    _reply(out, ready=os.getpid())
    serve(sys.stdin, out)
    # Nothing to clean up (every reply is flushed); skipping the interpreter's teardown of torch
    # saves the sweep ~2 s at its end.
    os._exit(0)


if __name__ == "__main__":
    main()
