"""The evidence file: one JSON document that every stage adds to and the README table is made from.

Every number in it is read from this run's own files (trial result.json, the Optuna study, the
production run's train_summary.json) or from the cited tables those already use (the spec peak);
nothing is typed in. Shape (schema `gpu-acceptance/1`):

    profile, model, tokens_per_step, budget_s {stage: s}, total_budget_s (the single-GPU
                stages), multi_gpu_budget_s (the ddp stage, extra)
    device      name, type, count, memory_gib, driver, torch, cuda, cudnn, python, packages,
                spec peak and source, measured matmul ceiling and source
    stages      [{stage, run, outcome (done | cut | stopped | failed | skipped), wall_s,
                  deadline_s, note}]
    plan        start (knobs, predicted GiB), text (the sweep's plan-mode output)
    memory      [{point, predicted_gib, measured_gib, measured_by, status, tokens_per_s, ...}]
    sweep       study, trials [{number, knobs, state, tokens_per_s, projected, MFU, memory,
                compile_s, wall_s}], race {rounds, verdict}, projection [search vs real],
                best {yaml, knobs, tokens_per_s}
    production  command, steps, tokens_per_s (median after the first step), first step, MFU,
                the race's verified tokens/s beside it and their ratio
    ddp         outcome (ran | skipped), reason ("skipped: 1 GPU"), device_count, nproc, backend,
                config (best.yaml | start), single and per-process splits, command, the trial's
                figures (tokens/s, MFU against nproc devices, time_frac), comms_frac, the
                single-GPU tokens/s and its source, scaling_efficiency = tokens/s / (nproc x it)
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from train.core.result import read_result

SCHEMA = "gpu-acceptance/1"
FILE_NAME = "evidence.json"


def new_evidence(*, profile: Any) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "profile": profile.name,
        "model": profile.model,
        "tokens_per_step": profile.tokens_per_step,
        "budget_s": dict(profile.budget_s),
        "total_budget_s": profile.total_budget_s,
        "multi_gpu_budget_s": profile.multi_gpu_budget_s,
        "device": {},
        "stages": [],
        "plan": {},
        "memory": [],
        "sweep": {},
        "production": {},
        "ddp": {},
    }


def load_evidence(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} evidence file (schema {doc.get('schema')!r})")
    return doc


def save_evidence(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def result_figures(r: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of one trial result the evidence keeps (an empty dict without a result)."""
    if r is None:
        return {}
    memory, mfu = r.get("memory") or {}, r.get("mfu") or {}
    failure = r.get("failure") or {}
    return {
        "status": r.get("status"),
        "failure": failure.get("kind"),
        "failure_message": (str(failure.get("message") or "").splitlines() or [""])[0][:200],
        "tokens_per_s": r.get("tokens_per_s"),
        "step_s_p50": (r.get("step_time_s") or {}).get("p50"),
        "projected": r.get("projection") is not None,
        "mfu_spec": mfu.get("spec"),
        "mfu_ceiling": mfu.get("ceiling"),
        "memory_predicted_gib": memory.get("predicted_gib"),
        "memory_measured_gib": memory.get("measured_gib"),
        "memory_measured_by": memory.get("measured_by"),
        "compile_s": r.get("compile_s"),
        "warmup_s": r.get("warmup_s"),
        "attention": r.get("attention_backend"),
        "time_frac": r.get("time_frac"),
        "result_wall_s": r.get("wall_s"),
    }


