"""Self-BLEU-4 of 1,536 real texts of 100 tokens: nltk's quadratic loop against the fast exact path.

    .venv/bin/python benchmarks/self_bleu.py            # full run, a few minutes (the nltk loop)
    .venv/bin/python benchmarks/self_bleu.py --nltk-texts 100   # nltk on the first 100 texts only

Texts: the first 100 word tokens (maxbench.benchmark.metrics.tokenize) of each of the first 1,536 articles
of the BBC news corpus's fitting split that have that many. Both paths get the same token lists;
tokenising is timed apart. The nltk loop is Texygen's leave-one-out Self-BLEU: for each text,
``sentence_bleu(all other texts, text, weights=(0.25,)*4, smoothing_function=method1)``. Both run
in this one process, one after the other, single-threaded (numpy here does no multithreaded work).
Target: fast path <= 2 s on 2 cores, largest difference <= 1e-9.
"""

from __future__ import annotations

import argparse
import time

from harness import load_average, positive_int, run


def real_texts(n: int, length: int) -> list[list[str]]:
    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.metrics.tokenize import word_tokens

    texts = []
    for article in load_corpus("news").fit:
        tokens = word_tokens(article)
        if len(tokens) >= length:
            texts.append(tokens[:length])
            if len(texts) == n:
                return texts
    from maxbench.errors import MaxbenchError

    raise MaxbenchError(f"the news corpus has only {len(texts)} articles of >= {length} tokens; ask for fewer --texts")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=positive_int, default=1536, help="2 or more")
    ap.add_argument("--tokens", type=positive_int, default=100)
    ap.add_argument(
        "--nltk-texts",
        type=positive_int,
        default=None,
        help="run the nltk loop for only the first K hypotheses (each still against all others)",
    )
    args = ap.parse_args()
    if args.texts < 2:
        ap.error("--texts: Self-BLEU scores each text against the others, so give 2 or more")

    import numpy as np
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    from maxbench.benchmark.metrics.sentence_bleu import self_bleu

    print(f"machine: {load_average()}")
    t0 = time.perf_counter()
    texts = real_texts(args.texts, args.tokens)
    print(
        f"texts: {len(texts)} x {args.tokens} tokens from the BBC news corpus "
        f"(load + tokenise {time.perf_counter() - t0:.2f} s)"
    )

    t0 = time.perf_counter()
    fast = self_bleu(texts, orders=(4,))[4]
    fast_s = time.perf_counter() - t0
    print(f"fast exact path: {fast_s:.3f} s, Self-BLEU-4 = {fast.mean():.12f}")

    k = len(texts) if args.nltk_texts is None else min(args.nltk_texts, len(texts))
    smooth = SmoothingFunction().method1
    t0 = time.perf_counter()
    slow = np.array(
        [
            sentence_bleu(texts[:i] + texts[i + 1 :], texts[i], weights=(0.25,) * 4, smoothing_function=smooth)
            for i in range(k)
        ]
    )
    slow_s = time.perf_counter() - t0
    scope = "all texts" if k == len(texts) else f"first {k} texts; time for all extrapolated x{len(texts) / k:.1f}"
    slow_all = slow_s * len(texts) / k
    print(
        f"nltk loop ({scope}): {slow_s:.1f} s"
        + ("" if k == len(texts) else f" -> {slow_all:.1f} s")
        + (f", Self-BLEU-4 = {slow.mean():.12f}" if k == len(texts) else "")
    )
    diff = float(np.max(np.abs(slow - fast[:k])))
    print(f"speed-up: {slow_all / fast_s:.0f}x; largest |nltk - fast| over {k} texts: {diff:.3e}")
    ok = diff <= 1e-9
    print(f"equal to 1e-9: {'yes' if ok else 'NO'}; fast path <= 2 s: {'yes' if fast_s <= 2 else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
