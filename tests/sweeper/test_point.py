"""Point: a search-space point as one typed, read-only value (sweeper/space/point.py)."""

from __future__ import annotations

import dataclasses

import pytest

from sweeper.space.constraints import SpaceContext
from sweeper.space.fit import nearest_fit
from sweeper.space.point import Point
from sweeper.space.search_space import parse_space
from train.core import keys

P = Point(knobs={"batch.micro_batch": 4, "runtime.compile": "none", "runtime.dtype": "fp32"})


@pytest.mark.parametrize(
    ("point", "key", "value", "want"),
    [
        # an existing knob keeps its place; a new one goes last
        (P, "runtime.compile", "default", [*P]),
        (P, "model.n_layer", 2, [*P, "model.n_layer"]),
        (Point(), "batch.micro_batch", 8, ["batch.micro_batch"]),
    ],
)
def test_with_knob_is_a_new_point(point, key, value, want):
    before = point.as_dict()
    changed = point.with_knob(key, value)
    assert list(changed) == want
    assert changed[key] == value
    assert point.as_dict() == before  # the old point is unchanged


@pytest.mark.parametrize(
    ("knobs", "want"),
    [
        ({"batch.micro_batch": 4}, ["batch.micro_batch=4"]),
        ({"runtime.compile": "max-autotune"}, ["runtime.compile=max-autotune"]),
        ({"runtime.float8": None}, ["runtime.float8=null"]),
        ({"runtime.dtype": "true"}, ["runtime.dtype='true'"]),  # a string that reads back as one
        ({}, []),
    ],
)
def test_overrides(knobs, want):
    assert Point(knobs=knobs).overrides() == want


@pytest.mark.parametrize(
    ("point", "key", "default", "want"),
    [
        (P, "batch.micro_batch", None, 4),
        (P, "model.n_layer", None, None),
        (P, "model.n_layer", 2, 2),
    ],
)
def test_get(point, key, default, want):
    assert point.get(key, default) == want


def test_read_only_and_equal_to_its_knobs():
    knobs = {"batch.micro_batch": 4}
    point = Point(knobs=knobs)
    knobs["batch.micro_batch"] = 8  # the caller's dict is copied, not shared
    assert point == {"batch.micro_batch": 4} and point.as_dict() == {"batch.micro_batch": 4}
    with pytest.raises(TypeError):
        point.knobs["batch.micro_batch"] = 8  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.knobs = {}  # type: ignore[misc]
    assert point.over({"batch.micro_batch": 1, "model.n_layer": 2}) == {
        "batch.micro_batch": 4,
        "model.n_layer": 2,
    }
    assert Point.of(point) is point and Point.of(None) == Point()


def test_space_point_is_typed_and_fit_is_carried():
    ctx = SpaceContext(
        tokens_per_step=64,
        block_size=8,
        base={"batch.micro_batch": 8, "batch.grad_accum": 1, "model.block_size": 8},
    )
    space = parse_space({"batch.micro_batch": "choice(2,4,8)"}, ctx)
    point = space.point({"batch.micro_batch": 2})
    assert isinstance(point, Point)
    assert point.as_dict() == {"batch.micro_batch": 2, "batch.grad_accum": 4}
    assert space.to_overrides({"batch.micro_batch": 2}) == point.overrides()
    fit = nearest_fit(point, ctx)
    assert fit is not None and isinstance(fit.point, Point) and fit.point == point
    assert point.with_fit(fit).fit is fit and point.with_fit(fit) == point
    assert point.with_fit(fit).with_knob("batch.micro_batch", 4).fit is None


def test_every_key_name_is_a_key_of_the_trainers_schema():
    names = {n: v for n, v in vars(keys).items() if n.isupper() and isinstance(v, str)}
    dotted = {n: v for n, v in names.items() if "." in v}
    assert len(dotted) >= 40 and len(set(dotted.values())) == len(dotted)  # one name a key
    assert set(dotted.values()) <= keys.schema_keys()
