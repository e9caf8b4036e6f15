"""Processes the tests start: a real `mlflow server` (SQLite backend, artifacts proxied by the
server) for the tests that check the UI and REST path and for `scripts/mlflow_screenshot.py`, a free
port, and the pid of a process that has exited.

Use the server from a test module as a module-scoped fixture, so one start (~15 s on 2 cores) serves
the module:

    @pytest.fixture(scope="module")
    def mlflow_uri(tmp_path_factory):
        with running_mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
            yield uri
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Seen ~15 s to /health on a shared 2-core machine; the margin absorbs a busy CI runner.
STARTUP_TIMEOUT_S = 90.0


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it; a tiny race is acceptable here)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_pid() -> int:
    """The pid of a child that has exited and been reaped: no process has it (until the OS reuses
    it, which takes a full cycle of pids)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def server_argv(root: Path, port: int) -> list[str]:
    """`mlflow server` flags for MLflow 3.x: with --serve-artifacts the server owns the artifact
    store (new experiments get `mlflow-artifacts:/`) so artifacts are listable through REST."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--serve-artifacts",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def wait_healthy(uri: str, proc: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"mlflow server not healthy after {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (uvicorn workers included), SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    # Whatever of the group outlived the server process itself.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextmanager
def running_mlflow_server(root: Path) -> Iterator[str]:
    """Start a server storing everything under `root`; yield its http URI; stop it on exit."""
    port = free_port()
    log_path = root / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # The server's background job runner (huey consumers for GenAI jobs) is ~8 more processes
    # that these tests never use; on a 2-core runner they only slow the start.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            server_argv(root, port),
            cwd=root,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() reaches the workers
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(uri, proc, log_path, STARTUP_TIMEOUT_S)
        yield uri
    finally:
        stop(proc)
