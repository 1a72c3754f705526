#!/usr/bin/env bash
# The figures of BENCHMARKS.md's section "Issue 25", in order. Results go to benchmarks/results/issue25/.
# Every training run forces train.dtype=float32 (so Muon orthogonalises in float32, as on a CPU without
# bfloat16 units) and one thread (on a busy machine a 2-thread step waits for its slower thread).
#
#   bash benchmarks/issue25.sh /path/to/nanoGPT /path/to/tinyshakespeare.txt
set -euo pipefail
cd "$(dirname "$0")/.."

NANOGPT=${1:?usage: bash benchmarks/issue25.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
TS=${2:?usage: bash benchmarks/issue25.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
R=benchmarks/results/issue25
mkdir -p "$R"
QUICK="cpu_quick train.dtype=float32"
ADAMW="train.optimizer=adamw train.learning_rate=6e-3 train.min_lr=6e-4"  # cpu_quick.yaml before issue 25
MUON="train.optimizer=muon train.learning_rate=1.2e-2 train.max_iters=1000"

# tinygpt's cached generation against the reference's, interleaved in one process; $1: the result's name
generation_at_recipe_size() {  # nanoGPT's CPU-recipe size, 200 new characters, 7 repeats
  OMP_NUM_THREADS=1 python benchmarks/compare.py generate --nanogpt "$NANOGPT" \
    --config benchmarks/configs/nanogpt_cpu.yaml --set "data.corpus=$TS" --tokens 200 --repeats 7 \
    --cache-only --json "$R/$1.json"
}
generation_at_6x384() {  # 6 layers x 384, 1,000 new characters, once
  OMP_NUM_THREADS=1 python benchmarks/compare.py generate --nanogpt "$NANOGPT" \
    --config configs/shakespeare_char.yaml --set "data.corpus=$TS" --tokens 1000 --repeats 1 --cache-only \
    --json "$R/$1.json"
}

{
  echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "== flags: $(grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

  echo "== 1. Muon's learning rate: 500-step runs of cpu_quick's shape, AdamW beside them"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 2 \
    --run "$QUICK train.max_iters=500 $ADAMW" \
    --run "$QUICK train.max_iters=500 train.optimizer=muon train.learning_rate=3e-3 train.min_lr=3e-4" \
    --run "$QUICK train.max_iters=500 train.optimizer=muon train.learning_rate=6e-3 train.min_lr=6e-4" \
    --run "$QUICK train.max_iters=500 train.optimizer=muon train.learning_rate=1.2e-2 train.min_lr=1.2e-3" \
    --run "$QUICK train.max_iters=500 train.optimizer=muon train.learning_rate=2.4e-2 train.min_lr=2.4e-3" \
    --json "$R/muon_lr_sweep_500.json"

  echo "== 2. the reference's recipe; 1,000 steps of cpu_quick's shape with AdamW, Muon (cosine), Muon (wsd)"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 4 \
    --run "$QUICK $ADAMW train.max_iters=1000" --run "$QUICK $MUON train.min_lr=1.2e-3" \
    --run "$QUICK $MUON train.min_lr=0 train.lr_schedule=wsd" \
    --target 1.9 --plot "$R/quality_quick.svg" --json "$R/quality_quick.json"

  echo "== 3. generation: round 1's code, main before issue 25, this tree (A B A B, 6 x 384, 500 tokens)"
  git worktree add --detach /tmp/round1 4719f12 2>/dev/null || true
  git worktree add --detach /tmp/main_before a27cefd 2>/dev/null || true
  python benchmarks/generation_trees.py --tree round1=/tmp/round1/src --tree main=/tmp/main_before/src \
    --tree this=src --json "$R/generation_trees.json"

  echo "== 4. generation against the reference: CPU-recipe size (200 tokens), 6 x 384 (1,000 tokens)"
  for threads in 1 2; do
    OMP_NUM_THREADS=$threads python benchmarks/compare.py generate --nanogpt "$NANOGPT" \
      --config benchmarks/configs/nanogpt_cpu.yaml --set "data.corpus=$TS" --tokens 200 --repeats 5 \
      --json "$R/generate_recipe_${threads}thread.json"
  done
  OMP_NUM_THREADS=1 python benchmarks/compare.py generate --nanogpt "$NANOGPT" \
    --config configs/shakespeare_char.yaml --set "data.corpus=$TS" --tokens 1000 --repeats 2 --cache-only \
    --json "$R/generate_shakespeare_char_1thread.json"

  echo "== 5. a cached step against what the hardware allows, 6 x 384"
  OMP_NUM_THREADS=1 python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --tokens 500 \
    --json "$R/decode_limits_1thread.json"

  echo "== 6. round 3: the one-position step and the sampler, against the code before them (A B A B)"
  git worktree add --detach /tmp/before_step d004609~1 2>/dev/null || true  # issue 25's first round
  git worktree add --detach /tmp/sampler_only d004609 2>/dev/null || true   # the exponential-clock sampler
  OMP_NUM_THREADS=1 python benchmarks/generation_trees.py --tree before=/tmp/before_step/src \
    --tree sampler=/tmp/sampler_only/src --tree this=src --layers 4 --width 128 --heads 4 --block 64 \
    --tokens 1000 --json "$R/generation_trees_recipe_round3.json"
  OMP_NUM_THREADS=1 python benchmarks/generation_trees.py --tree before=/tmp/before_step/src \
    --tree sampler=/tmp/sampler_only/src --tree this=src --json "$R/generation_trees_6x384_round3.json"
  OMP_NUM_THREADS=1 python benchmarks/compare.py generate --nanogpt "$NANOGPT" \
    --config benchmarks/configs/nanogpt_cpu.yaml --set "data.corpus=$TS" --tokens 200 --repeats 5 \
    --cache-only --json "$R/generate_recipe_round3.json"
  OMP_NUM_THREADS=1 python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --tokens 500 \
    --json "$R/decode_limits_round3.json"
  OMP_NUM_THREADS=1 python benchmarks/compiled_decode.py --json "$R/compiled_decode_recipe.json"

  echo "== 7. cpu.yaml's former recipe (4,500 AdamW steps) against 2,900 Muon steps at 6e-3 (cpu.yaml since)"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 4 \
    --run "cpu train.dtype=float32 train.optimizer=adamw train.learning_rate=3e-3 train.min_lr=3e-4 train.max_iters=4500" \
    --run "cpu train.dtype=float32" \
    --target 1.55 --plot "$R/quality_cpu.svg" --json "$R/quality_cpu.json"

  echo "== 8. cpu_quick.yaml's shape, one thing changed at a time, 500 steps each, interleaved"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 2 \
    --run "$QUICK" --run "$QUICK train.weight_decay=0" --run "$QUICK train.batch_size=24" \
    --run "$QUICK model.block_size=128" --run "$QUICK model.n_embd=192 model.n_head=3" \
    --run "$QUICK model.n_layer=6" --json "$R/ablation_quick.json"

  echo "== 9. cpu_quick.yaml (batch 24) beside the reference: learning rate, steps and warm-up"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 10 \
    --run "$QUICK" --run "$QUICK train.learning_rate=1.8e-2 train.min_lr=1.8e-3" \
    --run "$QUICK train.learning_rate=2.4e-2 train.min_lr=2.4e-3" --run "$QUICK train.max_iters=400" \
    --run "$QUICK train.warmup_iters=20" \
    --run "$QUICK train.max_iters=400 train.learning_rate=1.8e-2 train.min_lr=1.8e-3" \
    --target 1.902 --json "$R/quick_sweep.json"
  W20="$QUICK train.warmup_iters=20"  # then twice on the idle machine
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 10 \
    --run "$W20" --run "$W20 train.max_iters=450" --run "$W20 train.batch_size=32 train.max_iters=375" \
    --run "$W20 train.warmup_iters=10" --run "$W20 train.learning_rate=9e-3 train.min_lr=9e-4" \
    --target 1.902 --json "$R/quick_sweep2.json"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 10 \
    --run "$QUICK" --run "$W20 train.max_iters=450" --run "$W20" --target 1.902 --json "$R/quick_final.json"

  echo "== 10. cpu.yaml at batch 24 in the same training time (1,800 steps against 2,900 of 12)"
  CPU="cpu train.dtype=float32"
  B24="train.batch_size=24 train.max_iters=1800"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU" --run "$CPU $B24" \
    --run "$CPU $B24 train.learning_rate=8e-3 train.min_lr=8e-4 train.warmup_iters=20" \
    --target 1.55 --json "$R/cpu_batch.json"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU $B24 train.warmup_iters=20 train.learning_rate=8e-3 train.min_lr=0" \
    --run "$CPU $B24 train.warmup_iters=20 train.learning_rate=1e-2 train.min_lr=1e-3" \
    --run "$CPU train.warmup_iters=20 train.batch_size=32 train.max_iters=1400 train.learning_rate=1e-2 train.min_lr=1e-3" \
    --target 1.55 --json "$R/cpu_batch2.json"

  echo "== 11. cpu.yaml as shipped beside one change each: the schedule, AdamW's beta2, weight decay, the floor"
  # (measured pinned to one core of the two, the other busy: taskset -c 1 before each python)
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU" \
    --run "$CPU train.lr_schedule=wsd train.decay_fraction=0.3 train.min_lr=0" \
    --run "$CPU train.lr_schedule=wsd train.decay_fraction=0.5 train.min_lr=0" \
    --run "$CPU train.betas=[0.9,0.95]" \
    --target 1.55 --json "$R/cpu_schedule.json"
  OMP_NUM_THREADS=1 python benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU" --run "$CPU train.weight_decay=0.2" --run "$CPU train.weight_decay=0.3" \
    --run "$CPU train.min_lr=1.6e-3" --target 1.55 --json "$R/cpu_decay.json"

  echo "== 12. round 5: the Decoder ((in, out) copies, no look-ups) against the code before it, and the reference"
  git worktree add --detach /tmp/gen_before 374c29f 2>/dev/null || true  # main before the Decoder
  OMP_NUM_THREADS=1 python benchmarks/generation_trees.py --tree before=/tmp/gen_before/src --tree this=src \
    --layers 4 --width 128 --heads 4 --block 64 --tokens 2000 --rounds 5 --json "$R/decoder_trees_recipe.json"
  OMP_NUM_THREADS=1 python benchmarks/generation_trees.py --tree before=/tmp/gen_before/src --tree this=src \
    --tokens 1000 --rounds 3 --json "$R/decoder_trees_6x384.json"
  # run twice, pinned with taskset -c 0: with the other core busy (a to c), then idle (files named
  # *_idle.json; the idle run compared 6 x 384 ten times, a to j)
  for run in a b c d e f g h i j; do
    if [[ $run < d ]]; then
      generation_at_recipe_size decoder_recipe_$run
    fi
    generation_at_6x384 decoder_6x384_$run
  done
  OMP_NUM_THREADS=1 python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --tokens 1000 \
    --json "$R/decoder_limits.json"

  echo "== 13. round 6: cpu.yaml as shipped beside one change each: the init, AdamW's learning rate, Muon's momentum, the shape"
  # Measured pinned to one core of the two, the other busy (taskset -c 1 before each python), on an
  # Intel Xeon with AVX-512 BF16 and AMX (float32 forced all the same). The shipped config here:
  # 1.5524 in 176 s (round 5, another CPU: 1.553 in 280 s). The init, AdamW-side learning rate and
  # momentum runs use three temporary train.* knobs, not in the tree: $R/cpu_round6_knobs.patch,
  # applied to a worktree of this commit (compare.py imports the src beside it):
  #   tmp_zero_proj       attn.c_proj and mlp.c_proj weights zeroed after GPT-2's init (the other
  #                       tensors' draws unchanged)
  #   tmp_adamw_lr_scale  the AdamW groups' learning rate = this x the schedule's (Muon's) one
  #   tmp_muon_momentum   Muon's momentum (torch's default and tinygpt's: 0.95)
  # The shapes' steps keep the training time: step-time ratios to the shipped config, 3 x 40 steps
  # each, interleaved, after 10 warm-up steps: block 128 x batch 12 1.059 (1,700 steps), n_embd 160
  # 1.536 (1,172), n_layer 3 0.708 (2,542), n_layer 5 1.296 (1,389).
  # Whole-split val loss after each run's last step (training seconds):
  #   shipped 1.5524 (176.0) | c_proj zero 1.5584 (176.3) | AdamW lr 0.5x 1.5626 (175.5), 2x 1.5555
  #   (175.9), 3x 1.5624 (175.8)
  #   momentum 0.9 1.5560 (181.0), 0.98 1.5812 (180.7) (shipped beside them: 1.5524, 181.3) |
  #   block 128 x batch 12 1.5644 (181.0) | n_embd 160 1.5846 (175.6) | n_layer 5 1.5692 (174.5) |
  #   n_layer 3 1.5549 (191.7: its steps ran slower than the short timing said, 5.7% over the
  #   shipped run's time; not rerun at the ~2,330 steps that time allows, which would most likely
  #   end higher, since it already ends above the shipped run with more time).
  # None pays: nothing ends below the shipped 1.5524 (nearest: n_layer 3 +0.0025 in more time,
  # AdamW 2x +0.0031, momentum 0.9 +0.0036). cpu.yaml unchanged.
  git worktree add --detach /tmp/round6 HEAD 2>/dev/null || true
  git -C /tmp/round6 apply "$PWD/$R/cpu_round6_knobs.patch" 2>/dev/null || true  # once
  OMP_NUM_THREADS=1 python /tmp/round6/benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU" --run "$CPU train.tmp_zero_proj=true" --run "$CPU train.tmp_adamw_lr_scale=0.5" \
    --run "$CPU train.tmp_adamw_lr_scale=2" --run "$CPU train.tmp_adamw_lr_scale=3" \
    --target 1.55 --json "$R/cpu_round6_init_adamw.json"
  OMP_NUM_THREADS=1 python /tmp/round6/benchmarks/compare.py quality --corpus "$TS" --evals 6 \
    --run "$CPU" --run "$CPU train.tmp_muon_momentum=0.9" --run "$CPU train.tmp_muon_momentum=0.98" \
    --run "$CPU model.block_size=128 train.batch_size=12 train.max_iters=1700" \
    --run "$CPU model.n_embd=160 train.max_iters=1172" --run "$CPU model.n_layer=3 train.max_iters=2542" \
    --run "$CPU model.n_layer=5 train.max_iters=1389" \
    --target 1.55 --json "$R/cpu_round6_momentum_shape.json"
  echo "== 14. round 6, an Intel Xeon with AMX: generation against the reference, the bounds, the quick config"
  # pinned to core 0 (taskset -c 0 before each python); a helper's training ran on core 1 from the second run
  OMP_NUM_THREADS=1 python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --tokens 1000 \
    --json "$R/xeon_limits.json"
  for run in a b c; do
    generation_at_recipe_size xeon_recipe_$run
    generation_at_6x384 xeon_6x384_$run
  done
  for run in "" _b; do  # twice, one after the other
    OMP_NUM_THREADS=1 python benchmarks/compare.py quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 10 \
      --run "$QUICK" --run "$W20 train.max_iters=450" --run "$W20" --target 1.902 --json "$R/xeon_quick$run.json"
  done
} 2>&1 | tee "$R/issue25.log"
