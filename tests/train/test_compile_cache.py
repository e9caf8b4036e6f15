"""The sweep's compile cache (issue 23 item 1): the graph key, the environment every trial starts
with, the sweep setting, the record of each graph's compile and the charge time_to_train makes
from it. Pure tables here; real trials in tests/integration/test_compile_cache_run.py."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.launch.cache_folder import sweep_cache
from sweeper.launch.job import trial_env
from sweeper.settings import settings_from
from sweeper.study.objective import ObjectiveConfig, compile_charge_s, result_train_time
from train.core.compile_cache import cache_env
from train.core.compile_graphs import (
    cache_state,
    changes_graph,
    charge_compile,
    distinct_graphs,
    graph_key,
    read_record,
    record_key,
)

REPO = Path(__file__).resolve().parents[2]
BASE = {
    "model": {"name": "tiny", "n_layer": 2, "n_embd": 64, "block_size": 64},
    "batch": {"tokens_per_step": 4096, "micro_batch": 8, "grad_accum": 8},
    "data": {"num_workers": 1, "pin_memory": True, "prefetch_factor": 2},
    "checkpoint": {"every_steps": 3, "dir": "checkpoints", "mode": "sync"},
    "optim": {"lr": 6e-4, "fused": "auto"},
    "runtime": {
        "compile": "default",
        "dtype": "fp32",
        "attention": "auto",
        "float8": "none",
        "activation_checkpointing": "none",
        "threads": 0,
        "seed": 1,
        "compile_cache": "/a",
        "loss": "full",
    },
    "trial": {"max_steps": 20, "out": "trial.json"},
}


def _with(dotted: str, value) -> dict:
    section, key = dotted.split(".", 1)
    return {**BASE, section: {**BASE[section], key: value}}


@pytest.mark.parametrize(
    "knob, value",
    [
        ("data.num_workers", 4),
        ("data.pin_memory", False),
        ("data.prefetch_factor", 8),
        ("checkpoint.every_steps", 6),
        ("checkpoint.dir", "/dev/shm/x"),
        ("checkpoint.mode", "async"),
        ("optim.lr", 1e-3),
        ("runtime.threads", 2),
        ("runtime.seed", 7),
        ("runtime.compile_cache", "/elsewhere"),
        ("batch.grad_accum", 4),
        ("batch.tokens_per_step", 8192),
        ("trial.max_steps", 5),
        ("model.name", "renamed"),
    ],
)
def test_knobs_that_leave_the_graph_share_its_key(knob, value):
    assert not changes_graph(knob)
    assert graph_key(_with(knob, value)) == graph_key(BASE)


@pytest.mark.parametrize(
    "knob, value",
    [
        ("batch.micro_batch", 16),
        ("model.block_size", 128),
        ("model.n_layer", 4),
        ("runtime.dtype", "bf16"),
        ("runtime.compile", "max-autotune-no-cudagraphs"),
        ("runtime.activation_checkpointing", "every"),
        ("runtime.attention", "math"),
        ("runtime.float8", "tensorwise"),
        ("runtime.loss", "chunked"),
    ],
)
def test_knobs_that_change_the_graph_change_its_key(knob, value):
    assert changes_graph(knob)
    assert graph_key(_with(knob, value)) != graph_key(BASE)


def test_eager_has_no_graph_and_dotted_configs_read_like_nested():
    assert graph_key(_with("runtime.compile", "none")) is None
    dotted = {f"{s}.{k}": v for s, d in BASE.items() for k, v in d.items()}
    assert graph_key(dotted) == graph_key(BASE)


def test_distinct_graphs_of_a_space():
    points = [
        {"data.num_workers": 0},
        {"data.num_workers": 2, "checkpoint.mode": "async"},  # same graph as above
        {"batch.micro_batch": 16},
        {"runtime.compile": "none"},  # eager: no graph
        {"runtime.compile": "none", "batch.micro_batch": 16},
    ]
    assert distinct_graphs(points, base=BASE) == 2
    assert distinct_graphs([], base=BASE) == 0


@pytest.mark.parametrize(
    "hits, misses, compiled, enabled, state",
    [
        (3, 0, True, True, "hit"),
        (0, 3, True, True, "miss"),
        (1, 2, True, True, "partial"),
        (0, 0, True, False, "off"),
        (0, 0, False, True, "none"),
        (0, 0, True, True, "none"),
    ],
)
def test_cache_state(hits, misses, compiled, enabled, state):
    assert cache_state(hits=hits, misses=misses, compiled=compiled, enabled=enabled) == state


def test_cache_env_table(tmp_path):
    assert cache_env("") == {}
    assert cache_env("off") == {
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
    }
    env = cache_env(str(tmp_path / "c"))
    assert env == {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c"),
        "TRITON_CACHE_DIR": str(tmp_path / "c" / "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    # what a trial process (and the zygote that forks it) is started with
    assert trial_env(str(tmp_path / "c")).items() >= env.items()
    assert "TORCHINDUCTOR_CACHE_DIR" not in trial_env("")


def test_sweep_cache_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "multirun" / "x"
    auto = sweep_cache("auto", storage=f"sqlite:///{tmp_path}/db/optuna.db", sweep_dir=sweep)
    assert auto.setting == str(tmp_path / "db" / "compile_cache")
    assert auto.record == str(tmp_path / "db" / "compile_cache" / "graphs.json")
    assert sweep_cache("auto", storage="", sweep_dir=sweep).setting == str(
        tmp_path / "sweeps" / "compile_cache"
    )
    assert sweep_cache("auto", storage="sqlite:///rel/o.db", sweep_dir=sweep).setting == str(
        tmp_path / "rel" / "compile_cache"
    )
    pg = sweep_cache("auto", storage="postgresql://u@h/db", sweep_dir=sweep)
    assert pg.setting == str(sweep / "compile_cache")
    off = sweep_cache("off", storage="", sweep_dir=sweep)
    assert off.setting == "off" and off.record == str(sweep / "compile_graphs.json")
    assert off.env() == cache_env("off")
    mine = sweep_cache(str(tmp_path / "mine"), storage="", sweep_dir=sweep)
    assert mine.overrides() == [
        f"runtime.compile_cache={tmp_path / 'mine'}",
        f"trial.compile_record={tmp_path / 'mine' / 'graphs.json'}",
    ]


@pytest.mark.parametrize("value", ["auto", "off", "/tmp/some/cache"])
def test_setting_accepted(value):
    assert settings_from({"compile_cache": value}).compile_cache == value


def test_setting_refused_in_one_line(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    for value, match in [("", "auto .*off .*or a folder"), (str(a_file), "is a file")]:
        with pytest.raises(ValueError, match=f"hydra.sweeper.compile_cache.*{match}") as err:
            settings_from({"compile_cache": value})
        assert "\n" not in str(err.value)


def test_record_first_measurement_wins(tmp_path):
    path = tmp_path / "graphs.json"
    entry = record_key("abc", device="cpu", torch_version="2.13")
    first = charge_compile(path, entry=entry, compile_s=40.0, cache="miss", measured_by="job/0")
    second = charge_compile(path, entry=entry, compile_s=3.0, cache="hit", measured_by="job/1")
    assert first.first and not second.first
    assert (second.compile_s, second.cache, second.measured_by) == (40.0, "miss", "job/0")
    other = charge_compile(
        path,
        entry=record_key("abc", device="H100", torch_version="2.13"),
        compile_s=90.0,
        cache="miss",
        measured_by="job/2",
    )
    assert other.first and other.compile_s == 90.0
    assert set(read_record(path)) == {entry, record_key("abc", device="H100", torch_version="2.13")}
    assert json.loads(path.read_text())["version"] == 1


def _charge(args):
    path, seconds = args
    got = charge_compile(
        Path(path), entry="g", compile_s=seconds, cache="miss", measured_by=str(seconds)
    )
    return got.compile_s


def test_record_under_parallel_trials_charges_one_figure(tmp_path):
    path = str(tmp_path / "graphs.json")
    with multiprocessing.get_context("fork").Pool(4) as pool:
        charged = pool.map(_charge, [(path, float(s)) for s in range(1, 9)])
    assert len(set(charged)) == 1
    assert read_record(Path(path))["g"]["compile_s"] == charged[0]


def _result(*, compile_s: float, graph_compile_s: float | None, state: str) -> dict:
    cache = {"state": state, "graph": "abc", "graph_compile_s": graph_compile_s}
    return {
        "status": "complete",
        "tokens_per_s": 1000.0,
        "tokens_per_step": 4096,
        "step_time_s": {"p50": 0.5, "n": 10},
        "checkpoint_s": [],
        "compile_s": compile_s,
        "compile": {"mode": "default", "cache": cache},
        "config": {"checkpoint": {"every_steps": 0}},
    }


def test_two_trials_of_one_graph_get_the_same_compile_charge():
    objective = ObjectiveConfig(name="time_to_train", planned_steps=100)
    cold = _result(compile_s=41.0, graph_compile_s=41.0, state="miss")
    warm = _result(compile_s=3.5, graph_compile_s=41.0, state="hit")
    a, b = result_train_time(cold, objective), result_train_time(warm, objective)
    assert a.compile_s == b.compile_s == 41.0
    assert a.total_s == b.total_s == 41.0 + 100 * 0.5


def test_a_result_without_a_graph_charge_pays_its_own_compile():
    assert compile_charge_s(_result(compile_s=7.0, graph_compile_s=None, state="miss")) == 7.0
    old = {"compile_s": 5.0, "compile": {"mode": "default"}}  # a result from before the cache
    assert compile_charge_s(old) == 5.0
    assert compile_charge_s({"compile_s": None, "compile": None}) == 0.0


def test_use_compile_cache_off_gives_a_private_cold_folder():
    """In a process that imported torch's config first (as a zygote-forked trial has), `off`
    still turns both caches off and points the folders at a private, empty one."""
    code = (
        "import os, torch._inductor.config as ic, torch._functorch.config as fc\n"
        "from train.core.compile_cache import use_compile_cache\n"
        "d = use_compile_cache('off')\n"
        "print(ic.fx_graph_cache, fc.enable_autograd_cache,\n"
        "      d == os.environ['TORCHINDUCTOR_CACHE_DIR'], os.listdir(d),\n"
        "      os.environ['TRITON_CACHE_DIR'].startswith(d))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False", "True", "[]", "True"]


def test_the_zygote_forks_the_trials_of_its_cache_and_only_those(tmp_path):
    """The zygote is started with the sweep's cache in its environment (it imports torch's cache
    switches then); a trial job's environment for the same setting matches it exactly, so trials
    fork; one for another setting would exec instead of inheriting the wrong switches."""
    from sweeper.launch.runner import child_environment
    from sweeper.launch.spawn import Zygote

    folder = str(tmp_path / "cache")
    zygote = object.__new__(Zygote)  # its accept rule only: no process started
    zygote.python, zygote.env = sys.executable, child_environment(trial_env(folder))
    argv = [sys.executable, "-m", "train.trial", "--pinned", "trial_config.yaml"]
    assert zygote.accepts(argv, child_environment(trial_env(folder)))
    assert not zygote.accepts(argv, child_environment(trial_env("off")))
    assert not zygote.accepts(argv, child_environment(trial_env(str(tmp_path / "other"))))


def test_bench_tallies_compiles_and_reports_each_arm():
    """scripts/bench/compile_cache.py's figures from planted job results: compiled runs, their
    compile seconds, hits and misses, per arm and per pair."""
    from scripts.bench import compile_cache as bench

    def job(state: str | None, compile_s: float, hits: int = 0, misses: int = 0) -> dict:
        if state is None:
            return {"compile_s": 0.0, "compile": {"mode": "none"}}
        cache = {"state": state, "graph": "g", "fxgraph_hits": hits, "fxgraph_misses": misses}
        return {"compile_s": compile_s, "compile": {"mode": "default", "cache": cache}}

    cached = bench.tally([job(None, 0), job("miss", 40.0, misses=2), job("hit", 4.0, hits=2)], 100)
    off = bench.tally([job(None, 0), job("off", 41.0), job("off", 39.0)], 150)
    assert (cached["compiled"], cached["compile_s"], cached["hits"], cached["misses"]) == (
        2,
        44.0,
        2,
        2,
    )
    assert cached["states"] == {"hit": 1, "miss": 1} and off["states"] == {"off": 2}
    text = bench.report([{"auto": cached, "off": off}, {"off": off, "auto": cached}])
    assert "cache/off per pair: total compile s median 0.55x (range 0.55-0.55, 2 pairs)" in text
    assert "sweep wall median 0.67x (range 0.67-0.67, 2 pairs)" in text
    # one row per run, each pair's arms in the same order whatever order they ran in
    rows = [ln.split("|")[1].strip() for ln in text.splitlines() if ln.startswith("| ")]
    assert rows == ["compile_cache", "auto", "off", "auto", "off"]


def test_a_failure_inside_a_cache_file_names_the_file_and_how_to_clear_it(tmp_path) -> None:
    from train.core.compile_cache import cache_failure

    folder = tmp_path / "cache"
    (folder / "dj").mkdir(parents=True)
    module = folder / "dj" / "garbled.py"
    try:
        try:
            exec(compile("import r", str(module), "exec"))  # a cached module cut short
        except ModuleNotFoundError as inner:
            raise RuntimeError("backend='inductor' raised:") from inner
    except RuntimeError as exc:
        caught = exc
    line = cache_failure(caught, str(folder))
    assert line == (
        f"torch.compile failed loading {module} from the compile cache {folder} "
        f"(ModuleNotFoundError: No module named 'r'): the cache is damaged; clear it (rm -rf "
        f"{folder}) and run the same command again, or run with runtime.compile_cache=off"
    )
    assert cache_failure(caught, "off") is None and cache_failure(caught, "") is None
    assert cache_failure(caught, str(tmp_path / "another")) is None  # no frame there: no claim
    assert cache_failure(RuntimeError("CUDA error"), str(folder)) is None
