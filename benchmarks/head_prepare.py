"""The head fits' preparation steps side by side in one run: allocating every chunk's temporaries
(as before 2026-11-29) against reusing them (``maxbench.systems.layers.workspace``).

POSG's fit computes, for every cached position, the logits ``h @ W^T`` and each class vocabulary's
log-mass (``systems/layers/posg/fit.py``, ``positions``); KerBS's fit the log-sum-exp of the frozen
words' logits (``systems/layers/kerbs/fit.py``, ``to_train_data``). Before, each chunk allocated
its (chunk, V) logits, one gathered copy per class and one (chunk, n) difference per
``torch.logsumexp``; now the logits go into one reused buffer, the classes are gathered by one
``index_select`` into another, and the log-sum-exps write their differences into a third. Both ways
run here on the same positions, alternating, at the fits' own chunks (512 for POSG, 2048 for
KerBS); the script prints the median wall and CPU seconds per 1,000 positions, their ratio, and
whether the results are the same bits.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/head_prepare.py --threads 1

The data are random with the SmolLM2 food-reviews sizes: a 49,152 x 576 output embedding, fp16
hidden states, the POSG head's 51 tag classes and its catch-all, KerBS's 8,192 trained words.
"""

from __future__ import annotations

import argparse
import statistics
import time

import harness
import numpy as np
import torch

harness.require_checkout()
from posg_class_mass import FOOD_CLASS_SIZES  # noqa: E402

from maxbench.systems import hidden_cache as hc  # noqa: E402
from maxbench.systems.layers.kerbs.fit import to_train_data  # noqa: E402
from maxbench.systems.layers.posg.fit import positions  # noqa: E402
from maxbench.systems.layers.posg.head import CATCH_ALL, POSGHead  # noqa: E402

VOCAB, HIDDEN, ACTIVE = 49_152, 576, 8_192


@torch.no_grad()
def posg_allocating(head: POSGHead, part, weight: torch.Tensor, chunk: int = 512) -> tuple[torch.Tensor, ...]:
    """POSG's positions as computed before: fresh logits, one gathered copy and one logsumexp per class."""
    n = len(part)
    terms, prior = torch.empty((n, len(head.tags))), torch.empty((n, len(head.tags)))
    for s in range(0, n, chunk):
        h = torch.from_numpy(np.array(part.hidden[s : s + chunk])).float()
        t = torch.from_numpy(np.array(part.target[s : s + chunk])).long()
        logits = h @ weight.T
        lse = torch.full((len(h), len(head.tags)), -float("inf"))
        for c, members in enumerate(head.class_members):
            if c == head.whole:
                lse[:, c] = torch.logsumexp(logits.contiguous(), dim=-1)
            elif len(members):
                lse[:, c] = torch.logsumexp(torch.index_select(logits, 1, members), dim=-1)
        own = logits.gather(1, t[:, None])
        terms[s : s + len(t)] = torch.where(head.membership[t], own - lse, torch.full_like(lse, -float("inf")))
        prior[s : s + len(t)] = (lse - lse[:, head.whole, None]).clamp_min(head.PRIOR_FLOOR)
    return terms, prior


@torch.no_grad()
def kerbs_allocating(part, weight: torch.Tensor, active: torch.Tensor, chunk: int = 2048) -> tuple[torch.Tensor, ...]:
    """KerBS's frozen-tail log-sum-exp (and targets' logits) as computed before: fresh logits and a
    fresh difference per chunk."""
    tail = torch.ones(weight.shape[0], dtype=torch.bool)
    tail[active] = False
    w_tail = weight[tail]
    hidden = torch.from_numpy(np.array(part.hidden))
    target = torch.from_numpy(np.array(part.target)).long()
    tail_lse, own = torch.empty(len(hidden)), torch.empty(len(hidden))
    for s in range(0, len(hidden), chunk):
        h = hidden[s : s + chunk].float()
        tail_lse[s : s + chunk] = torch.logsumexp(h @ w_tail.T, dim=-1)
        own[s : s + chunk] = (h * weight[target[s : s + chunk]]).sum(-1)
    return tail_lse, own


