"""What the device measures: the matmul ceiling (`ceiling`, cached per machine by
`ceiling_cache`), device sampling (`nvml`), compile counters (`compile_stats`), the environment
fingerprint and the memory peak (`memory_meter`). The arithmetic these are set against (FLOPs and
peaks, step statistics, the memory model) is torch-free, in train/core/.
"""
