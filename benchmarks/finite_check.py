"""Are all scores finite? torch.isfinite(t).all() against maxbench's all_finite (systems/layers/base.py).

The decoding loop asks it of the model's logits at every step (and graphmax again of its scores,
and the warper of its input). Inputs are real: the embedded model's next-token logits after the
first --batch-size prompts of the food-reviews suite, and the same logits with 200 finite tokens
per row (-inf elsewhere, as after sparsemax), where all_finite takes its exact path. Prints the
median time of both over --repeats alternating runs, their ratio and whether the answers agree;
then the load average.

    .venv/bin/python benchmarks/finite_check.py --threads 1
"""

from __future__ import annotations

import argparse

import torch
from harness import alternate, load_average, positive_int, run
from top_p import inputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--batch-size", type=positive_int, default=48)
    ap.add_argument("--repeats", type=positive_int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from maxbench.systems.layers.base import all_finite

    print(f"threads {args.threads}, batch {args.batch_size}; {load_average()}")
    ways = {"isfinite().all()": lambda t: bool(torch.isfinite(t).all()), "all_finite": all_finite}
    for name, scores in inputs(args.batch_size).items():
        medians, answers = alternate(ways, args.repeats, scores)
        theirs, ours = medians["isfinite().all()"], medians["all_finite"]
        print(
            f"{name:<20} {tuple(scores.shape)}: isfinite {theirs * 1e3:6.2f} ms, all_finite {ours * 1e3:6.2f} ms, "
            f"ratio {theirs / ours:5.1f}x, same answer ({answers['all_finite']}): "
            f"{'yes' if len(set(answers.values())) == 1 else 'NO'}"
        )
    print(load_average())
    return 0


if __name__ == "__main__":
    run(main)
