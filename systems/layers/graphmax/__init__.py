"""graphmax: the operator with its exact and paper solvers, the numba kernels, and its output layer.
The math is in docs/output-layers.md."""
