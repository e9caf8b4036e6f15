"""Handing the winner to the run that matters: best.yaml translated for nanoGPT (`train.py` with its
configurator file) and llm.c (`train_gpt2cu` flags), with what each target cannot express and what
the sweep measured that to be worth; and the production checkpoint interval chosen from the
winner's measured save stall (Young/Daly).

Pure and torch-free (part of train/core/): plain dicts in, text and dataclasses out. `python -m
train.export` and the sweep's export (sweeper/report/handoff.py) write the files. Imports nothing,
so importing the room is free.
"""

__all__ = ["files", "gaps", "gaps_text", "interval", "llmc", "nanogpt"]
