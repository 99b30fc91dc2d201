"""sparsemax's threshold: sorting (O(n log n)) against Michelot's iteration, side by side in one run.

Inputs are real: the embedded model's next-token logits at the last position of the first
--batch-size prompts of the food-reviews suite, and the arguments the graphmax paper solver
(Algorithm 1, lam 1, the food-reviews corpus graph) hands to sparsemax at each of its steps on
those logits (near-uniform vectors with supports of thousands of tokens). For each input set it
prints the median time of both ways over --repeats alternating runs (Michelot from its default
start; the paper solver also passes a warm start, which this leaves out), their ratio, the largest
difference of the probabilities, and how many entries are in one support but not the other
(entries within rounding of the threshold).

    .venv/bin/python benchmarks/sparsemax_threshold.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import load_average, positive_int, run


def sparsemax_by_sorting(z: torch.Tensor) -> torch.Tensor:
    from maxbench.systems.layers.sparsemax.operator import threshold_by_sorting

    z = z - z.amax(-1, keepdim=True)
    return torch.clamp(z - threshold_by_sorting(z), min=0)


def inputs(batch_size: int) -> dict[str, list[torch.Tensor]]:
    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax import paper as graphmax_paper
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.layers.graphmax.operator import graphmax
    from maxbench.systems.models import load_model

    lm = load_model("smollm2-135m", device="cpu")
    prompts = [it.prompt for it in load_suite("food-reviews").items[:batch_size]]
    enc = lm.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        logits = lm.model(**enc).logits[:, -1].float()
    # the paper solver's torch path (CUDA's) projects with sparsemax's threshold: keep its inputs
    seen: list[torch.Tensor] = []
    original = graphmax_paper.project_to_simplex
    graphmax_paper.project_to_simplex = lambda a, start=None, dim=-1: (
        seen.append(a.movedim(dim, -1).contiguous()) or original(a, start, dim)
    )
    try:
        op = GraphOperator.prepare(get_graph(lm, load_corpus("food-reviews")), "cpu", backend="torch")
        graphmax(logits, op, lam=1.0, solver="paper")
    finally:
        graphmax_paper.project_to_simplex = original
    return {"LM logits": [logits], "graphmax paper steps": seen}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--batch-size", type=positive_int, default=16)
    ap.add_argument("--repeats", type=positive_int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from maxbench.systems.layers.sparsemax.operator import sparsemax

    print(f"threads {args.threads}, batch {args.batch_size}; {load_average()}")
    for name, zs in inputs(args.batch_size).items():
        times = {"sort": [], "michelot": []}
        for r in range(args.repeats):
            order = [("sort", sparsemax_by_sorting), ("michelot", sparsemax)]
            for label, fn in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                for z in zs:
                    fn(z)
                times[label].append(time.perf_counter() - t0)
        diff = max(float((sparsemax(z) - sparsemax_by_sorting(z)).abs().max()) for z in zs)
        flips = sum(int(((sparsemax(z) > 0) != (sparsemax_by_sorting(z) > 0)).sum()) for z in zs)
        support = statistics.mean(float((sparsemax(z) > 0).sum(-1).float().mean()) for z in zs)
        t_sort, t_fast = statistics.median(times["sort"]), statistics.median(times["michelot"])
        print(
            f"{name:<22} {len(zs):>3} calls of {tuple(zs[0].shape)}, mean support {support:8.1f}: "
            f"sort {t_sort * 1e3:8.1f} ms, michelot {t_fast * 1e3:8.1f} ms, ratio {t_sort / t_fast:5.1f}x, "
            f"max |diff| {diff:.1e}, support entries that differ {flips}"
        )
    print(f"after: {load_average()}")
    return 0


if __name__ == "__main__":
    run(main)
