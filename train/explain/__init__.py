"""Why a step takes as long as it does: `floor` (the arithmetic: FLOPs, the physical floor),
`diagnosis` (the bottleneck a measured result shows, with fixes) and the `python -m
train.explain` command line (`cli`). All torch-free.
"""
