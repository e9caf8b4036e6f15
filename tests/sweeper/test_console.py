"""What the console shows and what only the sweep's log file keeps (sweeper/launch/log_routing.py),
the progress line in trial numbers, and the verified table's CV only where n > 1; a console line is
at most 160 characters, a trial names only the knobs that differ from the start, and the verified
table reads in a 100-column terminal. A real sweep's console and log file are read in
tests/integration/test_one_parent.py."""

from __future__ import annotations

import io
import logging
import logging.config
import re
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.launch.batch import job_name, link_job
from sweeper.launch.log_routing import (
    MAX_CONSOLE_WIDTH,
    ConsoleFilter,
    ConsoleFormatter,
    SweepLogHandler,
    add_routes,
    known_warning,
    wrap_lines,
)
from sweeper.report import console as console_module
from sweeper.report.console import (
    SAME_AS_START,
    _cell,
    final_report,
    knob_lines,
    start_lines,
    trial_line,
)
from sweeper.study.eta import estimate


def record(name: str, level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    ("name", "level", "msg", "shown"),
    [
        (
            "hydra._internal.core_plugins.basic_launcher",
            logging.INFO,
            "Launching 1 jobs locally",
            False,
        ),
        ("hydra._internal.core_plugins.basic_launcher", logging.INFO, "\t#2 : search=smoke", False),
        (
            "hydra_plugins.hydra_joblib_launcher._core",
            logging.INFO,
            "Joblib.Parallel(n_jobs=2) is launching 1 jobs",
            False,
        ),
        ("sweeper.launch.job", logging.INFO, "trial in /x/multirun/a/b/2: complete", False),
        ("mlflow.store.db.utils", logging.INFO, "Creating initial MLflow database tables", False),
        ("optuna.storages._rdb.storage", logging.INFO, "A new study created in RDB", False),
        (
            "py.warnings",
            logging.WARNING,
            "/o/_experimental.py:33: ExperimentalWarning: Argument "
            "``heartbeat_interval`` is an experimental feature.",
            False,
        ),
        # the sweep's own lines, and every warning or error, stay on the console
        ("sweeper.plan.prepare", logging.INFO, "trial limits: hard 10m00s", True),
        ("sweeper.verify.race_rounds", logging.INFO, "race round 1: trial 3, trial 0", True),
        ("hydra._internal.core_plugins.basic_launcher", logging.WARNING, "a real problem", True),
        ("mlflow.tracking", logging.ERROR, "the server said no", True),
        ("py.warnings", logging.WARNING, "/x.py:1: DeprecationWarning: going away", True),
        ("hydra_plugins_of_mine", logging.INFO, "not a launcher", True),
    ],
)
def test_console_filter(name: str, level: int, msg: str, shown: bool) -> None:
    assert ConsoleFilter().filter(record(name, level, msg)) is shown


def test_known_warnings_are_named_by_category() -> None:
    assert known_warning("x.py:3: ExperimentalWarning: y")
    assert not known_warning("x.py:3: UserWarning: Experimental in the text only")


def test_the_log_file_waits_for_its_folder(tmp_path: Path) -> None:
    """Lines logged before the sweep dir exists (a refused sweep makes none) wait in memory and
    land in the file, in order, once it does; across the handler objects each reconfiguration
    makes."""
    path = tmp_path / "sweep" / "sweep.log"
    SweepLogHandler(str(path)).emit(record("a", logging.INFO, "first"))
    assert not path.parent.exists()
    path.parent.mkdir()
    SweepLogHandler(str(path)).emit(record("b", logging.WARNING, "second"))
    lines = path.read_text().splitlines()
    assert [ln.rsplit(" - ", 1)[1] for ln in lines] == ["first", "second"]
    assert "[b][WARNING]" in lines[1]


