"""graphmax's bits on other CPUs, forced on the CPU at hand (issue 41, item 8).

On an Intel Xeon five of graphmax's bit-exactness tests failed: with more than one thread the
CPU's graph products went through torch's CSR kernel, which calls MKL's sparse product, and MKL's
Intel code adds each row's terms with fused multiply-adds (scipy's kernel does not), in an order
that also varies with the batch width. On an AMD CPU MKL takes a plain path that gives scipy's
bits, so the tests passed there. The products now run in numba (``paper_kernels.product``), and
these tests take the other CPU's code paths in subprocesses, on any x86-64 CPU:

- MKL on its Intel code: a two-function library preloaded (``LD_PRELOAD``) tells MKL that the
  CPU is an Intel one (``mkl_serv_intel_cpu_true``), as it is on the machine that failed. Under
  it the old products failed the same five tests on an AMD EPYC; it needs a C compiler and a
  torch that exports MKL's symbols (x86-64 Linux wheels do), else the test is skipped.
- numba's kernels compiled for plain x86-64 (``NUMBA_CPU_NAME=generic``: SSE2, no FMA, another
  vector width) instead of the host's CPU.

What must hold there (docs/reproducibility.md): the graph products keep scipy's bits exactly,
whatever MKL does; within one process the thread count and the compaction of finished problems
change no bit; numba's target changes no bit; and the solver's results differ from this CPU's
only by what MKL's dense kernels round otherwise (the first step's batched Newton solves,
``graphmax_presolve``): certified, and equal to within ``SOLVER_ATOL``.
"""

import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.paths import ROOT

N, TOUCHED, BATCH, LAM = 3000, 600, 24, 2.0
#: how far apart the solver's log-probabilities may lie when MKL's dense kernels round otherwise
#: (each solve stops at a relative duality gap of 1e-6, so the optima agree to about that)
SOLVER_ATOL = 1e-5


#: the compactions each solve runs with (the kernels, the CPU's default, leave the block at once
#: and never; the torch path, CUDA's, and the paper's solver, which does not compact, as they are)
COMPACTIONS = {"exact/scipy": (1, 10**9), "exact/torch": (None,), "paper/scipy": (None,)}


def probe(out: str) -> None:
    """Every number the checks below compare, computed in this process: saved to ``out`` (npz)."""
    from maxbench.systems.layers.graphmax import exact as graphmax_exact
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.layers.graphmax.operator import graphmax
    from tests.support.graphs import peaked_scores, sparse_graph

    A = sparse_graph(N, TOUCHED, density=0.01, seed=21)
    z = peaked_scores(BATCH, N, TOUCHED, seed=21, dtype=torch.float32)
    x = z.T.softmax(0).contiguous()
    res = {}
    # the code path this process's MKL takes: does its CSR product give scipy's bits?
    A32 = A.astype(np.float32)
    T = torch.sparse_csr_tensor(
        torch.from_numpy(A32.indptr.astype(np.int64)),
        torch.from_numpy(A32.indices.astype(np.int64)),
        torch.from_numpy(A32.data),
        size=A32.shape,
    )
    res["mkl_is_scipy"] = np.array(np.array_equal((T @ x).numpy(), A32 @ x.numpy()))
    ops = {backend: GraphOperator(A, backend=backend) for backend in ("scipy", "torch")}
    before, default = torch.get_num_threads(), graphmax_exact.COMPACT
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for backend, op in ops.items():
                MX, sq = op.m_product_columns(x)
                res[f"product/{backend}/{threads}"] = MX.numpy()
                res[f"norm/{backend}/{threads}"] = sq.numpy()
            for solve, compactions in COMPACTIONS.items():
                solver, backend = solve.split("/")
                for compact in compactions:
                    graphmax_exact.COMPACT = default if compact is None else compact
                    _, info = graphmax(z, ops[backend], lam=LAM, solver=solver, return_info=True, probs=False)
                    for key in ("log_probs", "gap", "iterations", "converged"):
                        res[f"{solve}/{threads}/{compact}/{key}"] = getattr(info, key).numpy()
    finally:
        torch.set_num_threads(before)
        graphmax_exact.COMPACT = default
    np.savez(out, **res)


