"""The `next:` lines' evidence (train/core/evidence.py `judge_fix`, which the sweep's
report and `python -m train.explain --result` share): a table over planted
studies, one row per case the README promises, and the glue that reads a real study."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution as Cat
from optuna.trial import TrialState

from sweeper.report.story import next_step_evidence
from tests.train.test_verdict import BASE, fracs, make
from train.core.diagnosis import diagnose
from train.core.diagnosis_text import evidence_text, fix_text, override_text
from train.core.evidence import SearchRun, judge_fix

WINNER = {"runtime.dtype": "fp32", "batch.micro_batch": 8, "runtime.compile": "none"}


def run(number: int, state: str, tps: float | None, **changed) -> SearchRun:
    """A search trial at the winner's settings with `changed` knobs (dots as double underscores)."""
    params = {**WINNER, **{k.replace("__", "."): v for k, v in changed.items()}}
    return SearchRun(number=number, params=params, state=state, tokens_per_s=tps)


# The winner: trial 0, 15,000 tokens/s in its search run, verified at 14,000 (median).
WIN = run(0, "complete", 15000.0)
WIN_VERIFIED = {0: [13800.0, 14000.0, 14500.0]}


def measured_basis(changes: dict, **kw) -> str | None:
    """What the `next:` line says of a fix setting `changes`; None: no next step."""
    measured = judge_fix(changes, **kw)
    return None if measured is None else evidence_text(measured)


# Two fast bf16 search runs, each changing a second knob too (neither is at the winner's other
# settings); two cases below race them with different results.
AT_OTHER_SETTINGS = (
    run(6, "complete", 30000.0, runtime__dtype="bf16", batch__micro_batch=16),
    run(7, "complete", 25000.0, runtime__dtype="bf16", runtime__compile="default"),
)

# (planted trials besides the winner, planted race results besides the winner's, the suggestion's
#  changes, the expected basis: None = no next step, else the line's evidence)
CASES = {
    "the winner already has it": ([], {}, {"runtime.dtype": "fp32"}, None),
    "not a searched knob": ([], {}, {"data.num_workers": 2}, "not searched in this sweep"),
    "an action, no override": ([], {}, {}, "not searched in this sweep"),
    # issue 25: the search run beat the winner's verified median by 1.14x, but the race measured
    # the config and dropped it: the race has the last word
    "raced at the winner's settings, search run faster": (
        [run(5, "complete", 16000.0, batch__micro_batch=16)],
        {5: [12000.0, 12500.0]},
        {"batch.micro_batch": 16, "batch.grad_accum": 4},
        None,
    ),
    "raced at the winner's settings, verified faster but lost the race (equivalent)": (
        [run(5, "complete", 15000.0, batch__micro_batch=16)],
        {5: [14100.0, 14200.0]},
        {"batch.micro_batch": 16},
        None,
    ),
    "pruned at the winner's settings, its running figure high": (
        [run(3, "pruned", 90000.0, runtime__dtype="bf16")],
        {},
        {"runtime.dtype": "bf16"},
        None,
    ),
    "a search run at the winner's settings slower": (
        [run(2, "complete", 1000.0, runtime__dtype="bf16")],
        {},
        {"runtime.dtype": "bf16"},
        None,
    ),
    "a search run at the winner's settings within the noise floor": (
        [run(2, "complete", 15100.0, runtime__compile="default")],
        {},
        {"runtime.compile": "default"},
        None,
    ),
    "two search runs at the winner's settings, one no faster": (
        [
            run(2, "complete", 17000.0, runtime__compile="default"),
            run(4, "complete", 14900.0, runtime__compile="default"),
        ],
        {},
        {"runtime.compile": "default"},
        None,
    ),
    # judged against the winner's search run (like with like), never its verified median
    "a faster search run at the winner's settings, not raced": (
        [run(2, "complete", 16500.0, runtime__compile="default")],
        {},
        {"runtime.compile": "default"},
        "measured at the winner's other settings: 16,500 tokens/s in the search run of trial 2, "
        "1.10x the winner's search run; not verified",
    ),
    "verified only at other settings: the verified median, not the search run": (
        AT_OTHER_SETTINGS,
        {6: [20000.0, 21000.0, 22000.0]},
        {"runtime.dtype": "bf16"},
        "not measured at the winner's settings; at other settings trial 6 verified 21,000 "
        "tokens/s (median, real full steps)",
    ),
    # issue 35: the race measured the value slower than the winner, though at other settings
    "raced only at other settings, verified slower than the winner": (
        [run(6, "complete", 30000.0, runtime__dtype="bf16", batch__micro_batch=16)],
        {6: [12000.0, 13000.0, 13900.0]},
        {"runtime.dtype": "bf16"},
        None,
    ),
    "raced only at other settings, one verified slower and one faster": (
        AT_OTHER_SETTINGS,
        {6: [12000.0], 7: [14500.0]},
        {"runtime.dtype": "bf16"},
        "not measured at the winner's settings; at other settings trial 7 verified 14,500 "
        "tokens/s (median, real full steps)",
    ),
    "searched only at other settings: the best complete run, never a pruned one": (
        [
            run(6, "complete", 9000.0, runtime__dtype="bf16", batch__micro_batch=16),
            run(7, "pruned", 40000.0, runtime__dtype="bf16", runtime__compile="default"),
        ],
        {},
        {"runtime.dtype": "bf16"},
        "not measured at the winner's settings; at other settings its best complete search run "
        "was 9,000 tokens/s (trial 6)",
    ),
    "only pruned at other settings": (
        [run(7, "pruned", 40000.0, runtime__dtype="bf16", runtime__compile="default")],
        {},
        {"runtime.dtype": "bf16"},
        "not measured at the winner's settings; at other settings only in pruned trials "
        "(stopped early: no full figure)",
    ),
    "a failed trial is no evidence": (
        [run(8, "fail", None, runtime__dtype="bf16")],
        {},
        {"runtime.dtype": "bf16"},
        "not measured in this sweep",
    ),
    "a searched value never tried": (
        [run(2, "complete", 1000.0, runtime__compile="default")],
        {},
        {"runtime.dtype": "bf16"},
        "not measured in this sweep",
    ),
    "an unsearched knob beside a searched one is ignored": (
        [run(2, "complete", 10000.0, batch__micro_batch=64)],
        {},
        {"batch.micro_batch": 64, "batch.grad_accum": 1},
        None,
    ),
}