def _hydra_logging():
    """Hydra's own hydra_logging config: one console handler on stdout."""
    return OmegaConf.create(
        {
            "version": 1,
            "formatters": {"simple": {"format": "[%(asctime)s][HYDRA] %(message)s"}},
            "handlers": {
                "console": {
                    "class": "logging.StreamHandler",
                    "formatter": "simple",
                    "stream": "ext://sys.stdout",
                }
            },
            "root": {"level": "INFO", "handlers": ["console"]},
            "disable_existing_loggers": False,
        }
    )


def test_routes_keep_chatter_in_the_file_only(tmp_path: Path) -> None:
    """Hydra's own hydra_logging config, routed: the launcher's line reaches the file only, a
    sweep line both, a captured ExperimentalWarning the file only."""
    cfg = _hydra_logging()
    log_file = tmp_path / "sweep.log"
    add_routes(cfg, log_file)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logging.config.dictConfig(OmegaConf.to_container(cfg))
        stream = io.StringIO()
        console = next(h for h in root.handlers if not isinstance(h, SweepLogHandler))
        console.setStream(stream)
        logging.getLogger("hydra._internal.core_plugins.basic_launcher").info("Launching 1 jobs")
        logging.getLogger("sweeper.engine").info("a sweep line")
        logging.captureWarnings(True)
        from optuna.exceptions import ExperimentalWarning

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("heartbeat is experimental", ExperimentalWarning, stacklevel=1)
    finally:
        logging.captureWarnings(False)
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    shown, kept = stream.getvalue(), log_file.read_text()
    assert "a sweep line" in shown and "a sweep line" in kept
    assert "Launching 1 jobs" not in shown and "Launching 1 jobs" in kept
    assert "ExperimentalWarning" not in shown and "ExperimentalWarning" in kept


def test_job_folders_are_linked_by_trial_number(tmp_path: Path) -> None:
    (tmp_path / "2").mkdir()
    (tmp_path / "7").mkdir()
    link_job(tmp_path, job_name(3), tmp_path / "2")
    link_job(tmp_path, job_name(3, repeat=1), tmp_path / "7")
    assert (tmp_path / "trial-3").resolve() == (tmp_path / "2").resolve()
    assert (tmp_path / "trial-3").readlink() == Path("2")  # relative: the folder can move
    assert (tmp_path / "trial-3-verify-r1").resolve() == (tmp_path / "7").resolve()
    link_job(tmp_path, job_name(3), tmp_path / "7")  # re-pointed, never a second link
    assert (tmp_path / "trial-3").readlink() == Path("7")
    (tmp_path / "trial-9").mkdir()  # a real folder of that name is left alone
    link_job(tmp_path, job_name(9), tmp_path / "2")
    assert not (tmp_path / "trial-9").is_symlink()


ROW = {
    "tokens_per_s": 1000.0,
    "step_time_s": 0.5,
    "mfu_spec": None,
    "mfu_ceiling": 0.2,
    "data_wait_frac": 0.01,
    "params": {},
}


@pytest.mark.parametrize(
    ("cv", "n", "cell"), [(0.0, 1, "-"), (None, 1, "-"), (0.034, 3, "3.4%"), (0.0, 2, "0.0%")]
)
def test_cv_is_shown_only_where_n_is_above_one(cv, n, cell) -> None:
    assert _cell({**ROW, "cv": cv, "n": n}, "cv") == cell


def test_the_trial_line_names_the_trial_and_its_eta(monkeypatch) -> None:
    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=out, width=200))
    eta = estimate(
        trials_left=2,
        trial_walls=[3.0],
        complete_walls=[4.0],
        contenders=3,
        repeats=2,
        max_rounds=0,
        wall_left_s=None,
    )
    trial_line(
        number=3,
        state="pruned",
        params={"batch.micro_batch": 8},
        result={"tokens_per_s": 1234.0, "mfu": {"ceiling": 0.1}, "wall_s": 3.25},
        reason="pruned [at step 6]",
        done=4,
        total=14,
        best=2000.0,
        eta=eta,
    )
    first, second = out.getvalue().splitlines()
    assert first.startswith("trial   3 pruned") and "in 3.2 s  micro_batch=8" in first
    assert "(pruned [at step 6])" in first  # brackets are text, not markup
    assert second.strip().startswith("[######..............] 4/14")
    assert second.endswith("eta 30s (2 trial(s) x 3.0 s + race ~6 runs x 4.0 s)")


