"""Training: the loop, its set-up, the run directory, and what keeps a run safe.

loop.py         train(): set up, then step, evaluate and save until max_iters
set_up.py       the model, optimizer, batches and precision of one process (shared with bench)
step.py         one optimizer step, the learning-rate schedule, the loss estimate
budget.py       train.max_minutes: max_iters fitted to a time budget as the run goes
optimizer.py    AdamW, or Muon for the blocks' matrices with AdamW for the rest
muon.py         Muon's orthogonalisation in float32, for CPUs without bfloat16 units
precision.py    dtype, autocast and loss scaling; compile preflight; out-of-memory
run_dir.py      checkpoints/<run>/: its files, and taking it for a run
lock.py         one run per directory
interrupt.py    Ctrl-C and SIGTERM: save, then stop
divergence.py   a NaN or infinite loss stops the run before it reaches a checkpoint
memory.py       will it fit? checked before any weight is allocated
distributed.py  torchrun, the process group, DDP
resume.py       resuming a run: where it goes on from, what must match, what comes back
progress.py     what a run shows: its summary and its progress bar
loggers.py      TensorBoard and Weights & Biases, fed at every evaluation beside metrics.jsonl
flops.py        FLOPs per token, the matmul peak, MFU (for the summary and bench)
attention_image.py  one layer's attention as an RGB image, for the loggers
launch.py       tinygpt-torchrun: torchrun, ending quietly on Ctrl-C and without NumPy's warning
"""
