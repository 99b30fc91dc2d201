"""softmax vs sparsemax vs graphmax (exact) vs graphmax (paper's Algorithm 1), side by side in one run.

Same model, same prompts (the first B prompts of the corpus's suite, for each B of
--batch-sizes), same seeds and decoding setting; the only difference is the output layer.
For each corpus graph and batch size it prints tokens/s of each layer and the ratio to
softmax (by wall-clock time and by this process's CPU time, which other processes on a
shared machine disturb less), the output layer's share of the decoding time (its ``scores``
call, CPU time), the solver's iterations and certified duality gap per token (every row of
every step the solver ran, as the layer reported them, unrounded; "max rel. gap" is the
largest gap / max(1, |f|), the relative gap that the tolerance bounds), the mean entropy of the
distributions, and the first generations of each layer next to each other. Repeats
alternate the layers' order so that noise from other processes hits them alike; the median
is kept.

The load average (``uptime``'s three figures) is printed before and after each table: the
ratios are measured side by side, but absolute rates on a shared machine mean little without it.

    python benchmarks/graphmax_decode.py --threads 1 --batch-sizes 16,48 --new-tokens 64
    python benchmarks/graphmax_decode.py --layers "softmax,graphmax exact,graphmax paper"
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import check_inputs, load_average, names, nonnegative_int, positive_int, positive_ints, run

LAYERS = ("softmax", "sparsemax", "graphmax exact", "graphmax paper")


def paper_kernels_line() -> str:
    """What ran the paper solver's CPU kernels (maxbench.systems.layers.graphmax.kernels.paper): numba's version
    and threading layer (omp where the system's libgomp is there, else numba's workqueue)."""
    import numba

    return f"graphmax paper's CPU kernels: numba {numba.__version__}, threading layer {numba.threading_layer()}"


def record_solver_stats(layer) -> dict[str, list[torch.Tensor]]:
    """Keep every step's iterations and gap as the layer reports them (the run files round
    statistics to a few decimals, which would show gaps of 1e-7 as 0)."""
    kept: dict[str, list[torch.Tensor]] = {"iterations": [], "gap": [], "relative_gap": []}
    report = layer.step_stats

    def step_stats():
        stats = report()
        info = getattr(layer, "last_info", None)
        if info is not None:
            stats = {**stats, "relative_gap": info.relative_gap}
        for key, values in kept.items():
            if key in stats:
                values.append(stats[key].detach().double().cpu())
        return stats

    layer.step_stats = step_stats
    return kept


def time_scores(layer) -> list[float]:
    """Accumulate the CPU time of the layer's ``scores`` calls (the output layer's own work)."""
    spent = [0.0]
    scores = layer.scores

    def timed(logits, hidden):
        start = time.process_time()
        out = scores(logits, hidden)
        spent[0] += time.process_time() - start
        return out

    layer.scores = timed
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument(
        "--corpora",
        type=names,
        default="food-reviews,movie-reviews",
        help="corpora whose graphs are used; each one's suite gives the prompts",
    )
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--batch-sizes", type=positive_ints, default="16,48", help="comma-separated batch sizes, each timed on its own"
    )
    ap.add_argument("--new-tokens", type=positive_int, default=64)
    ap.add_argument("--decoding", default="top_p=0.9")
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument(
        "--repeats", type=positive_int, default=2, help="timed runs of softmax and exact (sparsemax, paper: one)"
    )
    ap.add_argument("--show", type=nonnegative_int, default=2, help="generations printed per corpus and batch size")
    ap.add_argument(
        "--layers",
        default=",".join(LAYERS),
        help=f"comma-separated layers to time, softmax always included (from: {', '.join(LAYERS)})",
    )
    ap.add_argument(
        "--generator",
        default=None,
        help="cpu or device: the random generator of sampled rows (default: the device's, as a run draws)",
    )
    args = ap.parse_args()
    chosen = ["softmax"] + [name for name in args.layers.split(",") if name and name != "softmax"]
    unknown = [name for name in chosen if name not in LAYERS]
    if unknown:
        ap.error(f"unknown layer {unknown[0]!r}; choose from {', '.join(LAYERS)}")

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.decoding import DecodingSetting, check_generator, decode, default_generator
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax.layer import GraphmaxLayer
    from maxbench.systems.layers.graphmax.operator import check_graphmax_args
    from maxbench.systems.layers.softmax import SoftmaxLayer
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer
    from maxbench.systems.models import choose_device, load_model

    # every name and setting is checked before the model loads (each corpus's suite gives the prompts)
    check_inputs(args.model, args.corpora, args.corpora)
    check_graphmax_args(args.lam, "exact", 1e-6, 100, None)
    setting = DecodingSetting.parse(args.decoding)
    setting = DecodingSetting(**{**setting.__dict__, "max_new_tokens": args.new_tokens})
    torch.set_num_threads(args.threads)
    generator = check_generator(args.generator or default_generator(choose_device(args.device)))
    lm = load_model(args.model, device=args.device, threads=args.threads)
    batch_sizes = args.batch_sizes
    print(
        f"model {args.model} on {lm.device}, {torch.get_num_threads()} torch thread(s), batch sizes {batch_sizes}, "
        f"{args.new_tokens} new tokens, decoding {setting.label} ({generator} generator), lam {args.lam}"
    )
    once = ("sparsemax", "graphmax paper")  # slow or not the subject: one timed run each

    for corpus_name in args.corpora:
        corpus = load_corpus(corpus_name)
        graph = get_graph(lm, corpus)
        suite_prompts = [it.prompt for it in load_suite(corpus_name).items]
        for batch in batch_sizes:
            prompts = suite_prompts[:batch]
            seeds = list(range(len(prompts)))
            make = {
                "softmax": SoftmaxLayer,
                "sparsemax": SparsemaxLayer,
                "graphmax exact": lambda: GraphmaxLayer(lam=args.lam, solver="exact"),
                "graphmax paper": lambda: GraphmaxLayer(lam=args.lam, solver="paper"),
            }
            layers = {name: make[name]() for name in chosen}
            for layer in layers.values():
                if isinstance(layer, GraphmaxLayer):
                    layer.use_graph(graph, lm)
            print(f"\n== {corpus_name}, batch {len(prompts)}: graph nnz {graph.nnz}; {load_average()}")
            decode(lm, layers["softmax"], prompts[:2], DecodingSetting(max_new_tokens=2), seeds[:2])  # warm-up
            times: dict[str, list[float]] = {name: [] for name in layers}
            cpu_times: dict[str, list[float]] = {name: [] for name in layers}
            layer_cpu: dict[str, list[float]] = {name: [] for name in layers}
            results: dict[str, list[dict]] = {}
            solver_stats = {name: record_solver_stats(layer) for name, layer in layers.items()}
            scores_cpu = {name: time_scores(layer) for name, layer in layers.items()}
            order = list(layers)
            for rep in range(args.repeats):
                for name in order[rep % len(order) :] + order[: rep % len(order)]:
                    if name in once and times[name]:
                        continue
                    for values in solver_stats[name].values():
                        values.clear()
                    scores_cpu[name][0] = 0.0
                    t0, c0 = time.perf_counter(), time.process_time()
                    results[name] = decode(lm, layers[name], prompts, setting, seeds, generator=generator)
                    times[name].append(time.perf_counter() - t0)
                    cpu_times[name].append(time.process_time() - c0)
                    layer_cpu[name].append(scores_cpu[name][0])
            print_table(results, times, cpu_times, layer_cpu, solver_stats)
            if "graphmax paper" in layers and torch.device(lm.device).type == "cpu":
                print(paper_kernels_line())
            print(f"after: {load_average()}")
            for i in range(min(args.show, len(prompts))):
                print(f"\n-- prompt: {prompts[i]}")
                for name, rows in results.items():
                    print(f"   [{name}] {rows[i]['text']!r}")


def print_table(results, times, cpu_times, layer_cpu, solver_stats) -> None:
    def tokens(rows):  # every sampled token, the EOS included
        return sum(r["n_tokens"] + (r["finish"] == "eos") for r in rows)

    def mean_stat(rows, key):
        vals = [v for r in rows for v in r["stats"].get(key, []) if v is not None]
        return sum(vals) / len(vals) if vals else float("nan")

    def solver(name, key, how):
        vals = solver_stats[name].get(key)
        return how(torch.cat(vals)).item() if vals else float("nan")

    base = tokens(results["softmax"]) / statistics.median(times["softmax"])
    base_cpu = tokens(results["softmax"]) / statistics.median(cpu_times["softmax"])
    print(
        f"{'layer':<16} {'tok/s':>7} {'vs softmax':>10} {'(CPU time)':>10} {'layer share':>11} {'iterations':>10} "
        f"{'max it.':>7} {'mean gap':>9} {'max gap':>9} {'max rel.':>9} {'entropy':>8} {'support':>8}"
    )
    for name, rows in results.items():
        rate = tokens(rows) / statistics.median(times[name])
        rate_cpu = tokens(rows) / statistics.median(cpu_times[name])
        share = statistics.median(c / t for c, t in zip(layer_cpu[name], cpu_times[name]))
        print(
            f"{name:<16} {rate:>7.1f} {rate / base:>9.2f}x {rate_cpu / base_cpu:>9.2f}x {share:>10.1%} "
            f"{solver(name, 'iterations', lambda t: t.float().mean()):>10.1f} "
            f"{solver(name, 'iterations', lambda t: t.max()):>7.0f} {solver(name, 'gap', torch.mean):>9.1e} "
            f"{solver(name, 'gap', torch.max):>9.1e} {solver(name, 'relative_gap', torch.max):>9.1e} "
            f"{mean_stat(rows, 'entropy'):>8.2f} "
            f"{mean_stat(rows, 'support'):>8.0f}"
        )


if __name__ == "__main__":
    run(main)