def run_probe(tmp_path: Path, name: str, env: dict) -> dict:
    out = tmp_path / f"{name}.npz"
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import maxbench, tests.end_to_end.test_cpu_independence as t; t.probe({str(out)!r})"
    full = {**os.environ, "NUMBA_NUM_THREADS": "2", **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as f:
        return dict(f)


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    """The probe on this CPU as it is (in a subprocess too, so that numba's pool has 2 threads)."""
    return run_probe(tmp_path_factory.mktemp("here"), "here", {})


def intel_mkl_env(tmp_path: Path) -> dict:
    """The environment under which MKL takes this CPU for an Intel one; skips where that cannot be made."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("MKL's code paths are forced on x86-64 Linux only")
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL: its CSR product is torch's own")
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        exported = hasattr(ctypes.CDLL(str(lib)), "mkl_serv_intel_cpu_true")
    except OSError:
        exported = False
    if not exported:
        pytest.skip(f"{lib.name} does not export MKL's CPU check (mkl_serv_intel_cpu_true)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the library that tells MKL the CPU is an Intel one")
    src, so = tmp_path / "intel_cpu.c", tmp_path / "libintel_cpu.so"
    src.write_text("int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True, capture_output=True)
    preload = " ".join(p for p in (str(so), os.environ.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload}


def assert_no_bit_depends_on_threads_or_compaction(res: dict, where: str) -> None:
    for backend in ("scipy", "torch"):
        for kind in ("product", "norm"):
            assert np.array_equal(res[f"{kind}/{backend}/1"], res[f"{kind}/{backend}/2"]), (where, kind, backend)
    for solve, compactions in COMPACTIONS.items():
        for key in ("log_probs", "gap", "iterations", "converged"):
            first = res[f"{solve}/1/{compactions[0]}/{key}"]
            for threads in (1, 2):
                for compact in compactions:
                    got = res[f"{solve}/{threads}/{compact}/{key}"]
                    assert np.array_equal(got, first), (where, solve, threads, compact, key)


def test_this_cpu_gives_the_same_bits_for_any_thread_count_and_compaction(here):
    assert np.unique(here["exact/scipy/1/1/iterations"]).size > 1  # problems finish at different steps
    assert_no_bit_depends_on_threads_or_compaction(here, "this CPU")
    # the CPU's products are scipy's, on either backend
    for backend in ("scipy", "torch"):
        assert np.array_equal(here[f"product/{backend}/2"], here["product/scipy/1"]), backend


def test_mkl_on_its_intel_code_changes_no_bit_of_the_products(here, tmp_path):
    """The Intel machine's failure, forced here: MKL's CSR product is no longer scipy's, yet
    graphmax's products keep scipy's bits and no bit depends on threads or compaction."""
    intel = run_probe(tmp_path, "intel-mkl", intel_mkl_env(tmp_path))
    if bool(intel["mkl_is_scipy"]):
        pytest.skip("MKL's CSR product gives scipy's bits even on its Intel code here: no other path to force")
    assert_no_bit_depends_on_threads_or_compaction(intel, "MKL on its Intel code")
    for key, value in here.items():
        if key.startswith(("product/", "norm/")):
            assert np.array_equal(intel[key], value), key
    for solve, compactions in COMPACTIONS.items():
        key = f"{solve}/2/{compactions[0]}"
        if solve.startswith("exact"):
            assert intel[f"{key}/converged"].all() and here[f"{key}/converged"].all(), solve
        np.testing.assert_allclose(intel[f"{key}/log_probs"], here[f"{key}/log_probs"], rtol=0, atol=SOLVER_ATOL)


def test_numba_compiled_for_plain_x86_64_gives_the_same_bits(here, tmp_path):
    """numba's kernels (no fastmath, no contraction) give the same bits compiled for plain x86-64
    (SSE2) as for this CPU: every number of the probe, the solvers' included."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("'generic' is x86-64's baseline target")
    generic = run_probe(tmp_path, "generic-numba", {"NUMBA_CPU_NAME": "generic"})
    mismatched = [key for key, value in here.items() if not np.array_equal(generic[key], value)]
    assert not mismatched, json.dumps(mismatched)
