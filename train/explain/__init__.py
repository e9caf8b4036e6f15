"""Why a step takes as long as it does: `floor` (the arithmetic: FLOPs, the physical floor),
`sweep_dir` (a sweep folder's results) and the `python -m train.explain` command line (`cli`). The
verdict itself (the bottleneck a measured result shows, with fixes) is in the torch-free core
(`train/core/diagnosis.py`). All torch-free.
"""
