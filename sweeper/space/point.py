"""A point of the search space as one typed value: the knobs it sets, and where known its fit and
its forecast.

`knobs` maps a dotted trainer key (`batch.micro_batch`) to the value the point sets it to: the
space's fixed keys, the searched ones and the derived `batch.grad_accum`. A Point is a read-only
Mapping of those knobs, so the rules that read a flat config (`check_point`, the memory model, the
limits) read it as they read a dict. It is frozen: a changed knob is a new Point
(`with_knob`), never an edit. It becomes a plain dict only at the edges: Optuna's params, Hydra
overrides, MLflow params and the files written (`as_dict`, `overrides`).

Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sweeper.space.overrides import format_override

if TYPE_CHECKING:
    from sweeper.forecast.trial import TrialTime
    from sweeper.space.fit import Fit


@dataclass(frozen=True, kw_only=True, eq=False)
class Point(Mapping[str, Any]):
    """The knobs one trial sets (dotted trainer key -> value), read-only, in the space's order."""

    knobs: Mapping[str, Any] = field(default_factory=dict)
    # the nearest point like it that fits the device (sweeper/space/fit.py); None: not asked
    fit: Fit | None = None
    # its trial's wall, phase by phase (sweeper/forecast/trial.py); None: not forecast
    forecast: TrialTime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", MappingProxyType(dict(self.knobs)))

    @classmethod
    def of(cls, knobs: Mapping[str, Any] | None = None) -> Point:
        """`knobs` as a Point; a Point is returned as it is (its fit and forecast kept)."""
        if isinstance(knobs, Point):
            return knobs
        return cls(knobs=knobs or {})

    def __getitem__(self, key: str) -> Any:
        return self.knobs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.knobs)

    def __len__(self) -> int:
        return len(self.knobs)

    def __eq__(self, other: object) -> bool:
        """Points are equal when their knobs are (the fit and the forecast follow from them)."""
        if isinstance(other, Mapping):
            return dict(self.knobs) == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a dict, so unhashable like one

    def __repr__(self) -> str:
        return f"Point({dict(self.knobs)!r})"

    def with_knob(self, key: str, value: Any) -> Point:
        """This point with `key` set to `value` (added at the end when the point lacks it); the
        fit and the forecast, which were for the old knobs, are dropped."""
        return Point(knobs={**self.knobs, key: value})

    def with_knobs(self, knobs: Mapping[str, Any]) -> Point:
        """This point with every knob of `knobs` set (see `with_knob`)."""
        return Point(knobs={**self.knobs, **knobs})

    def with_fit(self, fit: Fit | None) -> Point:
        return replace(self, fit=fit)

    def with_forecast(self, forecast: TrialTime | None) -> Point:
        return replace(self, forecast=forecast)

    def over(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The full flat config this point runs: `base` with the point's knobs set over it."""
        return {**base, **self.knobs}

    def overrides(self) -> list[str]:
        """Hydra overrides for a trial's command line, e.g. ["batch.micro_batch=4", ...]."""
        return [format_override(k, v) for k, v in self.knobs.items()]

    def as_dict(self) -> dict[str, Any]:
        """The knobs as a plain dict: Optuna params, MLflow params, YAML and JSON files."""
        return dict(self.knobs)
