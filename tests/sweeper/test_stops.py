"""sweeper/launch/stops.py: a stop that arrives while a finished trial is recorded is delivered
right after the record, to the handler that was in place."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from sweeper.launch.stops import stops_deferred


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_the_block_is_delivered_after_it(sig) -> None:
    seen: list[str] = []
    previous = signal.signal(sig, lambda *_: seen.append("handler"))
    try:
        with stops_deferred():
            os.kill(os.getpid(), sig)
            for _ in range(10_000):  # bytecodes enough for a pending handler to have run
                pass
            seen.append("block done")
        for _ in range(10_000):
            pass
    finally:
        signal.signal(sig, previous)
    assert seen == ["block done", "handler"]


def test_ctrl_c_during_the_block_interrupts_after_it() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), stops_deferred():
        signal.raise_signal(signal.SIGINT)
        done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_two_stops_are_delivered_once_and_no_stop_delivers_nothing() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, _f: seen.append(s))
    try:
        with stops_deferred():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
        with stops_deferred():
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIGTERM]


def test_outside_the_main_thread_the_block_just_runs() -> None:
    ran: list[bool] = []

    def work() -> None:
        with stops_deferred():
            ran.append(True)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert ran == [True]
