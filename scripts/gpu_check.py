"""The GPU checks of docs/performance.md, run on a machine with CUDA (``scripts/gpu_check.sh``).

1. fp32 on CUDA: maxbench's decoding loop with softmax against transformers' ``generate``,
   token for token (greedy, and seeded top-p / top-k sampling).
2. bf16 on CUDA against fp32 on CUDA: tokens/s of each, and how many greedy texts agree.
3. The default lineup, generation only, on the first N prompts of its suite (``maxbench
   generate`` on CUDA, one run): every layer's tokens/s beside softmax's, from the run's own
   ``timings.jsonl`` (decoding only; model loading and reference perplexity are separate rows).
5. The conditional lineup and NRP (issue 40), the same way on the first N prompts of food-attrs:
   each adapter (lora, prefix, fctg, nrp) trained on CUDA (50 steps; the training seconds from the
   run's ``train`` rows) and decoded by maxbench's loop, every system's tokens/s beside zero-shot's.

The model comes from ``$MAXBENCH_HOME`` (converted once from the GGUF there); nothing is
downloaded. Prints a report and writes it, with the run's files, to ``--out``.

    python scripts/gpu_check.py --out /tmp/gpu --prompts 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROMPTS = [
    "I have bought these cookies twice and",
    "The soup arrived cold, but the",
    "My dog loves this food because",
    "After three weeks of using it,",
    "This coffee supposedly is premium, it tastes",
    "I purchased a box of these from my",
    "The flavour is stronger than I expected and",
    "We ordered two bags for the office, and",
]


def say(out: Path, line: str = "") -> None:
    print(line, flush=True)
    with open(out / "report.txt", "a") as f:
        f.write(line + "\n")


def hf_generate(lm, prompt: str, seed: int, new: int, **kw) -> list[int]:
    import torch

    enc = lm.tokenizer([prompt], return_tensors="pt", add_special_tokens=False).to(lm.device)
    torch.manual_seed(seed)
    ids = lm.model.generate(**enc, max_new_tokens=new, pad_token_id=lm.tokenizer.pad_token_id, **kw)
    ids = ids[0, enc["input_ids"].shape[1] :].tolist()
    eos = lm.tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


def token_exact(out: Path, lm) -> bool:
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.layers.softmax import SoftmaxLayer

    cases = [
        (
            "greedy",
            DecodingSetting(do_sample=False, max_new_tokens=32),
            [0] * len(PROMPTS),
            dict(do_sample=False, top_k=None, top_p=None, temperature=None),
        ),
        (
            "top_p=0.9",
            DecodingSetting(top_p=0.9, max_new_tokens=32),
            list(range(11, 11 + len(PROMPTS))),
            dict(do_sample=True, top_p=0.9, top_k=0, temperature=1.0),
        ),
        (
            "temp=0.7,top_k=40",
            DecodingSetting(temperature=0.7, top_k=40, max_new_tokens=32),
            list(range(31, 31 + len(PROMPTS))),
            dict(do_sample=True, temperature=0.7, top_k=40, top_p=1.0),
        ),
    ]
    greedy_ok = True
    for label, setting, seeds, kw in cases:
        batch = decode(lm, SoftmaxLayer(), PROMPTS, setting, seeds)
        same = agree = 0
        for prompt, seed, row in zip(PROMPTS, seeds, batch):
            alone = decode(lm, SoftmaxLayer(), [prompt], setting, [seed])[0]["token_ids"]
            ref = hf_generate(lm, prompt, seed, setting.max_new_tokens, **kw)
            same += alone == ref
            agree += alone == row["token_ids"]
            if label == "greedy":
                greedy_ok &= alone == ref
        say(out, f"  softmax fp32 {label:<18} maxbench loop == generate(): {same}/{len(PROMPTS)} prompts (batch of 1)")
        # a left-padded batch may differ from a batch of 1 in the last bits of a GPU's kernels
        say(out, f"  softmax fp32 {label:<18} batch of {len(PROMPTS)} == batch of 1: {agree}/{len(PROMPTS)}")
    return greedy_ok


def precision(out: Path, lms: dict, prompts: list[str]) -> None:

    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.layers.softmax import SoftmaxLayer

    texts = {}
    for dtype, lm in lms.items():
        for setting_name, setting in (
            ("greedy", DecodingSetting(do_sample=False, max_new_tokens=64)),
            ("top_p=0.9", DecodingSetting(top_p=0.9, max_new_tokens=64)),
        ):
            decode(lm, SoftmaxLayer(), prompts[:4], setting, list(range(4)))  # warm-up
            sync()
            t0 = time.perf_counter()
            rows = decode(lm, SoftmaxLayer(), prompts, setting, list(range(len(prompts))))
            sync()
            dt = time.perf_counter() - t0
            n = sum(len(r["token_ids"]) for r in rows)
            texts[dtype, setting_name] = [r["token_ids"] for r in rows]
            say(
                out,
                f"  {dtype:<5} {setting_name:<10} batch {len(prompts)}: {n} tokens in {dt:6.2f} s = "
                f"{n / dt:8.1f} tokens/s",
            )
    for s in ("greedy", "top_p=0.9"):
        a, b = texts["fp32", s], texts["bf16", s]
        same = sum(x == y for x, y in zip(a, b))
        prefix = [next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y))) for x, y in zip(a, b)]
        say(
            out,
            f"  bf16 vs fp32 {s}: {same}/{len(a)} texts identical; first differing token at median position "
            f"{sorted(prefix)[len(prefix) // 2]}",
        )


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def lineup_run(
    out: Path, n: int, batch: int, device: str, skip: set = frozenset(), name: str = "default", extra: tuple = ()
) -> None:
    """Generation only of lineup ``name`` (and the ``extra`` systems) on the first ``n`` prompts of its
    suite, in one run ``gpu-<name>``; prints every system's tokens/s beside the baseline's."""
    from maxbench.benchmark.run.lineup import load_lineup

    lineup = load_lineup(name)
    suite_dir = out / "suite"
    suite_dir.mkdir(exist_ok=True)
    src = Path(__file__).resolve().parents[1] / "benchmark" / "suites"
    sname = lineup.suite
    rows = (src / f"{sname}.jsonl").read_text().splitlines()[:n]
    (suite_dir / f"{sname}-{n}.jsonl").write_text("\n".join(rows) + "\n")
    manifest = (src / f"{sname}.toml").read_text().splitlines()
    manifest = [ln for ln in manifest if not ln.startswith(("sha256", "file", "name"))]
    (suite_dir / f"{sname}-{n}.toml").write_text(
        "\n".join([f'name = "{sname}-{n}"', f'file = "{sname}-{n}.jsonl"', *manifest]) + "\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "maxbench",
        "generate",
        "--suite",
        str(suite_dir / f"{sname}-{n}.toml"),
        "--corpus",
        lineup.corpus,
        "--device",
        device,
        "--batch-size",
        str(batch),
        "--seed",
        str(lineup.seed),
        "--runs-dir",
        str(out / "runs"),
        "--run-id",
        f"gpu-{name}",
        "--no-progress",
    ]
    systems = [s.name for s in lineup.systems if s.layer not in skip] + list(extra)
    for s in systems:
        cmd += ["--system", s]
    say(out, "  $ " + " ".join(cmd))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    say(out, f"  exit {proc.returncode} in {time.perf_counter() - t0:.1f} s")
    for line in (proc.stdout + proc.stderr).strip().splitlines()[-40:]:
        say(out, "  | " + line)
    run = out / "runs" / f"gpu-{name}"
    for file in ("timings.jsonl", "manifest.json"):
        if (run / file).exists():
            shutil.copy(run / file, out / (file if name == "default" else f"{name}-{file}"))
    if proc.returncode != 0 or not (run / "timings.jsonl").exists():
        return
    gens = [json.loads(ln) for p in sorted(run.glob("generations*.jsonl")) for ln in p.read_text().splitlines() if ln]
    tokens: dict[str, int] = {}
    for g in gens:
        tokens[g["system"]] = tokens.get(g["system"], 0) + len(g["token_ids"])
    secs: dict[str, float] = {}
    layer: dict[str, float] = {}
    for t in (json.loads(ln) for ln in (run / "timings.jsonl").read_text().splitlines() if ln):
        if t["phase"].startswith("generate "):
            system = t["phase"][len("generate ") :]
            secs[system] = secs.get(system, 0.0) + t["seconds"]
            layer[system] = layer.get(system, 0.0) + (t.get("layer_seconds") or 0.0)
        elif t["phase"].startswith("train "):
            say(out, f"  {t['phase']}: {t['seconds']:.1f} s ({t.get('steps', '?')} steps)")
    base = lineup.baseline
    base_rate = tokens.get(base, 0) / secs[base] if secs.get(base) else None
    say(out, f"  {'system':<58} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'vs baseline':>11}")
    for s in systems:
        if s not in secs:
            say(out, f"  {s:<58} (no timing row)")
            continue
        rate = tokens.get(s, 0) / secs[s]
        ratio = f"{rate / base_rate:9.2f}x" if base_rate else "n/a"
        say(out, f"  {s:<58} {tokens.get(s, 0):7d} {secs[s]:8.1f} {rate:9.1f} {ratio:>10}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=16, help="prompts of the default suite for the lineup run")
    ap.add_argument("--sections", default="1,2,3,5", help="which of the sections to run (4 is gpu_check.sh's)")
    ap.add_argument(
        "--skip-layers", default="", help="layers of the lineup to leave out (e.g. posg: its fit needs spaCy)"
    )
    ap.add_argument("--precision-prompts", type=int, default=48)
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to try the script itself)")
    ap.add_argument("--expect-weights", default="", help="weights sha256 the converted model must have")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import version

    import torch
    import transformers

    from maxbench.systems.models import load_model

    out = args.out
    say(out, f"# maxbench GPU check, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    say(
        out,
        f"device: {gpu}; torch {torch.__version__}; transformers "
        f"{transformers.__version__}; maxbench {version('maxbench')}; python {sys.version.split()[0]}",
    )
    t0 = time.perf_counter()
    fp32 = load_model("smollm2-135m", device=args.device, options={"dtype": "fp32"})
    say(
        out,
        f"model: smollm2-135m converted and loaded in {time.perf_counter() - t0:.1f} s; weights "
        f"{fp32.hash[:16]}; dtype {fp32.dtype}",
    )
    if args.expect_weights and not fp32.hash.startswith(args.expect_weights):
        say(
            out,
            f"  WARNING: the converted weights differ from the CPU machine's ({args.expect_weights[:16]}); "
            "the cached heads and graph will not be found",
        )
    sections = set(args.sections.split(","))
    if "1" in sections:
        token_exact_section(out, fp32)
    if "2" in sections:
        precision_section(out, fp32, args)
    del fp32
    if "3" in sections:
        say(
            out,
            f"\n## 3. the default lineup, generation only, on {args.prompts} prompts ({args.device}, fp32, batch "
            f"{args.prompts})",
        )
        lineup_run(out, args.prompts, args.prompts, args.device, set(filter(None, args.skip_layers.split(","))))
        shutil.rmtree(out / "suite", ignore_errors=True)
    if "5" in sections:
        say(
            out,
            f"\n## 5. the conditional lineup and NRP, generation only, on {args.prompts} prompts of food-attrs "
            f"({args.device}, fp32, batch {args.prompts}; each adapter trained here, 50 steps)",
        )
        nrp = "smollm2-135m+nrp/softmax/top_k=40,max_new_tokens=96"
        lineup_run(out, args.prompts, args.prompts, args.device, name="conditional", extra=(nrp,))
        shutil.rmtree(out / "suite", ignore_errors=True)
    return 0


def token_exact_section(out: Path, fp32) -> None:
    say(out, "\n## 1. softmax on CUDA, fp32, against transformers' generate")
    ok = token_exact(out, fp32)
    say(out, f"  greedy token-exact: {'yes' if ok else 'NO'}")


def precision_section(out: Path, fp32, args) -> None:
    import torch

    from maxbench.systems.models import load_model

    say(out, "\n## 2. bf16 against fp32 on CUDA (softmax, 64 new tokens, 48 prompts)")
    bf16 = load_model("smollm2-135m", device=args.device, options={"dtype": "bf16" if args.device != "cpu" else "fp32"})
    suite = Path(__file__).resolve().parents[1] / "benchmark" / "suites" / "food-reviews.jsonl"
    prompts = [json.loads(ln)["prompt"] for ln in suite.read_text().splitlines()[: args.precision_prompts]]
    precision(out, {"fp32": fp32, "bf16": bf16}, prompts)
    del bf16
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
