"""Make the embedded synthetic token dataset (nanoGPT-format train.bin / val.bin + meta.json).

    python scripts/prepare_data.py                       # -> data/synthetic, 4M tokens
    python scripts/prepare_data.py --out /tmp/tok --tokens 200000 --seed 7

No download: the tokens come from the seeded Markov chain in train/data/synthetic.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# allow `python scripts/prepare_data.py` from the repo root without installing the package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train.data import synthetic


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/synthetic", help="output folder")
    parser.add_argument(
        "--tokens", type=int, default=synthetic.DEFAULT_NUM_TOKENS, help="train + val tokens"
    )
    parser.add_argument("--seed", type=int, default=synthetic.DEFAULT_SEED)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        meta = synthetic.generate(args.out, num_tokens=args.tokens, seed=args.seed)
    except ValueError as e:
        parser.error(str(e))
    meta["seconds"] = round(time.perf_counter() - t0, 3)
    print(f"wrote {Path(args.out).expanduser().resolve()}")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
