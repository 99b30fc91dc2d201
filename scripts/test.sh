#!/usr/bin/env bash
# The README's test command: set everything up (idempotent) and run the whole test suite.
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export MAXBENCH_TEST_ARTIFACTS=${MAXBENCH_TEST_ARTIFACTS:-test-artifacts}
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
