#!/usr/bin/env bash
# The float32 figures of BENCHMARKS.md's section "On a 2-core CPU without bfloat16 units", in order
# (about 35 minutes on 2 cores of an AVX2 AMD EPYC). Results go to benchmarks/results/float32/.
#
#   bash benchmarks/cpu_float32.sh /path/to/nanoGPT /path/to/tinyshakespeare.txt
#
# The nanoGPT checkout as for benchmarks/cpu.sh. Run it on a quiet machine: a second busy process
# slows a 2-thread step far more than by half.
set -euo pipefail
cd "$(dirname "$0")/.."

NANOGPT=${1:?usage: bash benchmarks/cpu_float32.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
SOURCE=${2:?usage: bash benchmarks/cpu_float32.sh NANOGPT_DIR TINYSHAKESPEARE_TXT}
R=benchmarks/results/float32
mkdir -p "$R" data
cp "$SOURCE" data/tinyshakespeare.txt
TS=data/tinyshakespeare.txt
COMPARE=(python benchmarks/compare.py)

{
  echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "== flags: $(grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  python -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"

  echo "== 1. quality against wall-clock time: the reference's recipe, cpu_quick.yaml and cpu.yaml (float32)"
  "${COMPARE[@]}" quality --nanogpt "$NANOGPT" --corpus "$TS" --evals 6 \
    --run "configs/cpu_quick.yaml train.dtype=float32" --run "configs/cpu.yaml train.dtype=float32" \
    --target 1.9 --target 1.7 --plot "$R/quality.svg" --json "$R/quality.json"

  echo "== 2. training speed side by side at the reference's CPU-recipe size, float32, then compiled"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config benchmarks/configs/nanogpt_cpu.yaml \
    --json "$R/speed_recipe.json"
  "${COMPARE[@]}" speed --nanogpt "$NANOGPT" --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.compile=true --json "$R/speed_recipe_compiled.json"
  TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python scripts/bench.py --config benchmarks/configs/nanogpt_cpu.yaml \
    --set train.compile=true --steps 10 --lengths 10 --json --quiet >"$R/bench_recipe_compiled_cold.json"

  echo "== 3. Muon against AdamW: the cost of a step at cpu.yaml's size"
  for optimizer in adamw muon; do
    python scripts/bench.py --config configs/cpu.yaml --set "data.corpus=$TS" --set train.dtype=float32 \
      --set train.optimizer=$optimizer --steps 6 --warmup 2 --lengths 10 --json --quiet \
      >"$R/bench_cpu_$optimizer.json"
  done

  echo "== 4. generation, 2,000 new tokens at the shakespeare_char size, and what the hardware allows"
  "${COMPARE[@]}" generate --nanogpt "$NANOGPT" --config configs/shakespeare_char.yaml \
    --set "data.corpus=$TS" --tokens 2000 --repeats 1 --json "$R/generate_shakespeare_char.json"
  python benchmarks/decode_limits.py --config configs/shakespeare_char.yaml --json "$R/decode_limits.json"
} 2>&1 | tee "$R/cpu_float32.log"
