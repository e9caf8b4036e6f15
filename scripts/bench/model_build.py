"""How long building a GPT-2 takes, the old way against the trainer's: the model constructed on the
host with torch's default init, GPT-2's init drawn over it and the weights copied to the device
(`host`), against shapes on the meta device and GPT-2's init drawn once, on the device (`meta`,
train/run/loop.py build_model). Interleaved pairs in one process, seeded alike.

    python -m scripts.bench.model_build --model gpt2 --pairs 3
    python -m scripts.bench.model_build --model gpt2-xl --device cuda   # on a GPU

Prints each arm's seconds (median, min-max) and the per-pair ratio host / meta.
"""

from __future__ import annotations

import gc

import torch
from omegaconf import OmegaConf

from scripts.bench.harness import (
    REPO,
    bench_parser,
    format_table,
    pair_ratios,
    ratio_summary,
    run_pairs,
    spread,
    timed,
)
from train.device import sync
from train.model.gpt import GPT, ModelConfig, build_on

ARMS = ("host", "meta")


def model_config(name: str) -> ModelConfig:
    """A preset of conf/model/ as the trainer's ModelConfig."""
    return ModelConfig(
        **OmegaConf.to_container(OmegaConf.load(REPO / "conf/model" / f"{name}.yaml"))
    )


def build(arm: str, cfg: ModelConfig, device: torch.device) -> GPT:
    """One seeded build by `arm`, finished on `device` (synchronized)."""
    torch.manual_seed(1337)
    # host: the build the trainer replaced; meta: the trainer's own (build_on)
    model = GPT(cfg).to(device) if arm == "host" else build_on(device, cfg)
    sync(device)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, pairs=3, arms="host and meta builds")
    parser.add_argument("--model", default="gpt2", help="a preset of conf/model/")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    cfg, device = model_config(args.model), torch.device(args.device)
    build("meta", cfg, device)  # warm the allocator and the kernels: neither arm pays them

    def run(arm: str, _: int) -> float:
        model, seconds = timed(lambda: build(arm, cfg, device))
        del model
        gc.collect()
        return seconds

    pairs = run_pairs(ARMS, args.pairs, run)
    seconds = {arm: [p[arm] for p in pairs] for arm in ARMS}
    rows = [[arm, spread(seconds[arm])] for arm in ARMS]
    print(f"{args.model} on {device} ({args.pairs} interleaved pairs), seconds to build:")
    print(format_table(["arm", "seconds (median, min-max)"], rows))
    print(f"host / meta: {ratio_summary(pair_ratios(seconds['host'], seconds['meta']))}")


if __name__ == "__main__":
    main()
