#!/usr/bin/env bash
# Every CPU figure in BENCHMARKS.md, one command each, in order (about 60 minutes on 2 cores).
# Results (JSON, SVG plots, the log) go to benchmarks/results/.
#
#   bash benchmarks/cpu.sh /path/to/nanoGPT /path/to/tinyshakespeare.txt
#
# The nanoGPT checkout: mkdir -p /tmp/nanogpt && git --git-dir=<a nanoGPT clone>/.git archive 3adf61e |
# tar -x -C /tmp/nanogpt. Set OMP_NUM_THREADS=1 first on a machine that other jobs keep busy.
set -euo pipefail
cd "$(dirname "$0")/.."

NANOGPT=${1:?usage: bash benchmarks/cpu.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
SOURCE=${2:?usage: bash benchmarks/cpu.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
R=benchmarks/results
mkdir -p "$R" data
cp "$SOURCE" data/tinyshakespeare.txt  # its id cache is written beside it, so keep it in data/
TS=data/tinyshakespeare.txt
COMPARE=(python benchmarks/compare.py)

{
  echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  python -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"

  echo "== 1. training speed side by side, the reference's CPU recipe size (float32 and bfloat16)"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.dtype=float32 --json "$R/speed_recipe_float32.json"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.dtype=bfloat16 --json "$R/speed_recipe_bfloat16.json"

  echo "== 2. training speed side by side, the shakespeare_char size (dtype auto: bfloat16 here; dropout 0.2)"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config configs/shakespeare_char.yaml --set "data.corpus=$TS" \
    --rounds 10 --steps-per-round 2 --warmup 1 --json "$R/speed_shakespeare_char.json"

  echo "== 3. torch.compile at the recipe size (speed side by side, then compile time)"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.dtype=bfloat16 --set train.compile=true --json "$R/speed_recipe_compiled.json"
  python scripts/bench.py --config benchmarks/configs/nanogpt_cpu.yaml --set train.dtype=bfloat16 \
    --set train.compile=true --lengths 100 --json --quiet >"$R/bench_recipe_compiled.json"
  # the same from a cold start: inductor's on-disk cache, warm from the runs above, in a fresh folder
  TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python scripts/bench.py --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.dtype=bfloat16 --set train.compile=true --lengths 100 --json --quiet \
    >"$R/bench_recipe_compiled_cold.json"

  echo "== 4. generation, 2,000 new tokens at the shakespeare_char size"
  "${COMPARE[@]}" generate --nanogpt "$NANOGPT" --config configs/shakespeare_char.yaml \
    --set "data.corpus=$TS" --tokens 2000 --repeats 2 --json "$R/generate_shakespeare_char.json"

  echo "== 5. tinygpt bench: throughput, memory, MFU (cpu.yaml; shakespeare_char in float32 and bfloat16)"
  python scripts/bench.py --config configs/cpu.yaml --set "data.corpus=$TS" --json --quiet >"$R/bench_cpu.json"
  python scripts/bench.py --config configs/cpu.yaml --set "data.corpus=$TS" --set train.dtype=float32 --steps 20 \
    --warmup 3 --lengths 10 --json --quiet >"$R/bench_cpu_float32.json"
  for dtype in float32 bfloat16; do
    python scripts/bench.py --config configs/shakespeare_char.yaml --set "data.corpus=$TS" \
      --set train.dtype=$dtype --steps 20 --warmup 2 --lengths 100 500 --json --quiet \
      >"$R/bench_shakespeare_char_$dtype.json"
  done

  echo "== 6. memory with and without dropout at the shakespeare_char size (float32)"
  for dropout in 0.2 0.0; do
    python scripts/bench.py --config configs/shakespeare_char.yaml --set "data.corpus=$TS" \
      --set model.dropout=$dropout --set train.dtype=float32 --steps 3 --warmup 1 --lengths 10 --json --quiet \
      >"$R/bench_memory_dropout_$dropout.json"
  done

  echo "== 7. bfloat16 trains to the float32 loss (same steps, whole validation split)"
  "${COMPARE[@]}" quality --corpus "$TS" --run "configs/cpu.yaml train.dtype=float32 train.max_iters=1500" \
    --run "configs/cpu.yaml train.dtype=bfloat16 train.max_iters=1500" --evals 3 --json "$R/bf16_vs_fp32.json"

  echo "== 8. quality against wall-clock time: the reference's recipe and cpu_quick.yaml"
  "${COMPARE[@]}" quality --nanogpt "$NANOGPT" --corpus "$TS" --run configs/cpu_quick.yaml --evals 10 \
    --target 1.8 --plot "$R/quality_quick.svg" --json "$R/quality_quick.json"

  echo "== 9. quality against wall-clock time: the reference's recipe and cpu.yaml (10 minutes)"
  "${COMPARE[@]}" quality --nanogpt "$NANOGPT" --corpus "$TS" --run configs/cpu.yaml --evals 10 \
    --target 1.8 --target 1.6 --plot "$R/quality_10min.svg" --json "$R/quality_10min.json"

  echo "== 10. bfloat16 against float32 with the CPU's bfloat16 instructions and, imitated, without them"
  DTYPE_SPEED=(python benchmarks/dtype_speed.py --config configs/cpu.yaml --set "data.corpus=$TS")
  "${DTYPE_SPEED[@]}" --json "$R/dtype_speed_cpu.json"
  ONEDNN_MAX_CPU_ISA=AVX512_CORE "${DTYPE_SPEED[@]}" --json "$R/dtype_speed_cpu_avx512.json"
  ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 "${DTYPE_SPEED[@]}" --rounds 3 --json "$R/dtype_speed_cpu_avx2.json"
  for config in cpu_quick tiny; do
    python benchmarks/dtype_speed.py --config configs/$config.yaml --set "data.corpus=$TS" --rounds 10 \
      --steps-per-round 5 --json "$R/dtype_speed_$config.json"
  done
  for width_heads in 64:1 96:2; do
    python benchmarks/dtype_speed.py --config configs/cpu_quick.yaml --set "data.corpus=$TS" \
      --set model.n_embd=${width_heads%:*} --set model.n_head=${width_heads#*:} --rounds 10 --steps-per-round 5 \
      --json "$R/dtype_speed_cpu_quick_${width_heads%:*}.json"
  done
} 2>&1 | tee "$R/cpu.log"
