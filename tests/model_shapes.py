"""The two model shapes the sweeper and memory tests build flat configs around."""

# GPT-2 XL (48 layers, 1600 wide) at its full 1024-token block, vocab padded to 50304
GPT2_XL = {
    "model.n_layer": 48,
    "model.n_head": 25,
    "model.n_embd": 1600,
    "model.block_size": 1024,
    "model.vocab_size": 50304,
}
# the tiny preset's shape and one 4096-token step: a CPU trial of seconds
TINY = {
    "model.n_layer": 2,
    "model.n_head": 2,
    "model.n_embd": 64,
    "model.block_size": 64,
    "model.vocab_size": 4096,
    "batch.tokens_per_step": 4096,
}