@pytest.mark.parametrize(("others", "raced", "suggestion", "expected"), CASES.values(), ids=CASES)
def test_next_step_evidence_table(others, raced, suggestion, expected) -> None:
    got = measured_basis(
        suggestion,
        runs=[WIN, *others],
        verified={**WIN_VERIFIED, **raced},
        winner=0,
        noise_floor=0.01,
    )
    assert got == expected


def test_a_pruned_running_figure_is_never_quoted() -> None:
    others = [
        run(7, "pruned", 43210.0, runtime__dtype="bf16", runtime__compile="default"),
        run(9, "pruned", 43210.0, runtime__dtype="bf16", batch__micro_batch=16),
    ]
    for suggestion in (
        {"runtime.dtype": "bf16"},
        {"runtime.compile": "default"},
        {"batch.micro_batch": 16},
    ):
        got = measured_basis(
            suggestion, runs=[WIN, *others], verified=WIN_VERIFIED, winner=0, noise_floor=0.01
        )
        assert got is None or "43,210" not in got


def test_the_winner_without_a_search_figure_is_never_compared_to_a_verified_median() -> None:
    win = SearchRun(number=0, params=WIN.params, state="complete", tokens_per_s=None)
    got = measured_basis(
        {"runtime.compile": "default"},
        runs=[win, run(2, "complete", 16500.0, runtime__compile="default")],
        verified=WIN_VERIFIED,
        winner=0,
        noise_floor=0.01,
    )
    assert got == (
        "measured at the winner's other settings: 16,500 tokens/s in the search run of trial 2; "
        "not verified"
    )


def test_next_step_evidence_reads_a_study_and_the_race() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {"runtime.dtype": Cat(["fp32", "bf16"]), "batch.micro_batch": Cat([8, 16])}
    study = optuna.create_study(direction="maximize")
    for dtype, mb, tps, state in (
        ("fp32", 8, 15000.0, TrialState.COMPLETE),
        ("bf16", 8, 30000.0, TrialState.PRUNED),
        ("fp32", 16, None, TrialState.FAIL),
    ):
        study.enqueue_trial({"runtime.dtype": dtype, "batch.micro_batch": mb})
        trial = study.ask(dists)
        if tps is not None:
            trial.set_user_attr("metrics", {"tokens_per_s": tps})
        study.tell(trial, tps if state == TrialState.COMPLETE else None, state=state)
    # a race result per round; a failed round is None, an all-failed candidate has no evidence
    runs, verified = next_step_evidence(study, {0: [{"tokens_per_s": 14000.0}, None], 2: [None]})
    assert [(r.number, r.state, r.tokens_per_s) for r in runs] == [
        (0, "complete", 15000.0),
        (1, "pruned", 30000.0),
        (2, "fail", None),
    ]
    assert runs[1].params == {"runtime.dtype": "bf16", "batch.micro_batch": 8}
    assert verified == {0: [14000.0]}
    assert (
        measured_basis(
            {"runtime.dtype": "bf16"}, runs=runs, verified=verified, winner=0, noise_floor=0.01
        )
        is None
    )  # pruned at the winner's settings


