"""graphmax's graph products on the CPU: scipy's CSR kernel against torch's, side by side in one run.

For each corpus graph it times ``M x = (I - A)^T (I - A) x`` on an N x batch block of
probabilities (the solver's layout: one problem per column), as ``GraphOperator`` computes it
with one torch thread (scipy's kernel) and with more (torch's CSR kernel, which splits the rows
over the threads), checks that the results are the same bits, and prints the ratio. Repeats
alternate the order; the median is kept. The load average is printed before and after.

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

    from maxbench.benchmark.corpora import load_corpus
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.models import load_model

    threads = args.threads
    lm = load_model(args.model, device="cpu", threads=1)
    print(f"model {args.model}; products M x on float32 N x batch blocks; threads {threads}; {load_average()}")
    print(
        f"{'graph':<14} {'nnz':>9} {'batch':>5} "
        + " ".join(f"{f'{t} thr. ms':>10}" for t in threads)
        + "  ratio  same bits"
    )
    for corpus in args.corpora:
        graph = get_graph(lm, load_corpus(corpus))
        op = GraphOperator.prepare(graph, "cpu")
        for batch in args.batch_sizes:
            x = torch.rand(op.n, batch, generator=torch.Generator().manual_seed(batch))
            x /= x.sum(0)
            times: dict[int, list[float]] = {t: [] for t in threads}
            results = {}
            for rep in range(args.repeats):
                for t in threads if rep % 2 == 0 else threads[::-1]:
                    torch.set_num_threads(t)
                    start = time.perf_counter()
                    results[t] = op.m_product_columns(x)
                    times[t].append(time.perf_counter() - start)
            same = all(torch.equal(a, b) for t in threads[1:] for a, b in zip(results[threads[0]], results[t]))
            med = {t: statistics.median(v) * 1000 for t, v in times.items()}
            cells = " ".join(f"{med[t]:>10.2f}" for t in threads)
            ratio = " ".join(f"{med[threads[0]] / med[t]:.2f}x" for t in threads[1:])
            print(f"{corpus:<14} {graph.nnz:>9} {batch:>5} {cells}  {ratio:>5}  {same}")
    print(f"after: {load_average()}")


if __name__ == "__main__":
    run(main)
