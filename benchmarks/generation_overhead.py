"""maxbench's decoding loop vs transformers' generate, side by side in one run.

Same model, prompts, max_new_tokens and batch; greedy and seeded top-p. Prints tokens/s of
each and the ratio (maxbench / generate). Each measurement is repeated and the median kept,
alternating the two so that machine noise hits both alike.

    python benchmarks/generation_overhead.py --threads 1 --batch-sizes 1,8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import check_inputs, load_average, positive_int, positive_ints, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--suite", default="food-reviews")
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--batch-sizes", type=positive_ints, default="1,8")
    ap.add_argument("--new-tokens", type=positive_int, default=48)
    ap.add_argument("--repeats", type=positive_int, default=3)
    args = ap.parse_args()
    check_inputs(args.model, suites=[args.suite])

    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.models import load_model

    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", threads=args.threads)
    prompts = [it.prompt for it in load_suite(args.suite).items]
    print(
        f"model {args.model}, {torch.get_num_threads()} torch thread(s), {args.new_tokens} new tokens, "
        f"median of {args.repeats}; {load_average()}"
    )
    print(f"{'decoding':<8} {'batch':>5} {'generate tok/s':>15} {'maxbench tok/s':>15} {'ratio':>7}")
    for bs in args.batch_sizes:
        batch = prompts[:bs]
        for label, setting in (
            ("greedy", DecodingSetting(do_sample=False, max_new_tokens=args.new_tokens)),
            ("top_p", DecodingSetting(top_p=0.9, max_new_tokens=args.new_tokens)),
        ):
            hf_t, mb_t, hf_tokens, mb_tokens = [], [], 0, 0
            enc = lm.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
            for _ in range(args.repeats):
                torch.manual_seed(0)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = lm.model.generate(
                        **enc,
                        max_new_tokens=args.new_tokens,
                        min_new_tokens=args.new_tokens,
                        do_sample=setting.do_sample,
                        top_p=0.9 if setting.do_sample else None,
                        top_k=0 if setting.do_sample else None,
                        temperature=1.0 if setting.do_sample else None,
                        pad_token_id=lm.tokenizer.pad_token_id,
                    )
                hf_t.append(time.perf_counter() - t0)
                hf_tokens = (out.shape[1] - enc["input_ids"].shape[1]) * bs
                t0 = time.perf_counter()
                res = decode(lm, _NoEos(lm.tokenizer.eos_token_id), batch, setting, list(range(bs)))
                mb_t.append(time.perf_counter() - t0)
                mb_tokens = sum(len(r["token_ids"]) for r in res)
            hf = hf_tokens / statistics.median(hf_t)
            mb = mb_tokens / statistics.median(mb_t)
            print(f"{label:<8} {bs:>5} {hf:>15.1f} {mb:>15.1f} {mb / hf:>7.3f}")
    print(f"after: {load_average()}")


class _NoEos(__import__("maxbench.systems.layers.softmax", fromlist=["SoftmaxLayer"]).SoftmaxLayer):
    """Softmax with EOS masked, so both sides decode exactly --new-tokens tokens per row
    (generate's min_new_tokens does the same on its side)."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id

    def scores(self, logits, hidden):
        logits = logits.clone()
        logits[:, self.eos_id] = float("-inf")
        return logits


if __name__ == "__main__":
    run(main)
