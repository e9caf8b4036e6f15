"""How a trial process starts: forked from a preloaded zygote, or a fresh `exec`.

`python -m train.trial` spends seconds importing torch and the trainer before its first step; a
sweep of short trials pays that once per trial. `Zygote` starts `python -m train.proc.zygote` once,
which imports all of it and forks a trial per request (train/proc/zygote.py), and hands back a
`ForkedProcess` that the runner drives exactly like a `subprocess.Popen`: `pid` (also the process
group, since the child runs in its own session), `wait(timeout)`, `poll()`, `returncode`.

A trial is forked only when forking cannot change what it measures or how it ends: the command is
this interpreter's `-m train.trial`, the environment is the one the zygote was started with, the
platform is Linux, and the caller is the main thread (a trial's parent-death signal follows the
thread that started the zygote, so that thread must live as long as the sweep). Anything else
execs a fresh process, as does every trial once the zygote has failed.

Deliberately light: no torch here; the zygote imports it in its own process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from train.core.rules import STORAGE_ENV

log = logging.getLogger(__name__)

TRIAL_MODULE = "train.trial"
READY_TIMEOUT_S = 120.0  # the zygote's imports; generous for a loaded machine
_START_TIMEOUT_S = 30.0  # a fork takes milliseconds; this only bounds a wedged zygote
# set for every trial (the runner's; the study's storage URL when it holds a secret, which the
# search sets after the zygote started), so it never disqualifies the zygote's environment: the
# forked child takes the trial's whole environment
_PER_TRIAL_ENV = ("PYTHONUNBUFFERED", STORAGE_ENV)


class ForkedProcess:
    """A zygote's child, with the parts of `subprocess.Popen` the runner uses."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _set_exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        assert self.returncode is not None
        return self.returncode


class ZygoteError(RuntimeError):
    """The zygote could not start or stopped answering; the caller execs instead."""


class Zygote:
    """One preloaded `python -m train.proc.zygote` and the children it forked for us."""

    def __init__(self, *, python: str, env: dict[str, str], stderr_path: Path | None = None):
        self.python = python
        self.env = dict(env)
        self._lock = threading.Lock()  # one request/reply exchange at a time
        self._children: dict[int, ForkedProcess] = {}  # running
        self._unclaimed: dict[int, ForkedProcess] = {}  # started, not yet handed out by spawn()
        self._started: list[int] = []
        self._pending_args: list[str] = []  # argv of the request in flight (for TimeoutExpired)
        self._started_cv = threading.Condition()
        self._stderr = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [python, "-m", "train.proc.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**self.env, "ZYGOTE_PARENT_PID": str(os.getpid())},
            start_new_session=True,  # Ctrl-C at the terminal is the sweep's, not the zygote's
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in: IO[bytes] = self._proc.stdin
        self._ready = threading.Event()
        self._dead = threading.Event()
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()
        # not waiting for "ready" here: the imports overlap whatever the sweep does meanwhile

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        ready = self._ready.wait(timeout_s)
        if self._dead.is_set():
            raise ZygoteError(f"the trial zygote (pid {self.pid}) has exited")
        if not ready:
            raise ZygoteError(
                f"train.proc.zygote (pid {self.pid}) did not become ready in {timeout_s:.0f} s"
            )

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return not self._dead.is_set()

    def died(self, *, timeout_s: float) -> bool:
        """Whether the zygote's process has gone, waiting up to `timeout_s` for its reader to
        see the end of its replies."""
        return self._dead.wait(timeout_s)

    def exit_cause(self) -> str:
        """How the zygote's process ended, in a few words ("killed by SIGKILL", "exit code 1")."""
        code = self._proc.poll()
        if code is None:
            return "its replies stopped"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def _read(self) -> None:
        assert self._proc.stdout is not None
        try:
            for raw in self._proc.stdout:
                message = json.loads(raw)
                if "ready" in message:
                    log.info(
                        "trial zygote ready (pid %d): trials fork from a preloaded torch", self.pid
                    )
                    self._ready.set()
                elif "started" in message:
                    # registered here, before this thread can read the same child's exit
                    pid = int(message["started"])
                    child = ForkedProcess(pid, self._pending_args)
                    self._children[pid] = self._unclaimed[pid] = child
                    with self._started_cv:
                        self._started.append(pid)
                        self._started_cv.notify_all()
                elif "exited" in message:
                    child = self._children.pop(int(message["exited"]), None)
                    if child is not None:
                        child._set_exit(int(message["returncode"]))
        except (ValueError, OSError) as exc:
            log.error("lost the trial zygote's replies: %s", exc)
        finally:
            self._dead.set()
            self._ready.set()  # wake a waiter; `_dead` tells it why
            with self._started_cv:
                self._started_cv.notify_all()
            # Children die with the zygote (their death signal); report them as killed.
            for child in list(self._children.values()):
                child._set_exit(-signal.SIGKILL)
            self._children.clear()

    def accepts(self, argv: list[str], env: dict[str, str]) -> bool:
        """Whether forking would run exactly what exec would."""
        if argv[:3] != [self.python, "-m", TRIAL_MODULE]:
            return False
        drop = set(_PER_TRIAL_ENV)
        mine = {k: v for k, v in self.env.items() if k not in drop}
        theirs = {k: v for k, v in env.items() if k not in drop}
        return mine == theirs

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: Path | None, log_path: Path):
        """Fork `argv` (this interpreter's `-m train.trial ...`) with stdout+stderr to
        `log_path`; returns its ForkedProcess."""
        self.wait_ready()
        request = {
            "argv": argv[3:],
            "env": env,
            "cwd": str(cwd) if cwd is not None else os.getcwd(),
            "log": str(log_path),
        }
        with self._lock:
            self._pending_args = list(argv)
            with self._started_cv:
                self._started.clear()
            try:
                self._in.write((json.dumps(request) + "\n").encode())
                self._in.flush()
            except OSError as exc:
                raise ZygoteError(f"the trial zygote stopped reading: {exc}") from exc
            with self._started_cv:
                if not self._started_cv.wait_for(
                    lambda: self._started or self._dead.is_set(), _START_TIMEOUT_S
                ):
                    raise ZygoteError(f"the trial zygote did not fork in {_START_TIMEOUT_S:.0f} s")
                if not self._started:
                    raise ZygoteError("the trial zygote exited before it forked")
                pid = self._started.pop(0)
            # claimed here even if its exit was read already (then it is finished, not lost)
            return self._unclaimed.pop(pid)

    def close(self) -> None:
        """Stop accepting work; the zygote exits on EOF (running children are the caller's)."""
        with contextlib.suppress(OSError):
            self._in.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if not isinstance(self._stderr, int):
            self._stderr.close()


