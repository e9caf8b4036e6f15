"""sweeper/study/marker.py: a marker study is taken once, signed by its holder, and never left
unsigned."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sweeper.study import marker
from sweeper.study.owner import owner_tag


@pytest.fixture
def storage(tmp_path: Path) -> optuna.storages.BaseStorage:
    return optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'm.db'}")


def test_one_holder_signs_and_a_second_take_waits(storage) -> None:
    assert marker.take("s.lock", storage) is not None
    assert marker.holder("s.lock", storage) == owner_tag()
    assert marker.take("s.lock", storage) is None  # held
    marker.release("s.lock", storage)
    assert marker.holder("s.lock", storage) is None
    marker.release("s.lock", storage)  # already gone: nothing
    assert marker.take("s.lock", storage) is not None


def test_a_marker_that_could_not_be_signed_is_not_left_behind(
    storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_tag() -> str:
        raise OSError("hostname unavailable")

    monkeypatch.setattr(marker, "owner_tag", no_tag)
    with pytest.raises(OSError):
        marker.take("s.lock", storage)
    monkeypatch.undo()
    assert marker.take("s.lock", storage) is not None  # free at once, no takeover wait
