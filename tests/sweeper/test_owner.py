"""sweeper/study/owner.py: whether the sweep process named by a `host:pid` tag still runs."""

from __future__ import annotations

import os
import socket

import pytest

from sweeper.study.owner import owner_alive, owner_tag
from tests.servers import dead_pid


def test_owner_tag_names_this_process() -> None:
    assert owner_tag() == f"{socket.gethostname()}:{os.getpid()}"


@pytest.mark.parametrize(
    ("owner", "alive"),
    [
        (lambda host: f"{host}:{os.getppid()}", True),  # a live process on this host
        (lambda host: f"{host}:{dead_pid()}", False),  # it exited
        (lambda host: f"{host}:{os.getpid()}", None),  # this process, or a reused pid
        (lambda host: f"another-host:{dead_pid()}", None),  # cannot be checked from here
        (lambda host: f"{host}:abc", None),
        (lambda host: f"{host}:0", None),
        (lambda host: f"{host}:", None),
        (lambda host: host, None),
        (lambda host: "", None),
        (lambda host: None, None),
    ],
    ids=[
        "live",
        "dead",
        "own-pid",
        "other-host",
        "pid-not-a-number",
        "pid-zero",
        "no-pid",
        "no-colon",
        "empty",
        "none",
    ],
)
def test_owner_alive(owner, alive) -> None:
    assert owner_alive(owner(socket.gethostname())) is alive
