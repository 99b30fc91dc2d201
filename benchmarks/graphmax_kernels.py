"""graphmax's solvers on the CPU: the numba kernels against torch's operations, side by side in one run.

For each corpus graph and batch size it decodes the suite's first B prompts with softmax
(top-p 0.9, 32 new tokens), keeps the logits of every 4th step, and times ``graphmax`` on them
for each solver (``--solvers``) three ways:

- exact: the CPU default (``maxbench.systems.layers.graphmax.kernels.exact``, with the graph products of the
  scipy backend), torch's operations with the same products (the CPU's path before the
  kernels), and the torch path that CUDA runs (``backend="torch"``: torch's operations, its graph
  products on the CPU numba's ``paper_kernels.product``, as torch's CSR kernel gave other bits on
  an Intel CPU, issue 41);
- paper: the CPU default (``maxbench.systems.layers.graphmax.kernels.paper``, with the graph product that
  ``graphmax_paper._Product`` chooses for the graph), the same kernels with the other graph
  product, and the torch path that CUDA runs (``graphmax_paper.solve(..., kernels=False)``).

It prints each one's time per call and its ratio to the last (the torch path), the mean steps
(exact) and how far the outputs lie apart (the largest difference of a probability; the
paper's iteration amplifies rounding, graphmax_paper's docstring). Repeats alternate the
order; the median is kept. The load average is printed before and after.

    python benchmarks/graphmax_kernels.py --threads 2 --batch-sizes 16,48
    python benchmarks/graphmax_kernels.py --solvers exact --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import torch
from harness import check_inputs, load_average, names, positive_int, positive_ints, run


@contextmanager
def way_of(solver: str, way: str, chosen: bool):
    """Patch the solver for one way (see the module docstring); ``chosen``: whether
    ``graphmax_paper._Product`` chose the kernel's product for the graph."""
    from maxbench.systems.layers.graphmax import paper as graphmax_paper
    from maxbench.systems.layers.graphmax.kernels import loader as cpu_kernels

    saved = graphmax_paper._Product.SHORT_ROWS, graphmax_paper.solve, cpu_kernels.load
    original_solve, original_load = saved[1], saved[2]
    if solver == "paper" and way == "other":
        graphmax_paper._Product.SHORT_ROWS = 0 if chosen else 10**9
    if solver == "paper" and way == "torch":
        graphmax_paper.solve = lambda *a: original_solve(*a, kernels=False)
    if solver == "exact" and way == "torch ops":
        cpu_kernels.load = lambda name: None if name == "exact_kernels" else original_load(name)
    try:
        yield
    finally:
        graphmax_paper._Product.SHORT_ROWS, graphmax_paper.solve, cpu_kernels.load = saved


def time_calls(solver: str, way: str, ops: dict, logits: list, chosen: bool):
    """graphmax on every kept batch of logits; returns (seconds, probabilities, mean steps)."""
    from maxbench.systems.layers.graphmax.operator import graphmax

    op = ops["torch"] if way == "torch" and solver == "exact" else ops["scipy"]
    with way_of(solver, way, chosen):
        t0 = time.perf_counter()
        out = [graphmax(z, op, solver=solver, return_info=True) for z in logits]
        seconds = time.perf_counter() - t0
    steps = torch.cat([info.iterations for _, info in out]).double().mean().item()
    return seconds, [x for x, _ in out], steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpora", type=names, default="food-reviews,movie-reviews")
    ap.add_argument("--solvers", type=names, default="exact,paper")
    ap.add_argument("--threads", type=positive_int, default=2, help="torch (and numba) CPU threads (set deliberately)")
    ap.add_argument("--batch-sizes", type=positive_ints, default="16,48")
    ap.add_argument("--repeats", type=positive_int, default=3)
    args = ap.parse_args()
    solvers = args.solvers
    if any(s not in ("exact", "paper") for s in solvers):
        ap.error("--solvers: exact, paper or both")
    check_inputs(args.model, args.corpora, args.corpora)

    import numba

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax import paper as graphmax_paper
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.layers.softmax import SoftmaxLayer
    from maxbench.systems.models import load_model

    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", threads=args.threads)
    setting = DecodingSetting(**{**DecodingSetting.parse("top_p=0.9").__dict__, "max_new_tokens": 32})
    print(f"model {args.model}, {args.threads} thread(s), numba {numba.__version__}; {load_average()}")
    print(
        f"{'graph':<14} {'batch':>5} {'solver':<6} {'way':<40} {'ms/call':>8} {'vs last':>8} {'steps':>6} {'max |dx|':>9}"
    )
    for corpus_name in args.corpora:
        graph = get_graph(lm, load_corpus(corpus_name))
        ops = {backend: GraphOperator.prepare(graph, "cpu", backend=backend) for backend in ("scipy", "torch")}
        prompts = [it.prompt for it in load_suite(corpus_name).items]
        for batch in args.batch_sizes:
            layer, kept = SoftmaxLayer(), []
            scores = layer.scores

            def keep(logits, hidden, scores=scores, kept=kept):
                kept.append(logits.clone())
                return scores(logits, hidden)

            layer.scores = keep
            decode(lm, layer, prompts[:batch], setting, list(range(batch)))
            logits = kept[::4]
            chosen = graphmax_paper._Product(ops["scipy"], torch.float32).kernel
            for solver in solvers:
                if solver == "exact":
                    ways = ["kernels", "torch ops", "torch"]
                    labels = {
                        "kernels": "kernels (default)",
                        "torch ops": "torch's operations, scipy's products",
                        "torch": "torch path (CUDA's)",
                    }
                else:
                    other = "the graph operator's product" if chosen else "the kernel's product"
                    ways = ["kernels", "other", "torch"]
                    labels = {
                        "kernels": "kernels (default)",
                        "other": f"kernels with {other}",
                        "torch": "torch path (CUDA's)",
                    }
                times: dict[str, list[float]] = {w: [] for w in ways}
                outputs, steps = {}, {}
                for rep in range(args.repeats):
                    for way in ways[rep % 3 :] + ways[: rep % 3]:
                        seconds, outputs[way], steps[way] = time_calls(solver, way, ops, logits, chosen)
                        times[way].append(seconds)
                base = statistics.median(times[ways[-1]])
                for way in ways:
                    t = statistics.median(times[way])
                    dx = max((a - b).abs().max().item() for a, b in zip(outputs[way], outputs[ways[-1]]))
                    print(
                        f"{corpus_name:<14} {batch:>5} {solver:<6} {labels[way]:<40} {t / len(logits) * 1e3:>8.1f} "
                        f"{base / t:>7.2f}x {steps[way]:>6.2f} {dx:>9.1e}"
                    )
    print(f"threading layer {numba.threading_layer()}; after: {load_average()}")


if __name__ == "__main__":
    run(main)
