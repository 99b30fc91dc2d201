"""One arithmetic on every x86-64 CPU: the math libraries pinned to their AVX2 kernels.

torch (ATen's vectorised kernels), MKL, oneDNN, OpenBLAS and NumPy each choose their kernels
when they start, by the CPU's instruction set. An AVX-512 kernel adds in another order than the
AVX2 one, so the same command gave other last bits on an AVX-512 machine than on an AVX2 one:
the default leaderboard, rebuilt on an AMD EPYC with AVX-512, had every text the same but
perplexities moved in their 5th to 9th digit and graphmax paper's ref-eps-ppl from 4488.00 to 4492.53
(its exact zeros flip), and MAUVE of two identical text sets was 0.75 instead of 1 (NumPy's
AVX-512 loops). AVX2 (with FMA) is on every x86-64 CPU sold for a decade; pinned to it, that
machine gives the committed figures but the trained heads' reference perplexities (8th digit:
something in their batched hidden-state pass still depends on the machine), and the main job
ran no slower (benchmarks/cpu_arithmetic.py).

``pin_cpu_arithmetic`` sets the libraries' own environment variables. It must run before any
of them computes anything (NumPy and OpenBLAS read theirs when imported, ATen at its first
vectorised operation), so ``core`` calls it when it is imported, and every maxbench package
imports ``core`` first. A variable already set is left as it is; ``MAXBENCH_NATIVE_ARITHMETIC=1``
leaves all of them alone (each library then picks its fastest kernels). Nothing is pinned on a
CPU without AVX2 and FMA or off x86-64 (those run their own kernels; no other choice exists).
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping

#: each library's switch to its AVX2 code path
AVX2_SETTINGS = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's vectorised CPU kernels
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: the AVX2 branch
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (torch's mkldnn)
    "OPENBLAS_CORETYPE": "Haswell",  # the OpenBLAS of NumPy and SciPy: its AVX2 kernels
    # NumPy's run-time dispatched loops (exp, log, sums, ...): every AVX-512 target it has
    "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL",
}
OPT_OUT = "MAXBENCH_NATIVE_ARITHMETIC"


def _cpuinfo_field(name: str, cpuinfo: str | None) -> str | None:
    """The first value of ``name`` in /proc/cpuinfo (or in the text given), None where it is absent
    or the file cannot be read."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo (empty where it cannot be read)."""
    return set((_cpuinfo_field("flags", cpuinfo) or "").split())


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform module says."""
    return _cpuinfo_field("model name", cpuinfo) or platform.processor() or platform.machine()


def pin_cpu_arithmetic(
    environ: MutableMapping[str, str] | None = None, flags: set[str] | None = None, machine: str | None = None
) -> dict[str, str]:
    """Set each library's variable for its AVX2 kernels where the CPU has AVX2 and FMA and the
    variable is not set yet; returns the variables it set (empty when nothing was pinned)."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return {}
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return {}
    if not {"avx2", "fma"} <= (cpu_flags() if flags is None else flags):
        return {}
    chosen = {k: v for k, v in AVX2_SETTINGS.items() if k not in environ}
    environ.update(chosen)
    return chosen


def arithmetic_record() -> dict:
    """What chose the kernels of this process, for a run's manifest: the CPU, each library
    variable as set, and the kernels torch uses."""
    import torch

    return {
        "cpu": cpu_model(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pinned": {k: os.environ[k] for k in (*AVX2_SETTINGS, OPT_OUT) if k in os.environ},
    }


__all__ = ["AVX2_SETTINGS", "OPT_OUT", "arithmetic_record", "cpu_flags", "cpu_model", "pin_cpu_arithmetic"]
