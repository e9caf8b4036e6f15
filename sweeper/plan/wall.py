"""The sweep's predicted wall time, component by component: what the code will run, in order.

    wall = start and end
         + the search: the starting config (when it runs), the prior's points (each priced
           exactly), then TPE's design and picks and the polish step at the space's mean trial,
           and, where no checkpoint knob is searched, the one save the first trial measures
         + the race: its first rounds (verify.repeats) x its entrants, each a fresh process that
           runs real full steps

Each trial's wall is sweeper/space/limits.py's expectation: set-up, compile, warm-up, the window
(ended early where trial.target_ci's interval is reached) and its checkpoint saves. Compile is
counted once per graph: with the sweep-wide compile cache on, the first trial of a graph pays the
cold compile and every later process of that graph (a search trial that differs only in data or
checkpoint knobs, every race run) loads it from the cache, priced by sweeper/forecast/costs.py (a
measured device's cache hit, else a share of the cold compile; a float8 graph, which gets no
AOTAutograd cache entry, at its own measured share). TPE's own picks are not known before they
are made, so they are priced at the mean over the space with a cold compile each (a new graph).
Pure: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeper.forecast import TrialTime, is_float8, uncached_note
from sweeper.forecast.trial import save_seconds
from sweeper.numbers import fmt_secs
from sweeper.plan.calibration import Calibration
from sweeper.plan.prior import Prior
from sweeper.space.constraints import SpaceContext
from sweeper.space.limits import REAL_STEP_KEYS, model_params, point_forecast
from sweeper.space.point import Point
from sweeper.study.budget import verify_reserve
from train.core.compile_graphs import graph_key
from train.core.keys import TRIAL_SAVE_RECORD

SWEEP_OVERHEAD_S = 15.0  # start (imports, probe, zygote) + end (plots, report): README benchmark


def graph_of(config: Mapping[str, Any]) -> str | None:
    """The compiled graph a flat config builds (train/core/compile_graphs.py's key, the one
    the trials' compile record uses); None when eager. The plan's own keys are not knobs."""
    return graph_key({k: v for k, v in config.items() if not k.startswith("plan.")})


@dataclass(frozen=True, kw_only=True)
class PlannedRuns:
    """`count` trial processes of one kind, each taking `each_s` (of which `compile_s`)."""

    label: str
    count: int
    each_s: float
    compile_s: float = 0.0
    window_steps: int = 0  # measured steps of each window (early stop included)
    note: str = ""

    @property
    def total_s(self) -> float:
        return self.count * self.each_s


@dataclass(frozen=True, kw_only=True)
class WallModel:
    """The predicted wall, as the rows the plan prints."""

    search: list[PlannedRuns]
    race: list[PlannedRuns]
    overhead_s: float = SWEEP_OVERHEAD_S
    notes: list[str] = field(default_factory=list)
    # work done once in the sweep besides its trials: the checkpoint save measured once
    once: list[PlannedRuns] = field(default_factory=list)

    @property
    def search_s(self) -> float:
        return sum(r.total_s for r in self.search)

    @property
    def once_s(self) -> float:
        return sum(r.total_s for r in self.once)

    @property
    def race_s(self) -> float:
        return sum(r.total_s for r in self.race)

    @property
    def total_s(self) -> float:
        return self.overhead_s + self.search_s + self.once_s + self.race_s


class _Graphs:
    """Graphs compiled so far: the first process of a graph compiles cold, later ones load it from
    the compile cache (sweeper/forecast/costs.py prices both, float8's own way)."""

    def __init__(self, cached: bool) -> None:
        self.cached, self.seen = cached, set()

    def price(self, config: Mapping[str, Any], cold: TrialTime, warm: TrialTime) -> dict[str, Any]:
        """PlannedRuns' each_s, compile_s and note of a trial expected to take `cold` (its graph
        compiled cold) or `warm` (its graph from the cache): its wall, its compile and how that
        compile is priced."""
        graph = graph_of(config)
        if graph is None or cold.compile_s <= 0:
            return {"each_s": cold.total_s}
        if self.cached and graph in self.seen:
            uncached = uncached_note(float8=is_float8(config))
            how = f"compile from the cache: {uncached}" if uncached else "compile from the cache"
            return {"each_s": warm.total_s, "compile_s": warm.compile_s, "note": how}
        self.seen.add(graph)
        return {"each_s": cold.total_s, "compile_s": cold.compile_s, "note": "cold compile"}


def queued_points(prior: Prior, start: Point | None) -> list[tuple[str, Point]]:
    """The points the search runs before TPE draws any, labelled, in order: the starting config
    (when it runs), then the prior's."""
    first = [("starting config", start)] if start is not None else []
    return first + [(f"prior {i}", p.point) for i, p in enumerate(prior.points, 1)]


def wall_model(
    *,
    ctx: SpaceContext,
    prior: Prior,
    start: Point | None,
    n_search: int,
    mean_trial_s: float,
    race_entrants: int,
    race_rounds: int,
    cached: bool,
    overrides: Mapping[str, Any] | None = None,
    calibration: Calibration | None = None,
) -> WallModel:
    """The wall of a sweep of `n_search` trials: `start` (the starting config's point, when it
    runs) and the prior's points first, the rest (TPE's design and picks, the polish step) at
    `mean_trial_s`, then
    `race_rounds` rounds of `race_entrants` race runs. A point's own forecast is its cold
    price; `overrides` adds keys to every priced config (a calibrated plan.step_cv). With a
    `calibration` (sweeper/plan/calibration.py) every term is this machine's measured one
    instead."""
    if calibration is not None:
        return _calibrated(calibration, n_search=n_search, race_runs=race_entrants * race_rounds)
    extra = dict(overrides or {})
    graphs = _Graphs(cached)

    def expected(point: Point, *, warm: bool = False) -> TrialTime:
        if point.forecast is not None and not warm and not extra:
            return point.forecast
        return point_forecast(point.with_knobs(extra), ctx, warm=warm)

    known = queued_points(prior, start)[:n_search]
    search = [
        _priced_run(label, point, count=1, base=ctx.base, graphs=graphs, expected=expected)
        for label, point in known
    ]
    rest = max(0, n_search - len(known))
    if rest > 0:
        search.append(
            PlannedRuns(
                label="TPE: design, picks, polish (mean of the space)",
                count=rest,
                each_s=mean_trial_s,
                note="a new graph each: cold compile",
            )
        )
    once = []
    if ctx.base.get(TRIAL_SAVE_RECORD) and n_search > 0:
        once.append(
            PlannedRuns(
                label="checkpoint save, measured once after the first trial's window",
                count=1,
                each_s=save_seconds(model_params(ctx.base)),
                note="no checkpoint knob is searched: every other trial prices it",
            )
        )
    race: list[PlannedRuns] = []
    for label, point in (
        _race_entrants(known, rest, prior, start, race_entrants) if race_rounds else []
    ):
        if point:
            graphs.seen.add(graph_of(point.over(ctx.base)))
        name = (
            f"race run of the {label} (real full steps)" if label else "race run (real full steps)"
        )
        race.append(
            _priced_run(
                name,
                point,
                count=race_rounds,
                steps=REAL_STEP_KEYS,
                base=ctx.base,
                graphs=graphs,
                expected=expected,
            )
        )
    return WallModel(search=search, race=_merged(race), once=once)


def _priced_run(
    label: str,
    point: Point,
    *,
    count: int,
    steps: Mapping[str, Any] | None = None,
    base: Mapping[str, Any],
    graphs: _Graphs,
    expected: Callable[..., TrialTime],
) -> PlannedRuns:
    """`count` runs of `point` (with `steps`' keys: a race run's real full steps) at its own
    expected trial, its compile cold or from the cache as `graphs` has seen it."""
    priced = point.with_knobs(steps) if steps else point
    t = expected(priced)
    price = graphs.price(point.over(base), t, expected(priced, warm=True))
    return PlannedRuns(label=label, count=count, window_steps=t.window_steps, **price)


def _race_entrants(
    known: list[tuple[str, Point]],
    rest: int,
    prior: Prior,
    start: Point | None,
    race_entrants: int,
) -> list[tuple[str, Point]]:
    """The race's entrants, labelled: where every search trial is `known` (none `rest`) and all
    of them race, each at its own price; else the starting config (an entrant wherever it runs)
    at its own price and the other runs sized like the likeliest contender (the prior's first
    point, else the start)."""
    if rest == 0 and known and race_entrants == len(known):
        return list(known)
    contender = prior.points[0].point if prior.points else (start or Point())
    if start is not None and race_entrants > 0:
        return [("starting config", start)] + [("", contender)] * (race_entrants - 1)
    return [("", contender)] * race_entrants


def _merged(runs: list[PlannedRuns]) -> list[PlannedRuns]:
    """Identical rows (the same label and price) as one row with their count summed."""
    out: list[PlannedRuns] = []
    for r in runs:
        if out and (out[-1].label, out[-1].each_s, out[-1].note) == (r.label, r.each_s, r.note):
            last = out.pop()
            r = dataclasses.replace(r, count=last.count + r.count)
        out.append(r)
    return out


def _calibrated(c: Calibration, *, n_search: int, race_runs: int) -> WallModel:
    """The same sum with the measured terms: each process at its measured mean wall plus the
    measured time between processes; the race at its measured mean length (at least the first
    rounds' `race_runs`)."""
    runs = max(float(race_runs), c.race_runs)
    note = f"measured: mean of {c.sweeps} earlier sweep(s) here, {c.between_s:.1f} s between runs"
    return WallModel(
        search=[
            PlannedRuns(
                label="search trial (measured mean)",
                count=n_search,
                each_s=c.trial_s + c.between_s,
                note=note,
            )
        ],
        race=[
            PlannedRuns(
                label=f"race run (measured mean; {c.race_runs:.1f} runs a sweep)",
                count=round(runs),
                each_s=c.race_run_s + c.between_s,
                note=note,
            )
        ],
        notes=[
            f"calibrated from {c.sweeps} finished sweep(s) of this model and search on this "
            "machine (sweeper/plan/calibration.py)"
        ],
    )


def budgeted(
    model: WallModel, *, cap_s: float, guard_s: float, race_entrants: int, top_k: int, repeats: int
) -> tuple[float, str]:
    """The wall of `model` under a wall budget of `cap_s`, as sweeper/study/budget.py runs it, and
    a line saying what fits: a search trial starts only while the time spent and the
    verification reserve (budget.py's verify_reserve, at the median trial) leave room; the
    guard's runs (`guard_s`) and the race's first round always run, later rounds only where they
    fit. It may end past the budget: the first round is never cut."""
    run_s = model.race[0].each_s if model.race else 0.0
    trial_walls = [r.each_s for r in model.search for _ in range(r.count)]
    median = statistics.median(trial_walls) if trial_walls else 0.0
    reserve = verify_reserve(
        run_s=max(median, run_s), top_k=top_k, repeats=repeats, max_wall_s=cap_s
    )
    t, ran = 0.0, 0
    for wall in trial_walls:
        if t + reserve >= cap_s:
            break
        t, ran = t + wall, ran + 1
    search_s = t
    t += guard_s + model.once_s
    round_s = race_entrants * run_s
    rounds = 0
    if model.race:
        t, rounds = t + round_s, 1
        wanted = max(1, min(repeats, round(model.race[0].count / max(1, race_entrants))))
        while rounds < wanted and t + round_s <= cap_s:
            t, rounds = t + round_s, rounds + 1
    total = t + model.overhead_s
    line = (
        f"under the {fmt_secs(cap_s)} wall budget: {ran} search trial(s) "
        f"({fmt_secs(search_s)}), the guard's runs {fmt_secs(guard_s)}, {rounds} race "
        f"round(s) of {race_entrants} ({fmt_secs(rounds * round_s)}), "
        f"{fmt_secs(model.overhead_s)} start and end = {fmt_secs(total)}"
    )
    return total, line
