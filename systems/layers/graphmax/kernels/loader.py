"""Loading graphmax's numba kernels (``paper``, ``exact``) with numba's thread
pool sized to torch's thread count."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import torch

__all__ = ["load"]


def load(name: str) -> ModuleType:
    """The kernel module ``maxbench.systems.layers.graphmax.kernels.<name>``, with numba's pool at torch's
    thread count, and torch's thread count as it was: launching numba's OpenMP pool sets OpenMP's thread
    count, which is torch's, to the pool's size (a script that imported numba first, so that its pool
    has a thread per core, and set torch to one thread ran torch on every core after this)."""
    threads = torch.get_num_threads()
    if "numba" not in sys.modules:
        # numba's pool is as large as this at most (read when numba is imported): with its default,
        # a thread per core, a 1-thread process kept a second thread spinning between the kernels
        os.environ.setdefault("NUMBA_NUM_THREADS", str(torch.get_num_threads()))
    import numba

    module = importlib.import_module(f"{__package__}.{name}")
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # launches the pool
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return module
