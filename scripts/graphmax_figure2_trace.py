"""The trace of graphmax's Algorithm 1 as printed (``solver=paper``) that the graphmax reproduction
report shows beside the paper's Figure 2: ||x^{t+1} - x^t||_2 at each step t, on real next-token
scores.

It loads SmolLM2-135M on the CPU, the fitting folds of food-reviews fold 0 of 5 (seed 1, the
reproduction's first fold) and their graph, takes the next-token logits after each prompt of that
fold's suite (results/reproductions/graphmax/suites/), and runs the paper solver's torch path with
the paper's settings (alpha = 1e-4, lam = 1, log x as log max(x, 1e-10)) for T = 1, 2, ..., 21 with
the stopping rule off, so that the t-th result is x^t; the step norms are the differences of
consecutive results. Writes results/reproductions/graphmax/figure2-trace.json (the first prompt's
trace, and for every prompt the step at which the rule ||x^{t+1} - x^t|| < 1e-4 would first hold,
if any). A minute or two of one CPU thread.

    .venv/bin/python scripts/graphmax_figure2_trace.py [--out PATH] [--prompts N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "results/reproductions/graphmax/suites/food-reviews-fold0of5-seed1-n16.jsonl"
OUT = ROOT / "results/reproductions/graphmax/figure2-trace.json"
ALPHA, STOP, LOG_FLOOR, LAM, STEPS = 1e-4, 1e-4, 1e-10, 1.0, 20


def main(argv: list[str] | None = None) -> int:
    import torch

    from maxbench.benchmark.data.corpora import fold_view, load_corpus
    from maxbench.systems.graph import get_graph
    from maxbench.systems.layers.graphmax import paper
    from maxbench.systems.layers.graphmax.graph_operator import GraphOperator
    from maxbench.systems.models import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = load_model("smollm2-135m", device="cpu")
    corpus = load_corpus(fold_view("food-reviews", 0, 5, 1))
    op = GraphOperator.prepare(get_graph(lm, corpus), "cpu", backend="torch")
    items = [json.loads(line) for line in SUITE.read_text().splitlines()][: args.prompts]
    traces = []
    for item in items:
        ids = lm.tokenizer(item["prompt"], return_tensors="pt").input_ids
        with torch.no_grad():
            z = lm.model(ids).logits[0, -1].float()
        Z = (z - z.max()).unsqueeze(0)
        xs = [paper._solve_torch(Z, op, LAM, ALPHA, T, 0.0, LOG_FLOOR)[0][0] for T in range(1, STEPS + 2)]
        traces.append([float(torch.linalg.vector_norm(b - a)) for a, b in zip(xs, xs[1:])])
    first_met = [next((t for t, s in enumerate(tr, start=1) if s < STOP), None) for tr in traces]
    doc = {
        "description": (
            "Trace of Algorithm 1 as printed (maxbench's reading, solver=paper) on SmolLM2-135M's next-token "
            f"scores after the first prompt of food-reviews fold 0 (graph of the other four folds): "
            f"||x^(t+1) - x^t||_2 per step t, alpha = {ALPHA:g}, lam = {LAM:g}, log x as log max(x, {LOG_FLOOR:g}). "
            f"The stopping rule (< {STOP:g}) first holds within {STEPS} steps for "
            f"{sum(m is not None for m in first_met)} of {len(traces)} prompts of that fold."
        ),
        "settings": {"alpha": ALPHA, "lam": LAM, "stop": STOP, "log_floor": LOG_FLOOR, "steps": STEPS},
        "model": "smollm2-135m",
        "corpus": corpus.name,
        "suite": SUITE.name,
        "steps": [{"t": t, "step_norm": s} for t, s in enumerate(traces[0], start=1)],
        "first_step_meeting_the_rule": first_met,
        "last_step_norms": [tr[-1] for tr in traces],
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(doc["description"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
