"""runtime.compile_unit (regional compilation, train/model/regional.py): the rule, by table; a
block-compiled tiny model against the eager one (the same loss and gradients, one graph for every
block, counted from Dynamo's frames), with recompute and with emulated float8; a real trial; the
graph key, the forecast, explain's advice and the handoffs (nanoGPT cannot express it).

The Inductor case compiles for real (seconds on this CPU); the compositions run the same Dynamo
tracing and AOTAutograd partitioning under the `aot_eager` backend (torch.compiler.set_stance's
force_backend), which skips only Inductor's code generation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from sweeper.forecast import compile_s, costs_for, trial_time
from sweeper.forecast.costs import BLOCK_UNIT_LAYERS, GENERIC
from sweeper.space.constraints import SpaceContext
from sweeper.space.params import parse_param
from tests.conftest import compose_config, run_cli
from tests.train.test_handoff import best_doc
from tests.train.test_verdict import make as make_result
from train.core.compile_graphs import graph_key
from train.core.config import ModelConfig, RuntimeConfig
from train.core.diagnosis import diagnose
from train.core.diagnosis_text import fix_text
from train.core.handoff.files import handoff
from train.model.gpt import GPT, run_block, run_head
from train.model.regional import compile_model
from train.trial.measurement import run_trial

REPO = Path(__file__).resolve().parents[2]
REFUSAL = "runtime.compile_unit must be one of ('model', 'block')"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """No compiled code, guards or counts carried over from another test."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


# ---- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "ok"),
    [
        ("model", True),
        ("block", True),
        ("blocks", False),
        ("Block", False),
        ("", False),
        ("default", False),
        (None, False),
        (1, False),
    ],
)
def test_the_compile_unit_rule(unit, ok) -> None:
    if ok:
        assert RuntimeConfig(compile_unit=unit).compile_unit == unit
        return
    with pytest.raises(ValueError, match=re.escape(REFUSAL)) as err:
        RuntimeConfig(compile_unit=unit)
    assert f"got {unit!r}" in str(err.value)


def test_the_trainer_refuses_a_bad_unit_in_one_line(tmp_path: Path) -> None:
    proc = run_cli(
        "train",
        [
            "runtime.compile_unit=blocks",
            "train.max_steps=2",
            f"hydra.run.dir={tmp_path}",
            f"checkpoint.dir={tmp_path / 'ck'}",
        ],
        cwd=tmp_path,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "Traceback" not in out
    assert [ln for ln in out.splitlines() if REFUSAL in ln and "got 'blocks'" in ln], out[-2000:]


# ---- the model ----------------------------------------------------------------------------------

X = torch.randint(0, 4096, (4, 64), generator=torch.Generator().manual_seed(0))
Y = torch.randint(0, 4096, (4, 64), generator=torch.Generator().manual_seed(1))


def _model(n_layer: int, *, recompute: str = "none", float8: bool = False) -> GPT:
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=n_layer), activation_checkpointing=recompute)
    if float8:
        from train.model.float8 import convert_to_float8

        convert_to_float8(model, recipe="tensorwise", emulate=True)
    return model


def _step(model: torch.nn.Module, *, bf16: bool = False) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        _, loss = model(X, Y)
    loss.backward()
    return loss.detach()