def kerbs_workspace(part, weight: torch.Tensor, active: torch.Tensor) -> tuple[torch.Tensor, ...]:
    data = to_train_data(part, weight, active)
    return data.tail_lse, data.target_base_logit


def timed(fn, *args) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def compare(label: str, ways: dict, repeats: int, positions_n: int) -> bool:
    """Median wall and CPU seconds per 1,000 positions of each way over ``repeats`` alternating runs,
    printed; whether the two ways gave the same bits."""
    walls: dict[str, list[float]] = {k: [] for k in ways}
    cpus: dict[str, list[float]] = {k: [] for k in ways}
    results = {}
    for r in range(repeats):
        for name in list(ways) if r % 2 == 0 else list(ways)[::-1]:
            wall, cpu, results[name] = timed(ways[name])
            walls[name].append(wall * 1000 / positions_n)
            cpus[name].append(cpu * 1000 / positions_n)
    old, new = results["allocating"], results["workspace"]
    same = all(torch.equal(a, b) for a, b in zip(old, new))
    w = {k: statistics.median(v) for k, v in walls.items()}
    c = {k: statistics.median(v) for k, v in cpus.items()}
    print(
        f"{label:<28} {w['allocating']:>9.3f} {w['workspace']:>9.3f} {w['allocating'] / w['workspace']:>6.2f}x"
        f" {c['allocating']:>9.3f} {c['workspace']:>9.3f} {c['allocating'] / c['workspace']:>6.2f}x  {'yes' if same else 'NO'}"
    )
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=harness.positive_int, default=1)
    ap.add_argument("--positions", type=harness.positive_int, default=4096, help="cached positions (default 4096)")
    ap.add_argument("--repeats", type=harness.positive_int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    weight = torch.randn(VOCAB, HIDDEN, generator=g) * 0.05
    part = hc.CachePart(
        hidden=(rng.standard_normal((args.positions, HIDDEN)) * 3).astype(np.float16),
        target=rng.integers(0, VOCAB, args.positions).astype(np.int32),
        doc=np.zeros(args.positions, np.int32),
        span=np.zeros((args.positions, 2), np.int32),
        base_logprob=np.full(args.positions, np.nan, np.float32),
        docs=[""],
    )
    classes = [torch.randperm(VOCAB, generator=g)[:n].sort().values for n in FOOD_CLASS_SIZES]
    pairs = [(int(w), c) for c, ws in enumerate(classes) for w in ws] + [(w, len(classes)) for w in range(VOCAB)]
    tags = [f"T{i}" for i in range(len(classes))] + [CATCH_ALL]
    head = POSGHead(VOCAB, tags, torch.tensor(pairs), HIDDEN, lm_prior=True)
    active = torch.randperm(VOCAB, generator=g)[:ACTIVE].sort().values
    print(f"{harness.load_average()}; torch threads {torch.get_num_threads()}; {args.positions} positions")
    print(f"{'':<28} {'wall s per 1,000 positions':^27} {'CPU s per 1,000 positions':^27}")
    print(
        f"{'step':<28} {'allocate':>9} {'reuse':>9} {'ratio':>7} {'allocate':>9} {'reuse':>9} {'ratio':>7}  same bits"
    )

    def posg_workspace():
        got = positions(head, part, weight)
        return got.terms, got.prior

    same = compare(
        "POSG class log-masses",
        {"allocating": lambda: posg_allocating(head, part, weight), "workspace": posg_workspace},
        args.repeats,
        args.positions,
    )
    same &= compare(
        "KerBS frozen-tail normaliser",
        {
            "allocating": lambda: kerbs_allocating(part, weight, active),
            "workspace": lambda: kerbs_workspace(part, weight, active),
        },
        args.repeats,
        args.positions,
    )
    print(f"same bits: {'yes' if same else 'NO'}; {harness.load_average()}")


if __name__ == "__main__":
    harness.run(main)