# ---------------------------------------------------------------------------------------------
# the per-process zygote the runner uses

_ZYGOTE: Zygote | None = None
_FAILED = False
_RESTARTED = False  # a zygote that died from outside is restarted once per sweep, no more
_GUARD = threading.Lock()


def fork_enabled() -> bool:
    """Trials fork from a zygote unless THROUGHPUT_SWEEP_FORK=0 (then every trial execs)."""
    return os.environ.get("THROUGHPUT_SWEEP_FORK", "1") != "0" and sys.platform == "linux"


def _ensure_zygote(*, python: str, env: dict[str, str], stderr_path: Path) -> Zygote | None:
    """This process's zygote, started on first use; None where trials do not fork (disabled,
    not the main thread, or a zygote already failed us)."""
    global _ZYGOTE, _FAILED, _RESTARTED
    if not fork_enabled() or threading.current_thread() is not threading.main_thread():
        return None
    with _GUARD:
        if _ZYGOTE is not None and not _ZYGOTE.alive:
            dead, _ZYGOTE = _ZYGOTE, None
            if _RESTARTED:
                log.warning(
                    "the trial zygote (pid %d) died again (%s); starting trials with "
                    "exec from now on",
                    dead.pid,
                    dead.exit_cause(),
                )
                _FAILED = True
            else:
                _RESTARTED = True
                _ZYGOTE = _restart(dead, python=python, env=env, stderr_path=stderr_path)
                _FAILED = _ZYGOTE is None
        if _ZYGOTE is None and not _FAILED:
            try:
                _ZYGOTE = Zygote(python=python, env=env, stderr_path=stderr_path)
            except OSError as exc:
                log.warning("no trial zygote (%s); starting trials with exec", exc)
                _FAILED = True
        return _ZYGOTE


def _restart(dead: Zygote, *, python: str, env: dict[str, str], stderr_path: Path) -> Zygote | None:
    """A new zygote in place of one that died from outside (its trials were recorded as killed
    with the signal), said in one line; None (exec from now on) when it cannot start."""
    try:
        fresh = Zygote(python=python, env=env, stderr_path=stderr_path)
    except OSError as exc:
        log.warning(
            "the trial zygote (pid %d) died (%s) and could not be restarted (%s); "
            "starting trials with exec",
            dead.pid,
            dead.exit_cause(),
            exc,
        )
        return None
    log.warning(
        "the trial zygote (pid %d) died (%s), its running trials recorded as killed; "
        "restarted it once (pid %d)",
        dead.pid,
        dead.exit_cause(),
        fresh.pid,
    )
    return fresh


def _zygote_for(argv: list[str], env: dict[str, str], stderr_path: Path) -> Zygote | None:
    if argv[1:3] != ["-m", TRIAL_MODULE]:
        return None
    zygote = _ensure_zygote(python=argv[0], env=env, stderr_path=stderr_path)
    return zygote if zygote is not None and zygote.accepts(argv, env) else None


def _give_up() -> None:
    """Close a zygote that failed us and exec every later trial."""
    global _ZYGOTE, _FAILED
    with _GUARD:
        zygote, _ZYGOTE, _FAILED = _ZYGOTE, None, True
    if zygote is not None:
        zygote.close()


def prestart(*, python: str, env: dict[str, str], stderr_path: Path) -> None:
    """Start the zygote now, so its imports overlap the sweep's own start (the device probe,
    the study); the first trial then forks at once. A no-op where trials would not fork."""
    _ensure_zygote(python=python, env=env, stderr_path=stderr_path)


def start_trial_process(
    argv: list[str], *, env: dict[str, str], cwd: Path | None, log_path: Path, preexec_fn
) -> subprocess.Popen | ForkedProcess:
    """Start `argv` in its own session with stdout+stderr to `log_path`: forked from the zygote
    where that is exactly equivalent, else exec'd (with `preexec_fn`, the parent-death signal)."""
    for _ in range(2):  # a zygote found dead at this fork is restarted once (_ensure_zygote)
        zygote = _zygote_for(argv, env, log_path.parent.parent / "zygote.log")
        if zygote is None:
            break
        try:
            return zygote.spawn(argv, env=env, cwd=cwd, log_path=log_path)
        except ZygoteError as exc:
            if zygote.died(timeout_s=2.0) and not _RESTARTED:
                continue  # killed from outside: the next pass starts its replacement
            log.warning("%s; starting trials with exec from now on", exc)
            _give_up()
            break
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


@atexit.register
def shutdown() -> None:
    """Close the zygote (at exit, and in tests)."""
    global _ZYGOTE, _FAILED
    with _GUARD:
        if _ZYGOTE is not None:
            _ZYGOTE.close()
        _ZYGOTE, _FAILED, _RESTARTED = None, False, False
