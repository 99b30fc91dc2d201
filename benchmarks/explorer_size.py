"""The explorer's size on disk and its load time in headless Chromium, for 6 systems x 1,536 prompts
x 100 tokens (synthesised rows in the run format: every per-step statistic decode() writes, token
pieces, reference log-probabilities; scores with per-prompt values).

    .venv/bin/python benchmarks/explorer_size.py [--prompts 1536] [--systems 6] [--tokens 100]

Prints the generations file's size, the explorer's size (total and what the first render reads:
index.html, explorer.js/.css), the time write_explorer takes, and in Chromium (Debian's
/usr/bin/chromium, opened from file://, median of 3 fresh pages) the time to first render (the
leaderboard drawn) and to the first prompt's texts shown. Targets: first render < 2 s; explorer
<= 3x the generations file.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import harness

CHROMIUM = "/usr/bin/chromium"  # scripts/browser_setup.sh installs it
WORDS = (
    "the a soup was cold salty great tea coffee flavor taste bought box bag price amazon love good bad "
    "really not very my dog cat loves these chips sweet bitter fresh order again would recommend it "
    "and but so too much little store product quality delivery fast slow best ever tried never"
).split()


def synthesise(run: Path, n_prompts: int, n_systems: int, n_tokens: int, seed: int = 0) -> None:
    from maxbench.benchmark.rundir import GENERATIONS, MANIFEST

    rng = random.Random(seed)
    run.mkdir(parents=True)
    systems = [f"smollm2-135m/{layer}/top_p=0.9" for layer in ("softmax", "sparsemax", "kerbs", "posg")]
    systems += [f"smollm2-135m/graphmax(lam={lam},solver=exact)/top_p=0.9" for lam in (0.3, 1.0, 3.0, 10.0)]
    systems = systems[:n_systems]
    prompts = [
        (f"p{i:04d}", " ".join(rng.choices(WORDS, k=12)), " ".join(rng.choices(WORDS, k=80))) for i in range(n_prompts)
    ]
    metrics = ("bleu-4", "rouge-l-f", "self-bleu-4", "seq-rep-4", "rep", "ppl", "ref-eps-ppl")
    with open(run / GENERATIONS, "w", encoding="utf-8") as f:
        for s in systems:
            for pid, prompt, ref in prompts:
                pieces = [" " + w for w in rng.choices(WORDS, k=n_tokens)]
                st = {
                    k: [float(f"{rng.random() * top:.6g}") for _ in range(n_tokens + 1)]
                    for k, top in (("entropy", 6.0), ("support", 49152), ("top1", 1.0), ("p_chosen", 1.0))
                }
                row = {
                    "system": s,
                    "prompt_id": pid,
                    "sample": 0,
                    "seed": rng.randrange(2**32),
                    "prompt": prompt,
                    "reference": ref,
                    "token_ids": [rng.randrange(49152) for _ in range(n_tokens)],
                    "text": "".join(pieces),
                    "n_tokens": n_tokens,
                    "finish": "length",
                    "stats": st,
                    "pieces": pieces,
                    "reference_logprobs": [
                        None if rng.random() < 0.02 else round(-rng.random() * 12, 6) for _ in range(100)
                    ],
                    "vocab_size": 49152,
                }
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    scores = {
        s: {
            "n_prompts": n_prompts,
            "suite_prompts": n_prompts,
            "partial": False,
            "scores": {
                m: {
                    "value": rng.random(),
                    "ci_low": 0.1,
                    "ci_high": 0.9,
                    "higher_is_better": m in ("bleu-4", "rouge-l-f"),
                    "per_prompt": {pid: rng.random() for pid, _, _ in prompts},
                }
                for m in metrics
            },
        }
        for s in systems
    }
    comparisons = {
        "baseline": systems[0],
        "systems": {s: {m: {"p_value": rng.random()} for m in metrics} for s in systems[1:]},
    }
    (run / "scores.json").write_text(json.dumps({"systems": scores, "comparisons": comparisons}))
    (run / MANIFEST).write_text(
        json.dumps({"run_id": "synthetic", "suite": {"name": "synthetic", "n_items": n_prompts}})
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=harness.positive_int, default=1536)
    ap.add_argument("--systems", type=harness.positive_int, default=6, help="1 to 8")
    ap.add_argument("--tokens", type=harness.positive_int, default=100)
    args = ap.parse_args()
    if args.systems > 8:
        ap.error(f"--systems: at most 8 synthetic systems, got {args.systems}")
    from maxbench.benchmark.present.explorer import write_explorer
    from maxbench.errors import MaxbenchError

    if not Path(CHROMIUM).exists():
        raise MaxbenchError(f"{CHROMIUM} is not there; install it with: bash scripts/browser_setup.sh")
    tmp = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
    try:
        measure(args, tmp, write_explorer)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args, tmp: Path, write_explorer) -> None:
    run = tmp / "run"
    synthesise(run, args.prompts, args.systems, args.tokens)
    from maxbench.benchmark.rundir import GENERATIONS

    gen = (run / GENERATIONS).stat().st_size
    t0 = time.perf_counter()
    index = write_explorer([run], tmp / "explorer")
    t_write = time.perf_counter() - t0
    files = [p for p in index.parent.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    first = sum((index.parent / n).stat().st_size for n in ("index.html", "explorer.js", "explorer.css"))
    print(f"{args.systems} systems x {args.prompts} prompts x {args.tokens} tokens; {harness.load_average()}")
    print(f"generations.jsonl         {gen / 2**20:8.1f} MiB")
    print(f"explorer, all files       {total / 2**20:8.1f} MiB  = {total / gen:.2f}x the generations (target <= 3x)")
    print(f"  read at first render    {first / 2**20:8.1f} MiB  (index.html + explorer.js + .css)")
    print(f"write_explorer            {t_write:8.1f} s")
    from playwright.sync_api import sync_playwright

    render, prompt = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        for _ in range(3):
            page = browser.new_page(viewport={"width": 1366, "height": 800})
            t0 = time.perf_counter()
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready]")
            render.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            page.locator("#views button[data-view='prompts']").click()
            page.wait_for_selector(".card .tok")
            prompt.append(time.perf_counter() - t1)
            page.close()
        browser.close()
    print(
        f"first render (Chromium)   {statistics.median(render):8.2f} s  (target < 2 s; runs {[round(x, 2) for x in render]})"
    )
    print(f"first prompt's texts      {statistics.median(prompt):8.2f} s  after clicking Prompts")


if __name__ == "__main__":
    harness.run(main)