@pytest.mark.parametrize(
    ("n", "cv", "said"),
    [(1, 0.0, "median of 1 fresh runs.\n"), (3, 0.012, "median of 3 fresh runs, CV 1.2%.\n")],
)
def test_best_yaml_header_gives_a_cv_only_where_n_is_above_one(
    tmp_path, monkeypatch, n, cv, said
) -> None:

    from sweeper.report.best_yaml import export_winner
    from tests.sweeper.test_export import _trainer_config, decided_winner

    monkeypatch.chdir(tmp_path)
    job_dir = tmp_path / "job7"
    job_dir.mkdir()
    OmegaConf.save(OmegaConf.create(_trainer_config()), job_dir / "trial_config.yaml")
    winner = decided_winner(job_dir, rounds=n)
    row = {"trial": 7, "tokens_per_s": 1000.0, "n": n, "cv": cv, "params": {}}
    path = export_winner(
        winner,
        [row],
        sweep_dir=tmp_path / "s",
        study_name="s",
        storage="sqlite:///x.db",
        planned_checkpoint_every=0,
    )
    assert said in path.read_text().split("# Train with it")[0].replace("\n# ", " ")


# -- what changed, in at most 160 characters a line ----------------------------------------------
# The default CPU sweep's 14 knobs at the starting config (trial 0 of `search=throughput`)
START = {
    "batch.micro_batch": 8,
    "checkpoint.dir": "checkpoints",
    "checkpoint.every_steps": 3,
    "checkpoint.mode": "sync",
    "data.num_workers": 1,
    "data.pin_memory": True,
    "data.prefetch_factor": 2,
    "runtime.activation_checkpointing": "none",
    "runtime.attention": "auto",
    "runtime.compile": "none",
    "runtime.dtype": "fp32",
    "runtime.float8": "none",
    "runtime.loss": "full",
    "runtime.tf32": True,
}
# Trials as a real run has them: the start, one knob changed, 11 of 14 changed, a crash with a long
# multi-line reason, a point refused before it ran
CHANGES = {
    "batch.micro_batch": 32,
    "checkpoint.dir": "/dev/shm/throughput-sweep",
    "checkpoint.every_steps": 6,
    "checkpoint.mode": "async",
    "data.num_workers": 2,
    "data.pin_memory": False,
    "data.prefetch_factor": 4,
    "runtime.activation_checkpointing": "every",
    "runtime.attention": "math",
    "runtime.compile": "max-autotune-no-cudagraphs",
    "runtime.dtype": "bf16",
    "runtime.float8": "none",
}
TRIALS = [
    ("complete", {}, None),
    ("complete", {"data.num_workers": 0}, None),
    ("pruned", CHANGES, "pruned at step 6: running 1,121 tokens/s below the median 11,059"),
    (
        "crash",
        {"batch.micro_batch": 64, "runtime.compile": "default"},
        "exit code 1: " + "RuntimeError: a very long compiler message " * 20 + "\nTraceback ...",
    ),
    ("excluded", {"batch.micro_batch": 2}, "micro_batch 2 x grad_accum 1 is not 64 sequences"),
]


def _capture(monkeypatch, width: int) -> io.StringIO:
    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=out, width=width, soft_wrap=True))
    return out


def _knob_names(line: str) -> set[str]:
    return {word.split("=")[0] for word in line.split() if "=" in word}


