# nanoGPT handoff of best.yaml (study throughput-gpt2-xl-gpu-quick-cuda, trial 1): 50,434 tokens/s on NVIDIA H200
# Run (in nanoGPT's folder): OMP_NUM_THREADS=16 python train.py best_nanogpt.py
# gradient_accumulation_steps is GLOBAL and assumes world size 1: train.py divides it by the world size, giving 32 per process (best.yaml's batch.grad_accum)
# tokens per step: 32 x 32 x 1024 = 1,048,576 (gradient_accumulation_steps x batch_size x block_size = batch.tokens_per_step)
# data: train.py reads /work/main/data/synthetic/train.bin and val.bin as headerless uint16 (best.yaml: train.bin, val.bin, format auto); it samples random windows, not this project's seeded order
# What nanoGPT cannot express (what the sweep measured it to be worth):
#   - data.num_workers=1: nanoGPT reads each batch in the training process (get_batch), so no workers and no prefetch; not measured (no trial ran data.num_workers=0 with the winner's other knobs)
#   - checkpoint.keep=2: nanoGPT overwrites one ckpt.pt; not measured (the sweep did not search checkpoint.keep)
#   - checkpoint.every_steps=0: nanoGPT cannot turn saving off: it still saves when the validation loss improves (always_save_checkpoint = False); not measured (the sweep did not search checkpoint.every_steps)
out_dir = '/work/main/checkpoints/throughput-gpt2-xl-gpu-quick-cuda/trial-1'
eval_interval = 50
eval_iters = 8
log_interval = 10
always_save_checkpoint = False
init_from = 'scratch'
wandb_log = False
dataset = '/work/main/data/synthetic'
gradient_accumulation_steps = 32
batch_size = 32
block_size = 1024
n_layer = 48
n_head = 25
n_embd = 1600
dropout = 0.0
bias = True
learning_rate = 0.0006
max_iters = 200
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 20
lr_decay_iters = 200
min_lr = 6e-05
device = 'cuda'
dtype = 'bfloat16'
compile = True
