"""Loading graphmax's numba kernels (maxbench.systems.layers.graphmax.kernels.loader) leaves torch's thread count as the
caller set it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import numba  # first, as a user's script may: numba's pool then has NUMBA_NUM_THREADS threads
import torch

torch.set_num_threads(1)
from maxbench.systems.layers.graphmax.operator import graphmax
from tests.support.graphs import peaked_scores, sparse_graph

A = sparse_graph(600, 200, density=0.01, seed=3)
graphmax(peaked_scores(4, 600, 200, seed=3, dtype=torch.float32), A, probs=False)
print(torch.get_num_threads(), numba.get_num_threads())
"""


def test_a_script_that_imported_numba_first_keeps_its_torch_thread_count():
    """Launching numba's OpenMP pool sets OpenMP's thread count, which is torch's, to the pool's size: a script
    that imported numba before maxbench (a pool of two threads here) and set torch to one thread ran torch on two
    after graphmax's kernels loaded. In a fresh process, since the pool is launched once per process."""
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1"]
