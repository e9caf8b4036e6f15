"""Token data: memmapped nanoGPT/llm.c `.bin` files, the generated default dataset, and the
DataLoader with its background receive thread. `fetch` is torch-free; the rest imports torch.
"""
