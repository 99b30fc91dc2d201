"""maxbench's decoding loop vs transformers' generate, side by side in one run, on the CPU or CUDA.

Same model, dtype, prompts (the first B of the suite, for each B of --batch-sizes), new tokens
(EOS masked on both sides, so every row decodes exactly --new-tokens), batch and decoding: greedy,
seeded top-p, and top-k with a temperature. For each it prints tokens/s of ``generate``, of
maxbench's loop with the CPU generator (``torch.multinomial``'s draw per row, the CPU's default)
and with the device generator (counter-based, on the model's device, CUDA's default), and the
ratios to ``generate`` (greedy draws nothing: one maxbench figure). Each figure is the median of
--repeats runs that alternate the ways' order, after --warmup untimed runs of each (CUDA's kernels
and allocator warm up on the first); on CUDA the clock stops after the device has finished.

torch's CPU thread count is set from --threads, never left to torch; the load average is printed
before and after, with the CPU's model name (and the GPU's on CUDA).

    python benchmarks/generation_overhead.py --threads 1 --batch-sizes 1,8
    python benchmarks/generation_overhead.py --device cuda --dtype bf16 --batch-sizes 16,48
"""

from __future__ import annotations

import argparse
import platform
from functools import partial

import torch
from harness import alternate, check_inputs, load_average, names, nonnegative_int, positive_int, positive_ints, run

#: label -> (maxbench's decoding label, generate's keyword arguments)
DECODINGS = {
    "greedy": ("greedy", {"do_sample": False}),
    "top_p": ("top_p=0.9", {"do_sample": True, "top_p": 0.9, "top_k": 0, "temperature": 1.0}),
    "top_k": ("temp=0.7,top_k=50", {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.7}),
}


def cpu_model_name() -> str:
    """lscpu's "Model name" (from /proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--suite", default="food-reviews")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="fp32", help="the model's dtype: fp32, bf16 or fp16 (half on CUDA only)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch's CPU threads (set, not left to torch)")
    ap.add_argument("--batch-sizes", type=positive_ints, default="1,8")
    ap.add_argument("--decodings", type=names, default=",".join(DECODINGS), help=f"of {', '.join(DECODINGS)}")
    ap.add_argument("--new-tokens", type=positive_int, default=48)
    ap.add_argument("--repeats", type=positive_int, default=5)
    ap.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed runs of each way first")
    args = ap.parse_args()
    check_inputs(args.model, suites=[args.suite])
    from maxbench.errors import MaxbenchError

    unknown = [d for d in args.decodings if d not in DECODINGS]
    if unknown:
        raise MaxbenchError(f"unknown decoding '{unknown[0]}'; use some of {', '.join(DECODINGS)}")

    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.models import choose_device, load_model

    device = choose_device(args.device, threads=args.threads)  # CUDA asked for without CUDA: one line
    lm = load_model(args.model, device=device, threads=args.threads, options={"dtype": args.dtype})
    torch.set_num_threads(args.threads)
    on_cuda = device.startswith("cuda")
    items = load_suite(args.suite).items
    prompts = [items[i % len(items)].prompt for i in range(max(args.batch_sizes))]
    where = f"{cpu_model_name()}" + (f", GPU {torch.cuda.get_device_name(torch.device(device))}" if on_cuda else "")
    print(
        f"model {args.model} ({args.dtype}) on {device}; {where}; {torch.get_num_threads()} torch thread(s); "
        f"{args.new_tokens} new tokens; median of {args.repeats} after {args.warmup} warm-up; {load_average()}"
    )
    print(
        f"{'decoding':<8} {'batch':>5} {'generate':>10} {'mb cpu-gen':>10} {'ratio':>6} "
        f"{'mb dev-gen':>10} {'ratio':>6} {'dev/cpu':>7}   (tokens/s)"
    )
    layer = _NoEos(lm.tokenizer.eos_token_id)

    def synced(fn):
        def call(*a):
            out = fn(*a)
            if on_cuda:
                torch.cuda.synchronize(torch.device(device))
            return out

        return call

    for bs in args.batch_sizes:
        batch = prompts[:bs]
        enc = lm.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=True).to(device)
        for label in args.decodings:
            text, hf_kw = DECODINGS[label]
            setting = DecodingSetting.parse(f"{text},max_new_tokens={args.new_tokens}")

            ways = {"generate": synced(partial(_generate, lm, enc, args.new_tokens, hf_kw))}
            for gen in ("cpu", "device") if setting.do_sample else ("cpu",):
                ways[gen] = synced(partial(decode, lm, layer, batch, setting, list(range(bs)), generator=gen))
            if args.warmup:
                alternate(ways, args.warmup)
            seconds, results = alternate(ways, args.repeats)
            hf_tokens = (results["generate"].shape[1] - enc["input_ids"].shape[1]) * bs
            rate = {"generate": hf_tokens / seconds["generate"]}
            for gen in ways.keys() - {"generate"}:
                rate[gen] = sum(len(r["token_ids"]) for r in results[gen]) / seconds[gen]
            line = f"{label:<8} {bs:>5} {rate['generate']:>10.1f} {rate['cpu']:>10.1f} {rate['cpu'] / rate['generate']:>6.3f}"
            if "device" in rate:
                line += (
                    f" {rate['device']:>10.1f} {rate['device'] / rate['generate']:>6.3f}"
                    f" {rate['device'] / rate['cpu']:>7.3f}"
                )
            print(line, flush=True)
    print(f"after: {load_average()}")


def _generate(lm, enc, new_tokens: int, hf_kw: dict):
    """transformers' generate on the encoded batch, exactly ``new_tokens`` per row, seeded."""
    torch.manual_seed(0)
    with torch.inference_mode():
        return lm.model.generate(
            **enc,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=lm.tokenizer.pad_token_id,
            **hf_kw,
        )


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
