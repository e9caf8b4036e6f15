"""Marker studies: a study of its own name as a cross-worker flag (the export claim, the ask lock).

The database refuses a second study of one name, on SQLite and PostgreSQL alike, so creating a
marker study is an atomic "take it if nobody holds it". Its holder signs it with an `owner`
user attribute (`host:pid`, sweeper/study/owner.py) so that others can tell a live holder from a
dead one, and deletes it to let go.
"""

from __future__ import annotations

import contextlib

import optuna
from optuna.exceptions import DuplicatedStudyError

from sweeper.study.optuna_study import quiet_optuna
from sweeper.study.owner import owner_tag

OWNER = "owner"  # the user attribute a holder signs its marker with


def take(name: str, storage: optuna.storages.BaseStorage) -> optuna.Study | None:
    """The marker `name`, created and signed by this process; None where another holds it. A
    marker this process could not sign is deleted before the error propagates: left unsigned,
    others could not tell its holder dead and would wait out their takeover time."""
    try:
        with quiet_optuna():
            marker = optuna.create_study(storage=storage, study_name=name)
    except DuplicatedStudyError:
        return None
    try:
        marker.set_user_attr(OWNER, owner_tag())
    except BaseException:
        release(name, storage)
        raise
    return marker


def holder(name: str, storage: optuna.storages.BaseStorage) -> str | None:
    """Who signed the marker `name`; None where nobody has yet, or it is gone."""
    with contextlib.suppress(KeyError):
        return optuna.load_study(study_name=name, storage=storage).user_attrs.get(OWNER)
    return None


def release(name: str, storage: optuna.storages.BaseStorage) -> None:
    """Delete the marker `name` (nothing where it is already gone)."""
    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=name, storage=storage)
