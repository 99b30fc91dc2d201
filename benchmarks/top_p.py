"""Top-p truncation: transformers' TopPLogitsWarper against maxbench's (systems/top_p.py), side by side.

Inputs are real: the embedded model's next-token logits at the last position of the first
--batch-size prompts of the food-reviews suite (the default registry's decoding batch is 48),
and the same rows with -inf outside each row's 200 best tokens (the sparse scores of sparsemax,
graphmax's paper solver and POSG). For each input and top-p it prints the median time of both
warpers over --repeats alternating runs, their ratio and whether the outputs are equal bit for
bit; then the load average.

    .venv/bin/python benchmarks/top_p.py --threads 1
"""

from __future__ import annotations

import argparse

import torch
from harness import alternate, load_average, positive_int, run


def probabilities(text: str) -> list[float]:
    """An argparse type: comma-separated top-p values in (0, 1]."""
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated numbers, e.g. 0.9,0.95") from None
    if not all(0.0 < p <= 1.0 for p in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every top-p must lie in (0, 1]")
    return values


def inputs(batch_size: int) -> dict[str, torch.Tensor]:
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.models import load_model

    lm = load_model("smollm2-135m", device="cpu")
    prompts = [it.prompt for it in load_suite("food-reviews").items[:batch_size]]
    enc = lm.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        out = lm.model(**enc)
    last = enc["attention_mask"].sum(-1) - 1
    logits = out.logits[torch.arange(len(prompts)), last].float()
    top = logits.topk(200, dim=-1).indices
    sparse = torch.full_like(logits, float("-inf")).scatter(1, top, torch.log_softmax(logits.gather(1, top), -1))
    return {"LM logits": logits, "sparse (200 tokens)": sparse}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--batch-size", type=positive_int, default=48)
    ap.add_argument("--top-p", type=probabilities, default="0.9,0.95", help="comma-separated top-p values")
    ap.add_argument("--repeats", type=positive_int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers as tf

    from maxbench.systems.top_p import TopPLogitsWarper

    print(f"threads {args.threads}, batch {args.batch_size}; {load_average()}")
    for name, scores in inputs(args.batch_size).items():
        for top_p in args.top_p:
            warpers = {"transformers": tf.TopPLogitsWarper(top_p=top_p), "maxbench": TopPLogitsWarper(top_p=top_p)}
            medians, outputs = alternate(warpers, args.repeats, None, scores)
            same = torch.equal(outputs["transformers"], outputs["maxbench"])
            theirs, ours = medians["transformers"], medians["maxbench"]
            print(
                f"{name:<20} {tuple(scores.shape)} top_p {top_p:<5}: transformers {theirs * 1e3:7.1f} ms, "
                f"maxbench {ours * 1e3:7.1f} ms, ratio {theirs / ours:4.1f}x, same output: {'yes' if same else 'NO'}"
            )
    print(load_average())
    return 0


if __name__ == "__main__":
    run(main)
