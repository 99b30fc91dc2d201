"""graphmax's paper solver on the CPU: the numba kernels against the torch path, side by side in one run.

For each corpus graph and batch size it decodes the suite's first B prompts with softmax
(top-p 0.9, 32 new tokens), keeps the logits of every 4th step, and times
``graphmax(z, graph, solver="paper")`` on them three ways: the CPU default (the kernels of
``systems.layers.paper_kernels``, with the graph product that ``graphmax_paper._Product``
chooses for the graph), the same kernels with the other graph product, and the torch path
that CUDA runs (``graphmax_paper.solve(..., kernels=False)``). It prints each one's time per
call and its ratio to the torch path, and how far the outputs lie apart (the largest
difference of a probability; the iteration amplifies rounding, graphmax_paper's docstring).
Repeats alternate the order; the median is kept. The load average is printed before and after.

    python benchmarks/graphmax_paper_kernels.py --threads 2 --batch-sizes 16,48
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from graphmax_decode import load_average  # this folder's scripts run with it on sys.path


def time_calls(way: str, op, logits: list, chosen: bool):
    """graphmax paper on every kept batch of logits, one of three ways: "kernels" (the CPU
    default), "other" (the kernels with the graph product ``_Product`` did not choose),
    "torch" (the torch path); returns (seconds, outputs)."""
    from systems.layers import graphmax_paper
    from systems.layers.graphmax import graphmax

    saved, original = graphmax_paper._Product.SHORT_ROWS, graphmax_paper.solve
    if way == "other":
        graphmax_paper._Product.SHORT_ROWS = 0 if chosen else 10**9
    if way == "torch":
        graphmax_paper.solve = lambda *a: original(*a, kernels=False)
    try:
        t0 = time.perf_counter()
        out = [graphmax(z, op, solver="paper") for z in logits]
        return time.perf_counter() - t0, out
    finally:
        graphmax_paper._Product.SHORT_ROWS, graphmax_paper.solve = saved, original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpora", default="food-reviews,movie-reviews")
    ap.add_argument("--threads", type=int, default=2, help="torch (and numba) CPU threads (set deliberately)")
    ap.add_argument("--batch-sizes", default="16,48")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import numba

    from benchmark.corpora import load_corpus
    from benchmark.suites import load_suite
    from systems.decoding import DecodingSetting, decode
    from systems.graph import get_graph
    from systems.layers import graphmax_paper
    from systems.layers.graphmax import GraphOperator
    from systems.layers.softmax import SoftmaxLayer
    from systems.models import load_model

    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", threads=args.threads)
    setting = DecodingSetting(**{**DecodingSetting.parse("top_p=0.9").__dict__, "max_new_tokens": 32})
    print(f"model {args.model}, {args.threads} thread(s), numba {numba.__version__}; {load_average()}")
    print(f"{'graph':<14} {'batch':>5} {'way':<34} {'ms/call':>8} {'vs torch':>9} {'max |dx|':>9}")
    for corpus_name in args.corpora.split(","):
        op = GraphOperator.prepare(get_graph(lm, load_corpus(corpus_name)), "cpu")
        prompts = [it.prompt for it in load_suite(corpus_name).items]
        for batch in [int(b) for b in args.batch_sizes.split(",")]:
            layer, kept = SoftmaxLayer(), []
            scores = layer.scores

            def keep(logits, hidden, scores=scores, kept=kept):
                kept.append(logits.clone())
                return scores(logits, hidden)

            layer.scores = keep
            decode(lm, layer, prompts[:batch], setting, list(range(batch)))
            logits = kept[::4]
            chosen = graphmax_paper._Product(op, torch.float32).kernel
            other = "torch's CSR product" if chosen else "the kernel's product"

            ways = ["kernels", "other", "torch"]
            times: dict[str, list[float]] = {w: [] for w in ways}
            outputs = {}
            for rep in range(args.repeats):
                for way in ways[rep % 3 :] + ways[: rep % 3]:
                    seconds, outputs[way] = time_calls(way, op, logits, chosen)
                    times[way].append(seconds)
            base = statistics.median(times["torch"])
            labels = {"kernels": "kernels (default)", "other": f"kernels with {other}", "torch": "torch path (CUDA's)"}
            for way in ways:
                t = statistics.median(times[way])
                dx = max((a - b).abs().max().item() for a, b in zip(outputs[way], outputs["torch"]))
                print(
                    f"{corpus_name:<14} {batch:>5} {labels[way]:<34} {t / len(logits) * 1e3:>8.1f} "
                    f"{base / t:>8.2f}x {dx:>9.1e}"
                )
    print(f"threading layer {numba.threading_layer()}; after: {load_average()}")


if __name__ == "__main__":
    main()
