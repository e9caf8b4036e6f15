"""One training process on one device: the session and the step (`loop`), the device's settings
(`device`: dtype, TF32, seeds, streams) and checkpointing (`checkpoint`). The trial and the
production run (`python -m train`) share all of it. Imports torch.
"""
