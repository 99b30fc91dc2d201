"""POSG's class log-masses, side by side in one run: gathering every class's columns (as before
2026-11-24) against the catch-all read off the logits' own logsumexp with the prior reusing it.

The POSG fit computes, for every cached position, the base model's log-mass of each class
vocabulary (``POSGHead.class_lse``) and the prior (``POSGHead.prior``); decoding does the same per
step. With the catch-all, one class is the whole vocabulary, so gathering its columns copied the
whole (B, V) logits once more, and the prior reduced them again. Both ways are timed here on the
same logits, the ratio printed, and the results compared bit for bit.

    .venv/bin/python benchmarks/posg_class_mass.py --threads 1

The classes are random vocabularies with the sizes of the SmolLM2 food-reviews head (51 Penn
Treebank tags of 1 to 5,377 tokens, then the catch-all of all 49,152), at the fit's chunk of 512
positions and at a decoding batch of 48.
"""

from __future__ import annotations

import argparse
import time

import harness
import torch

harness.require_checkout()
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead  # noqa: E402

#: class sizes of the SmolLM2 food-reviews POSG head (its meta.json's class_sizes, catch-all left out)
FOOD_CLASS_SIZES = [
    9, 19, 20, 12, 31, 79, 39, 50, 1, 61, 156, 106, 1, 6, 51, 4, 293, 3327, 146, 74, 16, 75, 38, 5377, 4859,
    386, 2399, 17, 6, 112, 35, 1225, 34, 13, 39, 6, 7, 145, 1553, 880, 961, 1243, 740, 670, 22, 14, 2, 23,
    32, 1, 3,
]  # fmt: skip


def gathered(head: POSGHead, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The way before: every class's columns gathered, the total reduced again for the prior."""
    lse = torch.stack([torch.logsumexp(logits[:, m], dim=-1) for m in head.class_members], 1)
    return lse, (lse - torch.logsumexp(logits, dim=-1, keepdim=True)).clamp_min(head.PRIOR_FLOOR)


def current(head: POSGHead, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lse = head.class_lse(logits)
    return lse, head.prior(logits, lse)


def best_of(fn, head: POSGHead, logits: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(head, logits)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=harness.positive_int, default=1)
    ap.add_argument("--repeats", type=harness.positive_int, default=5)
    ap.add_argument("--vocab", type=harness.positive_int, default=49_152)
    args = ap.parse_args()
    if args.vocab < max(FOOD_CLASS_SIZES):
        ap.error(f"--vocab: at least {max(FOOD_CLASS_SIZES)}, the largest class, got {args.vocab}")
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    classes = [torch.randperm(args.vocab, generator=g)[:n].sort().values for n in FOOD_CLASS_SIZES]
    pairs = [(int(w), c) for c, ws in enumerate(classes) for w in ws]
    pairs += [(w, len(classes)) for w in range(args.vocab)]
    tags = [f"T{i}" for i in range(len(classes))] + [CATCH_ALL]
    head = POSGHead(args.vocab, tags, torch.tensor(pairs), 8, lm_prior=True)
    print(f"{harness.load_average()}; torch threads {args.threads}")
    print(f"{'positions':>9}  {'gather every class s':>20}  {'catch-all direct s':>18}  {'speed-up':>8}  bit-identical")
    for rows in (512, 48):
        logits = torch.randn(rows, args.vocab, generator=g) * 6
        same = all(torch.equal(a, b) for a, b in zip(gathered(head, logits), current(head, logits)))
        old = best_of(gathered, head, logits, args.repeats)
        new = best_of(current, head, logits, args.repeats)
        print(f"{rows:>9}  {old:>20.4f}  {new:>18.4f}  {old / new:>7.2f}x  {same}")


if __name__ == "__main__":
    harness.run(main)
