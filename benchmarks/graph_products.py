"""graphmax's graph products on the CPU: scipy's CSR kernel, numba's and torch's, side by side in one run.

For each corpus graph it times ``M x = (I - A)^T (I - A) x`` on an N x batch block of
probabilities (the solver's layout: one problem per column), as ``GraphOperator`` computes it
with one torch thread (scipy's kernel) and with more (numba's ``paper_kernels.product``, which
splits the rows over the threads), checks that the results are the same bits, and prints the
ratio. Beside each thread count above one it times the same two products through torch's CSR
kernel, which the CPU ran before issue 41 (MKL's sparse product: scipy's bits on an AMD CPU,
not on an Intel one, so it is gone), and prints numba's time over MKL's (``numba/MKL``) and
whether MKL's bits are scipy's. Repeats alternate the order; the median is kept. The load
average is printed before and after.

    python benchmarks/graph_products.py --threads 1,2 --batch-sizes 16,48
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import check_inputs, load_average, names, positive_int, positive_ints, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpora", type=names, default="food-reviews,movie-reviews")
    ap.add_argument(
        "--threads",
        type=positive_ints,
        default="1,2",
        help="comma-separated torch thread counts; the first is the baseline",
    )
    ap.add_argument("--batch-sizes", type=positive_ints, default="16,48")
    ap.add_argument("--repeats", type=positive_int, default=20)
    args = ap.parse_args()
    check_inputs(args.model, args.corpora)

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.models import load_model

    threads = args.threads
    lm = load_model(args.model, device="cpu", threads=1)
    print(f"model {args.model}; products M x on float32 N x batch blocks; threads {threads}; {load_average()}")
    more = [t for t in threads if t > 1]
    print(
        f"{'graph':<14} {'nnz':>9} {'batch':>5} "
        + " ".join(f"{f'{t} thr. ms':>10}" for t in threads)
        + "  ratio  same bits"
        + "".join(f"  {f'MKL {t} thr.':>10} {'numba/MKL':>9} {'MKL bits':>8}" for t in more)
    )
    for corpus in args.corpora:
        graph = get_graph(lm, load_corpus(corpus))
        op = GraphOperator.prepare(graph, "cpu")
        for batch in args.batch_sizes:
            x = torch.rand(op.n, batch, generator=torch.Generator().manual_seed(batch))
            x /= x.sum(0)
            ways = [*threads, *(("MKL", t) for t in more)]
            times: dict = {w: [] for w in ways}
            results = {}
            for rep in range(args.repeats):
                for w in ways if rep % 2 == 0 else ways[::-1]:
                    torch.set_num_threads(w[1] if isinstance(w, tuple) else w)
                    start = time.perf_counter()
                    results[w] = mkl_products(op, x) if isinstance(w, tuple) else op.m_product_columns(x)[0]
                    times[w].append(time.perf_counter() - start)
            same = all(torch.equal(results[threads[0]], results[t]) for t in threads[1:])
            med = {w: statistics.median(v) * 1000 for w, v in times.items()}
            cells = " ".join(f"{med[t]:>10.2f}" for t in threads)
            ratio = " ".join(f"{med[threads[0]] / med[t]:.2f}x" for t in threads[1:])
            mkl = "".join(
                f"  {med['MKL', t]:>10.2f} {med[t] / med['MKL', t]:>8.2f}x "
                f"{str(torch.equal(results['MKL', t], results[threads[0]])):>8}"
                for t in more
            )
            print(f"{corpus:<14} {graph.nnz:>9} {batch:>5} {cells}  {ratio:>5}  {same}{mkl}")
    print(f"after: {load_average()}")


def mkl_products(op, XT: torch.Tensor) -> torch.Tensor:
    """``M x`` as the CPU computed it with more than one thread before issue 41: torch's CSR kernel
    (MKL's sparse product) on the scipy backend's arrays."""
    import warnings

    import numpy as np

    if not hasattr(op, "_mkl"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            op._mkl = [
                torch.sparse_csr_tensor(*(torch.from_numpy(a) for a in (M.indptr, M.indices, M.data)), M.shape)
                for M in op.matrices(XT.dtype)
            ]
    A, AT = op._mkl
    X = XT.contiguous()
    BX = (A @ X).numpy()
    np.subtract(X.numpy(), BX, out=BX)
    MX = (AT @ torch.from_numpy(BX)).numpy()
    np.subtract(BX, MX, out=MX)
    return torch.from_numpy(MX)


if __name__ == "__main__":
    run(main)
