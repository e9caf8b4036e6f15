"""The GPT-2 family (nanoGPT's architecture) and its attention kernels. Imports torch."""
