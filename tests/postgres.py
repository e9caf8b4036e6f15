"""A throwaway PostgreSQL server for tests: a private cluster in a temporary folder.

initdb + pg_ctl on a free loopback port (127.0.0.1 only, its unix socket in the same folder),
trust authentication (nothing outside this machine can reach it), one database, stopped and deleted
at the end. PostgreSQL refuses to run as root, so under root every server command runs as the
`postgres` OS user (`runuser -u postgres --`) in a folder that user owns.

    @pytest.fixture(scope="module")
    def pg_url():
        with running_postgres() as url:  # skips the test when PostgreSQL is not installed
            yield url
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.servers import free_port

PG_USER = "postgres"  # the OS user that owns the cluster when tests run as root; also the DB role
# Debian/Ubuntu put the server binaries here (`apt-get install postgresql`); $PG_BIN overrides.
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
STARTUP_TIMEOUT_S = 60  # pg_ctl -w -t: a fresh cluster starts in < 1 s; margin for a busy runner
# A test cluster holds nothing worth a crash guarantee: skip the fsyncs (PostgreSQL docs,
# "Non-Durable Settings").
SERVER_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


def pg_bindir() -> Path | None:
    """The folder holding initdb/pg_ctl: $PG_BIN, else the newest Debian install, else $PATH."""
    candidates = [os.environ.get("PG_BIN", "")]
    candidates += sorted(
        Path("/").glob(PG_BIN_GLOB.lstrip("/")),
        key=lambda p: [int(x) for x in p.parent.name.split(".") if x.isdigit()],
        reverse=True,
    )
    for d in candidates:
        if d and (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _as_server_user() -> list[str]:
    """The prefix that runs a server command as a non-root user (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        pytest.skip(f"running as root and there is no {PG_USER!r} OS user to run PostgreSQL as")
    if shutil.which("runuser") is None:
        pytest.skip("running as root and `runuser` is missing (needed to run PostgreSQL as a user)")
    return ["runuser", "-u", PG_USER, "--"]


def _run(argv: list[str], what: str) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed ({out.returncode}): {(out.stdout + out.stderr)[-3000:]}")


def require_postgres() -> Path:
    """The server binaries' folder; skips the calling test when a piece is missing."""
    pytest.importorskip("psycopg2", reason="psycopg2 missing: pip install psycopg2-binary")
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install -y postgresql)")
    _as_server_user()
    return bindir


@contextmanager
def running_postgres(*, database: str = "optuna") -> Iterator[str]:
    """Start a private cluster, create `database`, yield its SQLAlchemy URL, stop and delete it."""
    bindir = require_postgres()
    sudo = _as_server_user()
    # Not pytest's tmp_path: its parents are root-only (0700), and the server user must reach it.
    root = Path(tempfile.mkdtemp(prefix="pg-test-"))
    if sudo:
        shutil.chown(root, user=PG_USER)
    data = root / "data"
    started = False
    try:
        _run(
            [
                *sudo,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                PG_USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            "initdb",
        )
        # The OS picks a free port; another process may take it before the server binds, so retry.
        for attempt in range(3):
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} "
                f"-c unix_socket_directories={root} {SERVER_OPTIONS}"
            )
            start = subprocess.run(
                [
                    *sudo,
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    str(STARTUP_TIMEOUT_S),
                    "-o",
                    options,
                    "start",
                ],
                capture_output=True,
                text=True,
                timeout=STARTUP_TIMEOUT_S + 30,
                check=False,
            )
            started = start.returncode == 0
            if started:
                break
            if attempt == 2:
                log_path = root / "server.log"
                tail = log_path.read_text()[-3000:] if log_path.exists() else ""
                raise RuntimeError(f"pg_ctl start failed: {start.stderr}\n{tail}")
        _run(
            [
                *sudo,
                str(bindir / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                PG_USER,
                database,
            ],
            "createdb",
        )
        yield f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{port}/{database}"
    finally:
        if started:
            with contextlib.suppress(Exception):
                _run(
                    [*sudo, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                    "pg_ctl stop",
                )
        shutil.rmtree(root, ignore_errors=True)