def compiled_variants() -> tuple[int, int]:
    """How many compiled versions Dynamo holds of the block function and of the head's."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return tuple(len(_debug_get_cache_entry_list(fn.__code__)) for fn in (run_block, run_head))


def _grads(model: GPT) -> dict[str, torch.Tensor]:
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _assert_same_step(eager: GPT, compiled: GPT, loss_e, loss_c, *, tol: float) -> None:
    assert torch.allclose(loss_c, loss_e, rtol=tol, atol=0), (loss_c.item(), loss_e.item())
    ge, gc = _grads(eager), _grads(compiled)
    assert ge.keys() == gc.keys() and len(ge) == len(list(eager.parameters()))
    for name, g in ge.items():
        assert torch.allclose(gc[name], g, rtol=tol, atol=tol * g.abs().max().item()), name


def test_a_block_compiled_model_matches_eager_and_compiles_one_block_graph() -> None:
    """Inductor, for real: 3 blocks run one compiled graph (2 frames: the block and the head;
    blocks 2 and 3 reuse block 1's, no recompile), the loss and every gradient as eager's."""
    eager, model = _model(3), _model(3)
    loss_e = _step(eager)
    called = compile_model(model, mode="default", unit="block")
    assert called is model  # compiled in place: the state dict keeps its keys
    assert list(model.state_dict()) == list(eager.state_dict())
    loss_c = _step(called)
    _assert_same_step(eager, model, loss_e, loss_c, tol=1e-4)
    assert counters["frames"]["ok"] == 2, dict(counters["frames"])
    assert counters["stats"]["unique_graphs"] == 2
    assert compiled_variants() == (1, 1)
    _step(called)  # a second step compiles nothing
    assert counters["frames"]["total"] == 2


@pytest.mark.parametrize(
    ("n_layer", "recompute", "float8", "frames"),
    [
        (6, "none", False, 2),  # one block graph however deep, and the head's
        (6, "every", False, 2),  # recompute traced inside the block graph
        (4, "selective", False, 2),  # the op-level policy, traced too
        (4, "every_2", False, 3),  # a recomputed block and a kept one: two block graphs
        (3, "every", True, 2),  # float8 linears swapped in before the compile
    ],
)
def test_block_compile_composes(n_layer, recompute, float8, frames) -> None:
    if float8:
        pytest.importorskip("torchao.float8")
    eager, model = (
        _model(n_layer, recompute=recompute, float8=float8),
        _model(n_layer, recompute=recompute, float8=float8),
    )
    loss_e = _step(eager, bf16=float8)
    counted = CompileCounterWithBackend("aot_eager")
    with torch.compiler.set_stance("default", force_backend=counted):
        loss_c = _step(compile_model(model, mode="default", unit="block"), bf16=float8)
    _assert_same_step(eager, model, loss_e, loss_c, tol=1e-5)
    assert counted.frame_count == frames
    assert compiled_variants() == (frames - 1, 1)


def test_the_whole_model_unit_is_one_graph() -> None:
    model = _model(3)
    counted = CompileCounterWithBackend("aot_eager")
    with torch.compiler.set_stance("default", force_backend=counted):
        called = compile_model(model, mode="default", unit="model")
        _step(called)
    assert called is not model and counted.frame_count == 1
    assert model.block_fn.__name__ == "run_block"  # the regions are left eager


# ---- a trial ------------------------------------------------------------------------------------


def test_a_trial_runs_block_compiled(synthetic_dir: Path, tmp_path: Path) -> None:
    """The trial's own path (config, build_model, the window, the result), compiled by aot_eager."""
    cfg = compose_config(
        [
            "model.n_layer=4",
            "batch.tokens_per_step=512",
            "batch.micro_batch=4",
            "batch.grad_accum=2",
            "runtime.device=cpu",
            "runtime.compile=default",
            "runtime.compile_unit=block",
            "runtime.compile_cache=off",
            "data.num_workers=0",
            f"data.dir={synthetic_dir}",
            f"checkpoint.dir={tmp_path / 'ck'}",
            "trial.warmup_steps=1",
            "trial.max_steps=3",
            "trial.min_steps=3",
        ]
    )
    counted = CompileCounterWithBackend("aot_eager")
    with torch.compiler.set_stance("default", force_backend=counted):
        result = run_trial(cfg, out_path=tmp_path / "trial.json")
    assert result["status"] == "complete", result["failure"]
    assert counted.frame_count == 2  # the block and the head, in the warm-up
    assert not result["compile"]["recompiled_in_window"]
    assert result["config"]["runtime"]["compile_unit"] == "block"
    written = json.loads((tmp_path / "trial.json").read_text())
    assert written["compile"]["cache"]["graph"] == graph_key(result["config"])


# ---- the graph key, the forecast, the handoffs --------------------------------------------------

BASE = {"runtime": {"compile": "default", "dtype": "fp32"}, "model": {"n_layer": 24}}


def test_the_unit_names_its_own_graph() -> None:
    block = {**BASE, "runtime": {**BASE["runtime"], "compile_unit": "block"}}
    model = {**BASE, "runtime": {**BASE["runtime"], "compile_unit": "model"}}
    assert graph_key(block) != graph_key(model)
    assert graph_key(model) == graph_key(BASE)  # a config from before the knob: the same graph
    eager = {**block, "runtime": {**block["runtime"], "compile": "none"}}
    assert graph_key(eager) is None


@pytest.mark.parametrize("n_layer", [24, 48])
def test_a_block_compile_is_priced_at_a_few_layers(n_layer) -> None:
    for costs in (GENERIC, costs_for("NVIDIA H200")):
        whole = compile_s(costs, mode="default", n_layer=n_layer, float8=False)
        block = compile_s(costs, mode="default", n_layer=n_layer, float8=False, unit="block")
        assert block == pytest.approx(whole * BLOCK_UNIT_LAYERS / n_layer)
        assert compile_s(costs, mode="none", n_layer=n_layer, float8=False, unit="block") == 0
    # a model shallower than the unit's price costs no more than its whole compile
    assert compile_s(GENERIC, mode="default", n_layer=1, float8=False, unit="block") == (
        compile_s(GENERIC, mode="default", n_layer=1, float8=False)
    )
    cfg = {"model.n_layer": n_layer, "runtime.compile": "default", "batch.grad_accum": 1}
    t_model = trial_time(cfg, 1.0, device_type="cpu", num_params=10**6)
    t_block = trial_time(
        {**cfg, "runtime.compile_unit": "block"}, 1.0, device_type="cpu", num_params=10**6
    )
    assert t_block.compile_s < t_model.compile_s
    assert t_block.total_s - t_block.compile_s == pytest.approx(t_model.total_s - t_model.compile_s)


@pytest.mark.parametrize(
    ("compile", "unit", "lost"),
    [
        ("default", "block", True),
        ("default", "model", False),
        ("none", "block", False),
    ],
)
def test_nanogpt_says_it_cannot_compile_block_by_block(compile, unit, lost) -> None:
    doc = best_doc(compile=compile)
    doc["runtime"]["compile_unit"] = unit
    made = handoff(doc, "nanogpt")
    said = [line for line in made.lines if line.startswith("runtime.compile_unit=block: ")]
    assert bool(said) == lost, made.lines
    if lost:
        assert "nanoGPT compiles the whole model" in said[0]
        assert "  - runtime.compile_unit=block: nanoGPT compiles the whole model" in made.text
    llmc = handoff(doc, "llmc")  # llm.c has no torch.compile at all: one line, the compile's
    keys = [line.split("=")[0] for line in llmc.lines]
    assert "runtime.compile_unit" not in keys
    assert ("runtime.compile" in keys) == (compile != "none")
    if compile != "none" and unit == "block":
        assert "no torch.compile (whole or block by block)" in llmc.text


@pytest.mark.parametrize(("unit", "suggested"), [("model", True), ("block", False)])
def test_a_compile_dominated_run_is_told_of_the_block_unit(unit, suggested) -> None:
    result = make_result(
        **{
            "compile_s": 30.0,
            "config.runtime.compile": "default",
            "config.runtime.compile_unit": unit,
        }
    )
    d = diagnose(result, planned_steps=20)
    assert d.verdict == "compile-dominated"
    assert ("runtime.compile_unit=block" in [fix_text(f) for f in d.fixes]) is suggested


def test_block_compile_under_ddp(tmp_path: Path) -> None:
    """One gloo rank (a real process group and DDP): DDP wraps the model whose blocks are
    compiled; a no_sync micro-batch and a synced one accumulate the eager gradients, and the
    last backward's gradients are marked for the comms carve."""
    import torch.distributed as dist

    from train.core.config import DdpConfig
    from train.core.meters import PhaseClock
    from train.run.distributed import ExposedComms, no_sync, wrap_ddp

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        eager, model = _model(4, recompute="every_2"), _model(4, recompute="every_2")
        loss_e = _step(eager) + _step(eager)
        comms = ExposedComms(model.parameters())
        counted = CompileCounterWithBackend("aot_eager")
        with torch.compiler.set_stance("default", force_backend=counted):
            ddp = wrap_ddp(
                compile_model(model, mode="default", unit="block"),
                device=torch.device("cpu"),
                cfg=DdpConfig(),
            )
            with no_sync(ddp, False):
                loss_c = _step(ddp)
            comms.arm(PhaseClock())
            loss_c = loss_c + _step(ddp)
        _assert_same_step(eager, model, loss_e, loss_c, tol=1e-5)
        assert comms.grads == sum(1 for p in model.parameters() if p.requires_grad)
        # Dynamo traced a recomputed block, a kept one and the head, once each; under DDP its
        # optimizer (torch._dynamo.config.optimize_ddp) may split a graph at bucket boundaries,
        # so the backend can see more graphs than frames
        assert compiled_variants() == (2, 1)
        assert counted.frame_count >= 3
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("search", ["throughput", "gpu-quick"])
def test_the_unit_is_searched_beside_compile(search) -> None:
    """Whole model first: the prior's template (a space's first value where the start lacks one)
    keeps torch.compile's usual unit, and TPE may try the block unit."""
    space = yaml.safe_load((REPO / "conf" / "search" / f"{search}.yaml").read_text())["space"]
    assert "runtime.compile" in space
    assert space["runtime.compile_unit"] == "choice(model, block)"
    ctx = SpaceContext(tokens_per_step=4096, block_size=64)
    assert parse_param("runtime.compile_unit", space["runtime.compile_unit"], ctx).choices == (
        "model",
        "block",
    )


@pytest.mark.slow
def test_the_benchmark_prints_measured_pairs(tmp_path: Path) -> None:
    """scripts/bench/compile_unit.py in its smallest mode: one pair of cold trials, each unit's
    row with its compile and step, no recompile, and the ratios; then two rounds of both units'
    steps interleaved in the benchmark's own process, each measured."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    args = ["--pairs", "1", "--n-layer", "2", "--steps", "2", "--grad-accum", "1", "--rounds", "2"]
    out = ["--out", str(tmp_path / "out.txt")]
    proc = run_cli(
        "scripts.bench.compile_unit", [*args, *out], cwd=REPO, timeout=600, extra_env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {
        cells[1]: cells
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in proc.stdout.splitlines()
            if line.startswith("| 1 ")
        )
    }
    assert set(rows) == {"model", "block"}
    for cells in rows.values():
        compile_s, probe_s, step_ms = float(cells[2]), float(cells[3]), float(cells[5])
        assert compile_s > probe_s > 0 and step_ms > 0
        assert cells[7] == "0" and cells[8] == "off"  # no recompile; every compile cold
    assert "cold compile model / block: " in proc.stdout
    assert "interleaved in one process, 2 rounds of one optimizer step per unit" in proc.stdout
    each = r"^  (model|block): step ([0-9.]+) \([0-9.]+-[0-9.]+\) ms"
    medians = re.findall(each, proc.stdout, re.M)
    assert [u for u, _ in medians] == ["model", "block"] and all(float(ms) > 0 for _, ms in medians)
    per_round = r"step time block / model, per round: [0-9.]+ \([0-9.]+-[0-9.]+\)"
    assert re.search(per_round, proc.stdout)
    assert (tmp_path / "out.txt").read_text().strip() == proc.stdout.strip()
