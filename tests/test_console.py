"""What the console shows and what only the sweep's log file keeps (sweeper/launch/quiet.py), the
progress line in trial numbers, and the verified table's CV only where n > 1. A real sweep's
console and log file are read in tests/test_one_parent.py."""

from __future__ import annotations

import io
import logging
import logging.config
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.launch.batch import job_name, link_job
from sweeper.launch.quiet import ConsoleFilter, SweepLogHandler, add_routes, known_warning
from sweeper.report import console as console_module
from sweeper.report.console import _cell, trial_line
from sweeper.study.eta import estimate


def record(name: str, level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    ("name", "level", "msg", "shown"),
    [
        ("hydra._internal.core_plugins.basic_launcher", logging.INFO, "Launching 1 jobs locally",
         False),
        ("hydra._internal.core_plugins.basic_launcher", logging.INFO, "\t#2 : search=smoke", False),
        ("hydra_plugins.hydra_joblib_launcher._core", logging.INFO,
         "Joblib.Parallel(n_jobs=2) is launching 1 jobs", False),
        ("sweeper.launch.job", logging.INFO, "trial in /x/multirun/a/b/2: complete", False),
        ("mlflow.store.db.utils", logging.INFO, "Creating initial MLflow database tables", False),
        ("optuna.storages._rdb.storage", logging.INFO, "A new study created in RDB", False),
        ("py.warnings", logging.WARNING, "/o/_experimental.py:33: ExperimentalWarning: Argument "
         "``heartbeat_interval`` is an experimental feature.", False),
        # the sweep's own lines, and every warning or error, stay on the console
        ("sweeper.plan.prepare", logging.INFO, "trial limits: hard 10m00s", True),
        ("sweeper.verify.race_rounds", logging.INFO, "race round 1: trial 3, trial 0", True),
        ("hydra._internal.core_plugins.basic_launcher", logging.WARNING, "a real problem", True),
        ("mlflow.tracking", logging.ERROR, "the server said no", True),
        ("py.warnings", logging.WARNING, "/x.py:1: DeprecationWarning: going away", True),
        ("hydra_plugins_of_mine", logging.INFO, "not a launcher", True),
    ],
)  # fmt: skip
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


def test_routes_keep_chatter_in_the_file_only(tmp_path: Path) -> None:
    """Hydra's own hydra_logging config, routed: the launcher's line reaches the file only, a
    sweep line both, a captured ExperimentalWarning the file only."""
    cfg = OmegaConf.create({
        "version": 1,
        "formatters": {"simple": {"format": "[%(asctime)s][HYDRA] %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "simple",
                                 "stream": "ext://sys.stdout"}},
        "root": {"level": "INFO", "handlers": ["console"]},
        "disable_existing_loggers": False,
    })  # fmt: skip
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


ROW = {"tokens_per_s": 1000.0, "step_time_s": 0.5, "mfu_spec": None, "mfu_ceiling": 0.2,
       "data_wait_frac": 0.01, "params": {}}  # fmt: skip


@pytest.mark.parametrize(("cv", "n", "cell"), [(0.0, 1, "-"), (None, 1, "-"), (0.034, 3, "3.4%"),
                                               (0.0, 2, "0.0%")])  # fmt: skip
def test_cv_is_shown_only_where_n_is_above_one(cv, n, cell) -> None:
    assert _cell({**ROW, "cv": cv, "n": n}, "cv") == cell


def test_the_trial_line_names_the_trial_and_its_eta(monkeypatch) -> None:
    from rich.console import Console

    out = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=out, width=200))
    eta = estimate(trials_left=2, trial_walls=[3.0], complete_walls=[4.0], contenders=3,
                   repeats=2, max_rounds=0, wall_left_s=None)  # fmt: skip
    trial_line(number=3, state="pruned", params={"batch.micro_batch": 8},
               result={"tokens_per_s": 1234.0, "mfu": {"ceiling": 0.1}, "wall_s": 3.25},
               reason="pruned [at step 6]", done=4, total=14, best=2000.0, eta=eta)  # fmt: skip
    first, second = out.getvalue().splitlines()
    assert first.startswith("trial   3 pruned") and "micro_batch=8  in 3.2 s" in first
    assert "(pruned [at step 6])" in first  # brackets are text, not markup
    assert second.strip().startswith("[######..............] 4/14")
    assert second.endswith("eta 30s (2 trial(s) x 3.0 s + race ~6 runs x 4.0 s)")


@pytest.mark.parametrize(("n", "cv", "said"), [(1, 0.0, "median of 1 fresh runs.\n"),
                                               (3, 0.012, "median of 3 fresh runs, CV 1.2%.\n")])
def test_best_yaml_header_gives_a_cv_only_where_n_is_above_one(tmp_path, monkeypatch, n, cv,
                                                               said) -> None:  # fmt: skip
    from types import SimpleNamespace

    from sweeper.report.export import export_winner
    from tests.test_export import _trainer_config

    monkeypatch.chdir(tmp_path)
    job_dir = tmp_path / "job7"
    job_dir.mkdir()
    OmegaConf.save(OmegaConf.create(_trainer_config()), job_dir / "trial_config.yaml")
    winner = SimpleNamespace(number=7, trial=SimpleNamespace(user_attrs={"job_dir": str(job_dir)}),
                             results=[{"fingerprint": {"torch": "2.13.0"}}],
                             verdict=SimpleNamespace(reason="fastest", decisive=True),
                             outcome="decided", rounds=n, lead_over_start=None)  # fmt: skip
    row = {"trial": 7, "tokens_per_s": 1000.0, "n": n, "cv": cv, "params": {}}
    path = export_winner(winner, [row], sweep_dir=tmp_path / "s", study_name="s",
                         storage="sqlite:///x.db", planned_checkpoint_every=0)  # fmt: skip
    assert said in path.read_text().split("# Train with it")[0].replace("\n# ", " ")