# One planted result per verdict with fixes (tests/train/test_verdict.py's GPT-2 124M step on an
# H100), and an XL that recomputes every block in fp32: the recompute, float8 and FA3 levers too.
VERDICT_RESULTS = {
    "data-bound": make(time_frac=fracs(compute=0.55, data_wait=0.4, optimizer=0.05)),
    "checkpoint-bound": make(time_frac=fracs(compute=0.45, checkpoint=0.5, optimizer=0.05)),
    "compile-dominated": make(
        **{"compile_s": 30.0, "config.runtime.compile": "default", "config.train.max_steps": 20}
    ),
    "host-bound": make(
        **{
            "tokens_per_step": 64 * 8,
            "tokens_per_s": 512 / 0.05,
            "step_time_s": {**BASE["step_time_s"], "mean": 0.05, "p50": 0.05},
            "config.batch": {"micro_batch": 1, "grad_accum": 8},
            "device_samples": {"n": 50, "sm_util_pct": {"mean": 30.0}},
        }
    ),
    "compute-bound": make(
        **{
            "device.dtype": "fp32",
            "config.runtime.tf32": False,
            "config.model": {
                "n_layer": 48,
                "n_embd": 1600,
                "block_size": 1024,
                "vocab_size": 50304,
            },
            "config.runtime.activation_checkpointing": "every",
        }
    ),
}


@pytest.mark.parametrize("verdict", VERDICT_RESULTS)
def test_a_fix_carries_its_decision_as_data_and_says_it(verdict: str) -> None:
    """`changes` is what the sweep judges; the label a reader sees names each of them as the
    command line writes it, and an action that sets no key carries none."""
    d = diagnose(VERDICT_RESULTS[verdict])
    assert d.verdict == verdict
    assert any(f.changes for f in d.fixes)
    for f in d.fixes:
        for key, value in f.changes.items():
            assert override_text({key: value}) in fix_text(f), f
        if f.changes and "(" not in fix_text(f) and " and " not in fix_text(f):
            assert fix_text(f) == override_text(f.changes)


def test_the_sweep_judges_a_fix_by_its_changes_not_its_label() -> None:
    """An action whose words hold `key=value` is not searched, whatever its label says."""
    fixes = diagnose(VERDICT_RESULTS["compute-bound"]).fixes
    assert {"runtime.float8": "tensorwise", "runtime.dtype": "bf16"} in [f.changes for f in fixes]
    assert (
        measured_basis({}, runs=[WIN], verified=WIN_VERIFIED, winner=0, noise_floor=0.01)
        == "not searched in this sweep"
    )
    bf16 = next(f for f in fixes if f.changes == {"runtime.dtype": "bf16"})
    assert (
        measured_basis(
            bf16.changes,
            runs=[WIN, run(2, "complete", 1000.0, runtime__dtype="bf16")],
            verified=WIN_VERIFIED,
            winner=0,
            noise_floor=0.01,
        )
        is None
    )


def test_the_story_and_explain_say_a_judged_fix_in_the_same_words(caplog) -> None:
    """The sweep's `next:` lines and explain's `fix:` lines come from one renderer: a fix judged by
    the study reads the same in both, evidence after its basis."""
    import logging

    from sweeper.report.story import tell_story
    from sweeper.tracking.protocol import NullTracker
    from sweeper.verify.stage import Verification, Winner
    from sweeper.verify.winner import Candidate, pick_winner
    from train.core.diagnosis_text import basis_text, headline_text
    from train.explain.sweep_dir import judged

    study = optuna.create_study(direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"runtime.compile": "none"},
            distributions={"runtime.compile": Cat(["none", "max-autotune"])},
            value=15000.0,
            user_attrs={"metrics": {"tokens_per_s": 15000.0}},
        )
    )
    won = Candidate(key="a", params={}, overrides=[], values=[1.0], simplicity=0)
    winner = Winner(
        number=0,
        trial=study.trials[0],
        candidate=won,
        verdict=pick_winner([won], direction="maximize"),
        results=[BASE],
    )
    verification = Verification(rows=[], results={0: [BASE]}, winner=winner)
    with caplog.at_level(logging.INFO, logger="sweeper.report.record"):
        tell_story(study, verification, baseline=None, planned_steps=1000, tracker=NullTracker())
    said = [r.getMessage() for r in caplog.records if r.name == "sweeper.report.record"]
    d = diagnose(BASE, planned_steps=1000)
    assert said[1].endswith(f"; {headline_text(d)}")
    runs, verified = next_step_evidence(study, verification.results)
    kept, _ = judged(
        d, lambda c: judge_fix(c, runs=runs, verified=verified, winner=0, noise_floor=0.01)
    )
    steps = [s for s in said if s.startswith("  next: ")]
    assert steps == [
        f"  next: {fix_text(f)}: up to {f.expected_gain:.2f}x ({basis_text(f)})"
        for f in kept.fixes[:3]
    ]
    assert steps[0] == (
        "  next: runtime.compile=default: up to 1.42x (compute phase at 67% of the matmul "
        "ceiling; reaching it gives this bound; not measured in this sweep)"
    )
