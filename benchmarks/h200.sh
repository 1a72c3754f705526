#!/usr/bin/env bash
# The GPU benchmark, in one go (about 6 minutes on an H200): configs/shakespeare_char.yaml on
# tiny Shakespeare in bfloat16 with torch.compile. It records
#   1. the CUDA tests (they skip on machines without CUDA);
#   2. `tinygpt bench`: training tokens/s, compile time, peak memory, MFU against the bfloat16
#      matmul peak this run measures, generation tokens/s with and without the KV cache;
#   3. a full training run (5,000 steps): the wall time at which the validation loss (the
#      200-batch estimate, as nanoGPT reports its 1.4697) first reaches 1.47, and the loss of
#      best.pt on the whole validation split.
#
# Usage, from the repository root, on a machine with CUDA, PyTorch, tqdm and PyYAML:
#   bash benchmarks/h200.sh path/to/tinyshakespeare.txt [results folder]
# Results go to $OUT when it is set (the device machine's return folder), else benchmarks/results/h200.
# A session lent the H200 copies the corpus into an ignored folder first, then carries it:
#   mkdir -p .bench-data && cp /work/shared/data/tinyshakespeare.txt .bench-data/
#   echo /.bench-data/ >> .git/info/exclude
#   run(command="bash benchmarks/h200.sh .bench-data/tinyshakespeare.txt", carry=[".bench-data"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")/.."

CORPUS=${1:?usage: bash benchmarks/h200.sh path/to/tinyshakespeare.txt [results folder]}
RESULTS=${2:-${OUT:-benchmarks/results/h200}}
RUN_DIR=$(mktemp -d)/shakespeare_char  # checkpoints stay out of the results (hundreds of MB)
TARGET=1.47
mkdir -p "$RESULTS"
export PYTHONPATH=src PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
GPU=(--set "data.corpus=$CORPUS" --set train.device=cuda --set train.dtype=bfloat16 --set train.compile=true)

{
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"

  echo "== CUDA tests"
  "$PYTHON" -m pytest -q -rs tests/core/test_device_paths.py tests/app/test_bench.py tests/app/test_evaluate.py

  echo "== benchmark (bfloat16, compiled)"
  "$PYTHON" scripts/bench.py --config configs/shakespeare_char.yaml "${GPU[@]}" --steps 50 --warmup 10 \
    --json --quiet >"$RESULTS/bench.json"
  "$PYTHON" -c "
import json, sys
sys.path.insert(0, 'src')
from tinygpt.app.bench import format_report
print(format_report(json.load(open('$RESULTS/bench.json'))))"

  echo "== training to val loss $TARGET (5,000 steps, bfloat16, compiled)"
  start=$(date +%s)
  "$PYTHON" scripts/train.py --config configs/shakespeare_char.yaml "${GPU[@]}" --set "out_dir=$RUN_DIR" --quiet
  echo "whole run: $(($(date +%s) - start)) s, process start and compile included"
  cp "$RUN_DIR/metrics.jsonl" "$RESULTS/metrics.jsonl"
  "$PYTHON" -c "
import json
rows = [json.loads(line) for line in open('$RESULTS/metrics.jsonl')]
hit = next((r for r in rows if r['val_loss'] <= $TARGET), None)
best = min(rows, key=lambda r: r['val_loss'])
print(f\"best val loss (200-batch estimate) {best['val_loss']:.4f} at step {best['step']}, {best['time_s']:.0f} s\")
print(f\"first val loss <= $TARGET: \" + (f\"step {hit['step']}, {hit['time_s']:.1f} s of training wall time\" if hit else 'not reached'))"
  "$PYTHON" benchmarks/val_loss.py "$RUN_DIR/best.pt" --device cuda
} 2>&1 | tee "$RESULTS/h200.log"
