"""Foundations shared by every maxbench package: the one error type, interval and document types,
provenance and atomic file writing. ``core`` imports no other maxbench package.

Importing ``core`` pins the math libraries to their AVX2 kernels (``core/arithmetic.py``), so
that a result has the same bits on every x86-64 CPU; every maxbench package imports ``core``
before NumPy or torch for that reason."""

from maxbench.arithmetic import pin_cpu_arithmetic

pin_cpu_arithmetic()
