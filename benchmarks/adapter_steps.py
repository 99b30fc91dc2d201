"""The adapters' training steps side by side in one run: CPU seconds per step of each adapter on the
same base model, the same training examples and the same batch, and their ratios to a baseline.

FCTG's reproduction judges the slides' training-time claim (FCTG trains in about half the time of
prefix-tuning and of NRP) on the CPU seconds of each adapter's steps. Recorded while other jobs
shared the machine, those seconds carry that load; this script measures every adapter's steps in
one process, alternating their order between repeats (so that noise from other processes hits
them alike), and prints each one's median CPU seconds per step and its ratio to ``--baseline``'s.
Each repeat trains every adapter from its start for ``--steps`` steps with that repeat's seed
(nothing is cached or saved). FCTG runs with its gate fixed (``select=false``): the gate's choice is
outside the steps compared, as in the reproduction.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adapter_steps.py --threads 1

The default examples are the food-attrs suite's: the food reviews' fitting split, each review
after its rendered rating (``Rating: 5 stars. Review:``), 8 texts of at most 128 tokens a step.
"""

from __future__ import annotations

import argparse
import statistics

import harness
from harness import load_average, positive_int

harness.require_checkout()

DEFAULT_ADAPTERS = "lora,prefix,nrp,fctg(select=false)"


def parse_adapters(text: str) -> list[tuple[str, dict]]:
    """``lora,fctg(select=false,r=8)`` -> [("lora", {}), ("fctg", {"select": False, "r": 8})]: each
    adapter's name and options, read as a system string's adapter part is (``split_adapter``)."""
    from maxbench.errors import MaxbenchError
    from maxbench.systems.adapters import split_adapter

    specs, depth, part = [], 0, ""
    for ch in text + ",":
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            if part.strip():
                specs.append(part.strip())
            part = ""
        else:
            part += ch
    if not specs:
        raise MaxbenchError("--adapters names no adapter; e.g. --adapters lora,fctg(select=false)")
    out = []
    for spec in specs:
        _, name, params = split_adapter(f"model+{spec}")
        out.append((name, dict(params)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--suite", default="food-attrs", help="a conditional suite: its corpus's fitting split is trained on"
    )
    p.add_argument("--adapters", default=DEFAULT_ADAPTERS, help=f"comma-separated (default {DEFAULT_ADAPTERS})")
    p.add_argument("--baseline", default="fctg", help="the adapter the ratios divide by (default fctg)")
    p.add_argument("--steps", type=positive_int, default=4, help="training steps per adapter and repeat")
    p.add_argument("--repeats", type=positive_int, default=2)
    p.add_argument("--batch", type=positive_int, default=8, help="texts per step (the reproduction's 8)")
    p.add_argument("--threads", type=positive_int, default=1)
    args = p.parse_args()

    from types import SimpleNamespace

    import torch

    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.run.runner import adapter_training_data
    from maxbench.errors import MaxbenchError
    from maxbench.systems.adapters import AdapterFitContext, adapter_class
    from maxbench.systems.models import load_model

    adapters = parse_adapters(args.adapters)
    for name, options in adapters:
        adapter_class(name)(**options, steps=args.steps, batch=args.batch)  # unknown names and options: one line
    if args.baseline not in [name for name, _ in adapters]:
        raise MaxbenchError(f"--baseline {args.baseline} is not among --adapters ({args.adapters})")
    harness.check_inputs(model=args.model, suites=[args.suite])
    suite = load_suite(args.suite)
    examples, data = adapter_training_data(SimpleNamespace(suite=suite, corpus=suite.corpus))
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", threads=args.threads)
    print(
        f"{args.model}, suite {args.suite}: {len(examples)} training examples, batch {args.batch}, "
        f"{args.steps} steps per adapter and repeat, {args.repeats} repeats, {args.threads} torch thread(s); "
        f"{load_average()} at the start"
    )
    steps: dict[str, list[float]] = {name: [] for name, _ in adapters}
    for r in range(args.repeats):
        order = adapters if r % 2 == 0 else adapters[::-1]
        for name, options in order:
            adapter = adapter_class(name)(**options, steps=args.steps, batch=args.batch, seed=r)
            ctx = AdapterFitContext(model=lm, examples=examples, data=data, options={"progress": False})
            _, measured = adapter.train(lm, ctx)
            steps[name] += measured["step_cpu_seconds"]
    base = statistics.median(steps[args.baseline])
    print(f"{'adapter':<28} {'CPU s per step (median)':>24} {'min':>8} {'max':>8} {'/ ' + args.baseline:>10}")
    for (name, options), (_, got) in zip(adapters, steps.items()):
        label = name + (f"({','.join(f'{k}={v}' for k, v in options.items())})" if options else "")
        med = statistics.median(got)
        print(f"{label:<28} {med:>24.3f} {min(got):>8.3f} {max(got):>8.3f} {med / base:>9.2f}x")
    print(f"{load_average()} at the end")
    return 0


if __name__ == "__main__":
    harness.run(main)
