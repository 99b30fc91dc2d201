#!/usr/bin/env bash
# The README's main command: set everything up (idempotent) and run the default leaderboard:
# the default registry (smollm2-135m x softmax, sparsemax, graphmax exact/paper, KerBS, POSG,
# nucleus sampling) on the food-reviews suite. Extra arguments go to `maxbench run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/maxbench run "$@"
