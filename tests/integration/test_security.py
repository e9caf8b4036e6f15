"""What a user is handed is data: a best.yaml (or any config file the trainer reads before Hydra)
cannot run code or redirect files through Hydra's own settings, tried as an attacker would."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.core.config_file import SECTIONS, checked_command_line
from train.core.hooks import FORMER_KEYS

REPO = Path(__file__).resolve().parents[2]
BEST = REPO / "docs" / "gpu" / "2026-11-26-h200" / "best.yaml"  # a real exported best.yaml


def _hand_over(tmp_path: Path, **changes) -> Path:
    """A copy of a real best.yaml with `changes` merged at the top level (None removes a key),
    as an export writes it now: without the test hooks' former keys, which an older export held
    at their off values (train/core/hooks.py)."""
    doc = yaml.safe_load(BEST.read_text())
    for key in FORMER_KEYS:
        section, name = key.split(".")
        doc[section].pop(name)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    folder = tmp_path / "handed"
    folder.mkdir(exist_ok=True)
    path = folder / "best.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _args(path: Path) -> list[str]:
    return ["--config-path", str(path.parent), "--config-name", path.stem]


def test_a_clean_best_yaml_passes(tmp_path: Path) -> None:
    clean = _hand_over(tmp_path)
    assert checked_command_line(_args(clean))[1] == str(clean.parent)
    assert set(yaml.safe_load(BEST.read_text())) <= {*SECTIONS, "defaults"}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        # job_logging's FileHandler wrote the sender's text into a file of their choosing
        (
            {
                "hydra": {
                    "job_logging": {
                        "handlers": {
                            "evil": {
                                "class": "logging.FileHandler",
                                "filename": "/tmp/pwned-by-best-yaml",
                            }
                        }
                    }
                }
            },
            "top-level key(s) hydra are not trainer sections",
        ),
        # callbacks are instantiated: any importable callable runs
        (
            {
                "hydra": {
                    "callbacks": {
                        "x": {"_target_": "pathlib.Path.touch", "self": "/tmp/pwned-by-callback"}
                    }
                }
            },
            "Settings of Hydra itself (hydra:) are never taken from a config file",
        ),
        ({"modle": {"n_layer": 2}}, "did you mean 'model' for 'modle'?"),
        (
            {"defaults": ["train_schema", {"override hydra/job_logging": "disabled"}, "_self_"]},
            "defaults must be ['train_schema', '_self_']",
        ),
    ],
    ids=["hydra-job-logging", "hydra-callbacks", "typo", "defaults-group"],
)
def test_a_handed_config_with_keys_outside_the_schema_is_refused(tmp_path, changes, said) -> None:
    path = _hand_over(tmp_path, **changes)
    with pytest.raises(ValueError, match=r"config file .*best\.yaml") as err:
        checked_command_line(_args(path))
    assert said in str(err.value)


@pytest.mark.parametrize("module", ["train", "train.trial"])
def test_the_trainer_refuses_a_hydra_section_before_hydra_runs_it(tmp_path, module) -> None:
    target = tmp_path / "written-by-the-sender.log"
    touched = tmp_path / "touched-by-the-sender"
    path = _hand_over(
        tmp_path,
        hydra={
            "job_logging": {
                "version": 1,
                "handlers": {"f": {"class": "logging.FileHandler", "filename": str(target)}},
                "root": {"handlers": ["f"], "level": "INFO"},
            },
            "callbacks": {"t": {"_target_": "pathlib.Path.touch", "self": str(touched)}},
        },
    )
    args = ["--pinned", str(path)] if module == "train.trial" else _args(path)
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said[-2000:]
    assert "top-level key(s) hydra are not trainer sections" in said
    assert "Traceback" not in said
    assert not target.exists() and not touched.exists()  # nothing the file asked for happened


# -- exported files: no value can end a comment or a string ----------------------------------------

PAYLOAD = "/data/x\nimport os; os.system('touch {marker}')\n#"


@pytest.mark.parametrize("target", ["nanogpt", "llmc"])
@pytest.mark.parametrize("key", ["data.dir", "checkpoint.dir"])
def test_an_exported_file_keeps_a_hostile_value_inert(
    tmp_path: Path, target: str, key: str
) -> None:
    import ast

    from tests.nested import changed
    from tests.train.test_handoff import best_doc
    from train.core.handoff.files import handoff

    marker = tmp_path / "ran"
    doc = changed(best_doc(), {key: PAYLOAD.format(marker=marker)})
    text = handoff(doc, target).text
    if target == "nanogpt":
        # only comments and assignments of literals: nanoGPT's configurator exec()s the file
        tree = ast.parse(text)
        assert all(
            isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) for n in tree.body
        ), text
        exec(compile(text, "best_nanogpt.py", "exec"), {}, {})
        assert "\\nimport os" in text  # in a comment, the newline written escaped, not dropped
    else:
        # every line before the command is a comment; bash parses it; the value is one quoted word
        head = text.split("set -euo pipefail")[0].splitlines()
        assert all(line.startswith("#") for line in head), text
        assert subprocess.run(["bash", "-n", "-c", text], check=False).returncode == 0
        words = shlex.split(text.split("set -euo pipefail\n")[1].replace(" \\\n    ", " "))
        flag = {"data.dir": "-i", "checkpoint.dir": "-o"}[key]
        value = words[words.index(flag) + 1]
        assert value.startswith(PAYLOAD.format(marker=marker))  # one word, as bash reads it
    assert not marker.exists()


# -- every storage URL a user can write reaches the trials ----------------------------------------


def _smoke_sweep_on(tmp_path: Path, storage: str, study: str, *overrides: str) -> str:
    """A two-trial smoke sweep on `storage` as study `study`; it must exit 0. Returns its output."""
    from tests.sweep_helpers import run_sweep

    proc = run_sweep(
        tmp_path,
        "search=smoke",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.verify.top_k=1",
        f"hydra.sweeper.storage='{storage}'",
        f"hydra.sweeper.study_name={study}",
        *overrides,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    return said


@pytest.mark.slow
def test_a_storage_url_with_a_query_string_and_a_space_runs_its_trials(tmp_path: Path) -> None:
    # `?timeout=60` used to pass the checks and die at the first trial ("mismatched input '='":
    # the URL went into the trial's command line unquoted), leaving a RUNNING trial
    import optuna

    folder = tmp_path / "a folder ü"
    folder.mkdir()
    url = f"sqlite:///{folder / 'o.db'}?timeout=60"
    no_mlflow = "hydra.sweeper.mlflow.enabled=false"
    _smoke_sweep_on(tmp_path, url, "qs", no_mlflow, "hydra.sweeper.verify.repeats=1")
    study = optuna.load_study(study_name="qs", storage=url)
    states = {t.state for t in study.trials}
    assert optuna.trial.TrialState.COMPLETE in states
    assert optuna.trial.TrialState.RUNNING not in states and optuna.trial.TrialState.FAIL not in {
        t.state for t in study.trials if "duplicate_of" not in t.user_attrs
    }


# -- a compile cache others can write is a place to plant code -------------------------------------


@pytest.mark.parametrize(
    ("mode", "refused"), [(0o700, False), (0o755, False), (0o777, True), (0o775, True)]
)
def test_a_compile_cache_folder_others_can_write_is_refused(tmp_path, mode, refused) -> None:
    from train.core.rules import check_compile_cache

    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    if refused:
        with pytest.raises(ValueError, match=r"others can write to it .*chmod go-w"):
            check_compile_cache(str(folder))
    else:
        check_compile_cache(str(folder))


# -- no secret written ----------------------------------------------------------------------------

SECRET = "S3cretPW-not-in-any-file"


@pytest.mark.slow
def test_a_storage_password_is_in_no_file_the_sweep_writes(tmp_path: Path) -> None:
    """A PostgreSQL URL with a password (the test server trusts local connections, so any
    password connects): the sweep runs its trials, reports to the study, and not one file under
    its folder (sweep.log, each trial's result.json, trial.log, trial_config.yaml, Hydra's
    .hydra/*.yaml and multirun.yaml, best.yaml, MLflow's database and artifacts) holds the
    password; the trials got it by the name of an environment variable."""
    import json

    from tests.postgres import running_postgres
    from train.core.rules import STORAGE_ENV

    with running_postgres(database="secrets") as url:
        secret_url = url.replace("@", f":{SECRET}@", 1)
        said = _smoke_sweep_on(tmp_path, secret_url, "secret", "hydra.sweeper.verify.repeats=1")
    assert SECRET not in said  # the console
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    results = [p for p in files if p.name == "result.json"]
    assert results and any(".hydra" in p.parts for p in files)  # the trials ran and were kept
    leaks = [str(p.relative_to(tmp_path)) for p in files if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    storages = {json.loads(p.read_text())["config"]["trial"]["study_storage"] for p in results}
    assert storages <= {f"env:{STORAGE_ENV}", ""}, storages


@pytest.mark.slow
def test_a_bare_postgresql_url_with_options_runs_a_sweep(tmp_path: Path) -> None:
    """`postgresql://` (SQLAlchemy 2.1 loads psycopg 3 for it; the scale extra installs it) with a
    query string of PostgreSQL options: the sweep's trials report to the study and it ends."""
    import optuna

    from tests.postgres import running_postgres

    with running_postgres(database="options") as url:
        bare = url.replace("postgresql+psycopg2://", "postgresql://", 1)
        storage = f"{bare}?connect_timeout=10&application_name=throughput-sweep"
        _smoke_sweep_on(tmp_path, storage, "options")
        study = optuna.load_study(study_name="options", storage=storage)
        assert [t.state for t in study.trials].count(optuna.trial.TrialState.COMPLETE) >= 2


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h/db", "psycopg"),
        ("postgresql+psycopg2://u@h/db", "psycopg2"),
        ("postgresql+psycopg://u@h/db", "psycopg"),
        ("sqlite:///x.db", None),
    ],
)
def test_each_postgresql_scheme_names_the_driver_it_loads(url: str, driver: str | None) -> None:
    from sweeper.plan.extras import postgres_driver

    assert postgres_driver(url) == driver