@pytest.mark.parametrize("width", [250, 100])
def test_a_trial_line_names_only_what_changed_in_at_most_160_characters(
    monkeypatch, caplog, width
) -> None:
    out = _capture(monkeypatch, width)
    result = {"tokens_per_s": 23820.5, "mfu": {"spec": None, "ceiling": 0.259}, "wall_s": 4.1}
    with caplog.at_level(logging.INFO, logger="sweeper.report.record"):
        for number, (state, change, reason) in enumerate(TRIALS):
            trial_line(
                number=number,
                state=state,
                params={**START, **change},
                result=None if state == "excluded" else result,
                reason=reason,
                done=number + 1,
                total=14,
                best=23820.5,
                eta_s=6.0,
                start=START,
            )
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= min(width, MAX_CONSOLE_WIDTH)
    trials = out.getvalue().split("trial ")[1:]
    assert len(trials) == len(TRIALS)
    for text, (_, change, _) in zip(trials, TRIALS, strict=True):
        named = _knob_names(text.split("  [")[0].split("(")[0])
        assert named == {k.split(".")[-1] for k, v in change.items() if START[k] != v}
    assert SAME_AS_START in " ".join(trials[0].split())
    assert "max-autotune-no-cudagraphs" in trials[2]  # a value is never cut
    assert "Traceback" not in out.getvalue()  # the reason's first line only, cut at 120
    # the log file keeps every knob by its full name, and the whole reason
    kept = [r.getMessage() for r in caplog.records if r.getMessage().startswith("trial ")]
    assert len(kept) == len(TRIALS)
    assert all(f"{k}=" in line for line in kept for k in START)
    assert "Traceback ..." in kept[3]


def test_the_start_is_printed_once_in_full_by_its_full_names() -> None:
    head, knobs = start_lines(START, in_space=True)
    assert "differ from it" in head
    assert knobs.split() == [f"{k}={v}" for k, v in sorted(START.items())]
    assert "not a point of the search space" in start_lines(START, in_space=False)[0]


def _row(trial: int, params: dict, **kw) -> dict:
    return {
        "trial": trial,
        "params": params,
        "tokens_per_s": 46614.2,
        "step_time_s": 0.0856,
        "mfu_spec": None,
        "mfu_ceiling": 0.268,
        "data_wait_frac": 0.011,
        "cv": 0.116,
        "n": 3,
        "search_tokens_per_s": 51480.0,
        "search_projected": False,
        "winner": False,
        "start": False,
        **kw,
    }


ROWS = [
    _row(
        8,
        {**START, **CHANGES},
        winner=True,
        search_projected=True,
        float8={
            "recipe": "tensorwise",
            "emulated": True,
            "linears_converted": 8,
            "linears_total": 9,
        },
    ),
    _row(0, START, start=True, tokens_per_s=23227.0, n=1),
    _row(5, {**START, "data.num_workers": 0}),
]


@pytest.mark.parametrize("width", [100, 160])
def test_the_verified_table_reads_in_a_100_column_terminal(monkeypatch, width) -> None:
    """Every line within the terminal, no value cut (`micro_b...` was the knobs column at 100),
    and under the table each row's knobs that differ from the start."""
    out = _capture(monkeypatch, width)
    final_report(trials=[], duplicate_attr="dup", rows=ROWS, best_path=None, start=None)
    text = out.getvalue()
    assert max(map(len, text.splitlines())) <= width
    assert "…" not in text and "..." not in text
    header = next(line for line in text.splitlines() if "tokens/s" in line)
    assert "rank" in header and "knobs" not in header
    below = text.split("knobs that differ from the starting config:\n")[1].split("\nf8: ")[0]
    winner, start, other = (" ".join(e.split()) for e in re.split(r"\n(?=  \S)", below))
    assert winner.startswith("trial 8 (rank 1, winner):")
    assert _knob_names(winner) == {k.split(".")[-1] for k, v in CHANGES.items() if START[k] != v}
    assert "compile=max-autotune-no-cudagraphs" in winner.split()
    assert start == "trial 0 (rank 2, start): the starting config"
    assert other == "trial 5 (rank 3): num_workers=0"


