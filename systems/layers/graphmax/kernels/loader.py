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
    """The kernel module ``maxbench.systems.layers.graphmax.kernels.<name>``, with numba's pool at torch's thread count."""
    if "numba" not in sys.modules:
        # numba's pool is as large as this at most (read when numba is imported): with its default,
        # a thread per core, a 1-thread process kept a second thread spinning between the kernels
        os.environ.setdefault("NUMBA_NUM_THREADS", str(torch.get_num_threads()))
    import numba

    module = importlib.import_module(f"{__package__}.{name}")
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    return module
