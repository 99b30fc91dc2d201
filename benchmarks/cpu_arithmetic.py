"""What pinning the math libraries to their AVX2 kernels (core/arithmetic.py) costs, side by side.

The same decoding job runs in child processes that alternate between the pinned arithmetic
(maxbench's default) and each library's own choice for this CPU (``MAXBENCH_NATIVE_ARITHMETIC=1``,
AVX-512 where the CPU has it): the first --batch-size prompts of the food-reviews suite,
--new-tokens tokens with nucleus sampling, through softmax and graphmax exact (the food graph).
It prints, per layer, the median tokens/s of each arithmetic over --repeats alternating runs,
their ratio, the kernels torch used and whether the generated tokens are the same; then the
load average. On a CPU without AVX-512 both columns run the same kernels (ratio about 1).

    .venv/bin/python benchmarks/cpu_arithmetic.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import load_average, positive_int, run

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {"softmax": "softmax", "graphmax exact": "graphmax(lam=1.0,solver=exact)"}


def child(args) -> None:
    """One timed decoding job; prints {layer: [seconds, tokens, token-ids hash]} as JSON."""
    import hashlib

    import torch

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.layers.base import FitContext
    from maxbench.systems.models import load_model
    from maxbench.systems.system_strings import parse_system

    torch.set_num_threads(args.threads)
    lm = load_model("smollm2-135m", device="cpu", threads=args.threads)
    prompts = [it.prompt for it in load_suite("food-reviews").items[: args.batch_size]]
    setting = DecodingSetting.parse(f"top_p=0.9,max_new_tokens={args.new_tokens}")
    out = {"capability": torch.backends.cpu.get_cpu_capability()}
    for label, layer_name in LAYERS.items():
        layer = parse_system(f"smollm2-135m/{layer_name}/top_p=0.9").build_layer()
        if layer.needs_fit:
            layer.fit(FitContext(model=lm, corpus=load_corpus("food-reviews")))
        t0 = time.perf_counter()
        res = decode(lm, layer, prompts, setting, list(range(len(prompts))), record_stats=False)
        seconds = time.perf_counter() - t0
        ids = json.dumps([r["token_ids"] for r in res]).encode()
        out[label] = [seconds, sum(len(r["token_ids"]) for r in res), hashlib.sha256(ids).hexdigest()]
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--batch-size", type=positive_int, default=16)
    ap.add_argument("--new-tokens", type=positive_int, default=32)
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    from maxbench.errors import MaxbenchError

    print(f"threads {args.threads}, batch {args.batch_size}, {args.new_tokens} new tokens; {load_average()}")
    runs: dict[str, list[dict]] = {"pinned": [], "native": []}
    for r in range(args.repeats):
        for kind in ("pinned", "native") if r % 2 == 0 else ("native", "pinned"):
            env = dict(os.environ)
            if kind == "native":
                env["MAXBENCH_NATIVE_ARITHMETIC"] = "1"
            cmd = [sys.executable, __file__, "--child", *sys.argv[1:]]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
            if p.returncode:
                last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
                raise MaxbenchError(f"the {kind} decoding job failed: {last}")
            runs[kind].append(json.loads(p.stdout.strip().splitlines()[-1]))
    caps = {k: v[0]["capability"] for k, v in runs.items()}
    print(f"torch kernels: pinned {caps['pinned']}, native {caps['native']}")
    for label in LAYERS:
        rate = {k: statistics.median(r[label][1] / r[label][0] for r in v) for k, v in runs.items()}
        same = runs["pinned"][0][label][2] == runs["native"][0][label][2]
        print(
            f"{label:<16} pinned {rate['pinned']:6.1f} tok/s, native {rate['native']:6.1f} tok/s, "
            f"pinned/native {rate['pinned'] / rate['native']:.2f}x, same tokens: {'yes' if same else 'no'}"
        )
    print(load_average())
    return 0


if __name__ == "__main__":
    run(main)
