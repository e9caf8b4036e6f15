"""Nested dicts (a best.yaml, a trial result) with some values changed, for the tests."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def changed(doc: Mapping[str, Any], changes: Mapping[str, Any]) -> dict:
    """A deep copy of `doc` with each dotted key set to its value, e.g. {"model.n_layer": 2}."""
    out = copy.deepcopy(dict(doc))
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node[part]
        node[leaf] = value
    return out
