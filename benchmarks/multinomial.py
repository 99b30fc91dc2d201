"""One draw per row: torch.multinomial against maxbench's multinomial_rows (systems/multinomial.py).

Inputs are real: the embedded model's next-token distributions after the first --batch-size
prompts of the food-reviews suite, whole (softmax) and after top-p 0.9 (what the default
registry samples from), each row with its own generator as the decoding loop draws. Prints the
median time of both over --repeats alternating runs, their ratio, and whether the tokens and
the generators' states are equal; beside them the device generator's draw
(``maxbench.systems.counter_sampling``: other random numbers, so other tokens); then the load average.

    .venv/bin/python benchmarks/multinomial.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import load_average, positive_int, run
from top_p import inputs


def torch_rows(probs, generators):
    return torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g)[0] for i, g in enumerate(generators)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--batch-size", type=positive_int, default=48)
    ap.add_argument("--repeats", type=positive_int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from maxbench.systems.counter_sampling import CounterGenerator
    from maxbench.systems.decoding import DecodingSetting, warp_rows
    from maxbench.systems.multinomial import multinomial_rows

    logits = inputs(args.batch_size)["LM logits"]
    warp = DecodingSetting.parse("top_p=0.9").warpers()
    cases = {"softmax": torch.softmax(logits, -1), "top-p 0.9": torch.softmax(warp_rows(warp, None, logits), -1)}
    print(f"threads {args.threads}, batch {args.batch_size}; {load_average()}")
    ways = {"torch.multinomial": torch_rows, "multinomial_rows": multinomial_rows}
    for name, probs in cases.items():
        times: dict[str, list[float]] = {k: [] for k in ways}
        draws, states = {}, {}
        for r in range(args.repeats):
            for label in list(ways) if r % 2 == 0 else list(ways)[::-1]:
                gens = [torch.Generator().manual_seed(1000 * r + i) for i in range(len(probs))]
                t0 = time.perf_counter()
                draws[label] = ways[label](probs, gens)
                times[label].append(time.perf_counter() - t0)
                states[label] = [g.get_state() for g in gens]
        same = torch.equal(*draws.values()) and all(map(torch.equal, *states.values()))
        theirs, ours = (statistics.median(times[k]) for k in ways)
        support = float((probs > 0).sum(-1).float().mean())
        device_gen = []
        for r in range(args.repeats):
            gen = CounterGenerator([1000 * r + i for i in range(len(probs))])
            t0 = time.perf_counter()
            gen.draw(probs)
            device_gen.append(time.perf_counter() - t0)
        print(
            f"{name:<10} {tuple(probs.shape)}, mean support {support:8.1f}: torch {theirs * 1e3:6.1f} ms, "
            f"maxbench {ours * 1e3:6.1f} ms, ratio {theirs / ours:4.1f}x, same tokens and generator states: "
            f"{'yes' if same else 'NO'}; device generator {statistics.median(device_gen) * 1e3:6.1f} ms"
        )
    print(load_average())
    return 0


if __name__ == "__main__":
    run(main)
