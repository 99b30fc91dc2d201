#!/usr/bin/env bash
# The README's test command: set everything up (idempotent) and run the whole test suite.
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export MAXBENCH_TEST_ARTIFACTS=${MAXBENCH_TEST_ARTIFACTS:-test-artifacts}
# Two test processes (pytest-xdist), a test file each at a time so that a module's fixtures are
# built once: about half the wall time on 2 cores. "-n 0" among the arguments runs in one process.
# --no-loadscope-reorder: the files go out in the order tests/conftest.py gives (the long ones first).
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder "$@"