def device_section(probe: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The device and software, from the probe and the first result that ran (its fingerprint
    holds the driver and package versions, its device the spec peak and the measured ceiling)."""
    section: dict[str, Any] = {
        "name": probe.get("device_name") or "cpu",
        "type": probe.get("device_type"),
        "count": probe.get("device_count"),
        "memory_gib": probe.get("device_memory_gib"),
        "torch": probe.get("torch"),
    }
    ran = next((r for r in results if r and r.get("fingerprint") and r.get("device")), None)
    if ran is not None:
        fp, dev = ran["fingerprint"], ran["device"]
        section.update(
            {
                "name": fp.get("device_name") or section["name"],
                "driver": fp.get("nvidia_driver"),
                "cuda": fp.get("torch_cuda"),
                "cudnn": fp.get("cudnn"),
                "python": fp.get("python"),
                "cpu": fp.get("cpu_model"),
                "packages": {k[len("pkg_") :]: v for k, v in fp.items() if k.startswith("pkg_")},
                "git_commit": fp.get("git_commit"),
                "dtype": dev.get("dtype"),
                "spec_peak_flops": dev.get("peak_flops"),
                "spec_peak_source": dev.get("peak_source"),
                "ceiling_flops": dev.get("ceiling_flops"),
                "ceiling_source": dev.get("ceiling_source"),
            }
        )
    return section


def collect_sweep(*, storage: str, study_name: str, sweep_dir: Path) -> dict[str, Any]:
    """Every trial of the study with its figures, the race, search-vs-real, and best.yaml."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return {"study": study_name, "trials": [], "race": {}, "projection": [], "best": None}
    trials, duplicates = [], 0
    # the starting config's point: its first trial, and a requeue of it after an interruption
    starts = [t.params for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline")]
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        if "duplicate_of" in attrs:  # a re-proposed point: it ran nothing
            duplicates += 1
            continue
        job_dir = attrs.get("job_dir")
        result = read_result(Path(job_dir) / "result.json") if job_dir else None
        trials.append(
            {
                "number": t.number,
                "state": t.state.name.lower(),
                "start": t.params in starts,
                "knobs": dict(t.params),
                "outcome": attrs.get("failure_kind") or t.state.name.lower(),
                "reason": attrs.get("failure_reason"),
                "wall_s": attrs.get("wall_s"),
                **result_figures(result),
            }
        )
    race = _race(study.user_attrs.get("race") or {})
    by_number = {t["number"]: t for t in trials}
    best_yaml = sweep_dir / "best.yaml"
    verdict = study.user_attrs.get("verdict")
    return {
        "study": study_name,
        "duplicates": duplicates,
        "trials": trials,
        "race": {**race, "verdict": verdict},
        "projection": projection_vs_real(by_number, race),
        "best": _best(best_yaml, verdict, race) if best_yaml.is_file() else None,
    }


def _race(saved: dict[str, Any]) -> dict[str, Any]:
    """The stored race rounds with each run's real full-step figures."""
    rounds = []
    for stored in saved.get("rounds", []):
        runs = {}
        for number, run in stored.items():
            result = None
            if run and run.get("job_dir"):
                result = read_result(Path(run["job_dir"]) / "result.json")
            runs[number] = {"value": run.get("value") if run else None, **result_figures(result)}
        rounds.append(runs)
    return {"contenders": saved.get("contenders", []), "rounds": rounds}


def race_tokens_per_s(race: dict[str, Any], number: int) -> float | None:
    """A contender's median tokens/s over its real full-step race runs."""
    tps = [
        r[str(number)]["tokens_per_s"]
        for r in race.get("rounds", [])
        if r.get(str(number)) and r[str(number)].get("tokens_per_s") is not None
    ]
    return statistics.median(tps) if tps else None


def projection_vs_real(trials: dict[int, dict], race: dict[str, Any]) -> list[dict[str, Any]]:
    """For each race contender: its search run (projected from short steps, or real) against
    the median of its real full steps in the race."""
    rows = []
    for number in race.get("contenders", []):
        search, real = trials.get(number, {}), race_tokens_per_s(race, number)
        tps = search.get("tokens_per_s")
        rows.append(
            {
                "trial": number,
                "search_tokens_per_s": tps,
                "search_projected": search.get("projected"),
                "real_tokens_per_s": real,
                "error": (tps / real - 1) if tps and real else None,
            }
        )
    return rows


def _best(path: Path, verdict: dict | None, race: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    doc = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    metrics = (doc.get("provenance") or {}).get("metrics") or {}
    winner = verdict.get("winner_trial") if verdict else metrics.get("trial")
    runtime = ("dtype", "compile", "attention", "activation_checkpointing")
    return {
        "yaml": str(path),
        "trial": winner,
        "knobs": {
            "micro_batch": doc["batch"]["micro_batch"],
            "grad_accum": doc["batch"]["grad_accum"],
            **{k: doc["runtime"][k] for k in runtime},
            "num_workers": doc["data"]["num_workers"],
        },
        "tokens_per_s": metrics.get("tokens_per_s"),
        "mfu_spec": metrics.get("mfu_spec"),
        "mfu_ceiling": metrics.get("mfu_ceiling"),
        "race_tokens_per_s": race_tokens_per_s(race, winner) if winner is not None else None,
    }


def production_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The production run's throughput from its train_summary.json (log_every=1): the first
    step (compile and warm-up) apart, the median of the others."""
    steps = [h for h in summary.get("history", []) if "tokens_per_s" in h]
    if not steps:
        return {"steps": 0, "tokens_per_s": None}
    rest = steps[1:]

    def median(key: str) -> float | None:
        vals = [h[key] for h in rest if h.get(key) is not None]
        return statistics.median(vals) if vals else None

    return {
        "steps": summary.get("end_step", len(steps)) - summary.get("start_step", 0),
        "first_step_tokens_per_s": steps[0]["tokens_per_s"],
        "tokens_per_s": median("tokens_per_s"),
        "mfu_spec": median("mfu_spec"),
        "mfu_ceiling": median("mfu_ceiling"),
        "data_wait_frac": median("data_wait_frac"),
        "measured_steps": len(rest),
        "loss_first": steps[0].get("loss"),
        "loss_last": steps[-1].get("loss"),
    }