def test_the_knobs_are_all_named_where_no_start_is_known() -> None:
    rows = [r for r in ROWS if not r["start"]]
    head, *lines = knob_lines(rows)
    assert head == "knobs:" and len(_knob_names(lines[1])) == len(START)
    assert knob_lines(rows, start=START)[2] == "  trial 5 (rank 2): num_workers=0"


def test_a_long_line_is_wrapped_at_words_within_the_width() -> None:
    line = "  next: " + " ".join(f"word{i}" for i in range(60)) + " /a/very/long/path" * 12
    wrapped = wrap_lines(line, 100)
    assert wrapped[0].startswith("  next: word0") and wrapped[1].startswith("      word")
    assert " ".join(w.strip() for w in wrapped) == line.strip()  # nothing lost, words whole
    assert all(len(w) <= 100 for w in wrapped if "/" not in w)
    assert wrap_lines("short\n  and short", 100) == ["short", "  and short"]


def test_the_console_wraps_long_lines_and_the_log_file_keeps_them_whole(tmp_path) -> None:
    cfg = _hydra_logging()
    log_file = tmp_path / "sweep.log"
    add_routes(cfg, log_file)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    long_info = "prior: " + "the FLOP arithmetic does not hold on a CPU " * 8
    resume = "sweep interrupted; resume with: python sweep.py" + " hydra.x=1" * 30
    try:
        logging.config.dictConfig(OmegaConf.to_container(cfg))
        stream = io.StringIO()
        console = next(h for h in root.handlers if not isinstance(h, SweepLogHandler))
        console.setStream(stream)
        logging.getLogger("sweeper.plan.prior").info(long_info)
        logging.getLogger("sweeper.engine").error(resume)
        logging.getLogger("sweeper.report.record").info("trial 0 every knob")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    shown, kept = stream.getvalue().splitlines(), log_file.read_text()
    info = [ln for ln in shown if "resume with" not in ln]
    assert len(info) > 2 and max(map(len, info)) <= MAX_CONSOLE_WIDTH
    assert long_info.strip() in kept  # one line in the file
    assert any(ln.endswith(resume) for ln in shown)  # an error's command stays whole
    assert "every knob" in kept and "every knob" not in stream.getvalue()


def test_dropped_choices_are_folded_a_line_per_reason(caplog) -> None:
    from sweeper.space.search_space import parse_space
    from tests.sweeper.test_space import BASE, make_ctx

    with caplog.at_level(logging.WARNING, logger="sweeper.space.params"):
        parse_space(
            {"runtime.attention": "choice(auto,flash,efficient,cudnn,math)"}, make_ctx(base=BASE)
        )
    head, *why = caplog.records[-1].getMessage().splitlines()
    assert head == "runtime.attention: dropped 2 of 5 choices: efficient, cudnn"
    assert why == ["  efficient, cudnn: has no CPU kernel"]


@pytest.mark.parametrize(
    ("fmt", "level", "shown"),
    [
        # Hydra's sweep format names no level: an error says it is one
        ("[%(name)s][HYDRA] %(message)s", logging.ERROR, "[s][HYDRA] [ERROR] disk full: x"),
        ("[%(name)s][HYDRA] %(message)s", logging.CRITICAL, "[s][HYDRA] [CRITICAL] disk full: x"),
        ("[%(name)s][HYDRA] %(message)s", logging.INFO, "[s][HYDRA] disk full: x"),
        # a job's format names it already: not twice
        ("[%(name)s][%(levelname)s] - %(message)s", logging.ERROR, "[s][ERROR] - disk full: x"),
    ],
)
def test_an_error_line_names_its_level_in_every_console_format(fmt, level, shown) -> None:
    rec = logging.LogRecord("s", level, __file__, 1, "disk full: %s", ("x",), None)
    assert ConsoleFormatter(fmt).format(rec) == shown
