"""What a step costs and what it could cost: phase clocks and step statistics (`meters`), FLOPs
and peaks (`flops`), the measured matmul ceiling (`ceiling`), device sampling (`nvml`), compile
counters (`compile_stats`), the environment fingerprint, and memory (the torch-free
`memory_model` predicts, `memory_meter` measures).
"""
