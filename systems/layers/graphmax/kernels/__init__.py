"""graphmax's numba CPU kernels (the exact solver's and the paper solver's), and their loader."""
