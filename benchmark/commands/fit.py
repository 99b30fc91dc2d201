"""``maxbench fit``: train (or load from the cache) a KerBS, fine-tuned softmax (KerBS's control) or
POSG head on a frozen base model."""

from __future__ import annotations

import os
import sys

LAYERS = ("kerbs", "ft-softmax", "posg")


def register(sub) -> None:
    p = sub.add_parser(
        "fit",
        help="train a KerBS, fine-tuned softmax (ft-softmax, KerBS's control) or POSG head on a frozen base model (cached)",
        description="Run the frozen base model once over the corpus's fitting split (hidden states cached under "
        "$MAXBENCH_HOME/hidden), train the head on those states with early stopping on a validation "
        "part, cache it under $MAXBENCH_HOME/heads, and print held-out (test split) perplexity of "
        "softmax vs the head. A head already trained with the same model, corpus and options is "
        "loaded, not retrained. The same options in a system string (kerbs(seed=2), "
        "posg(lm_prior=false)) name the same head. ft-softmax is KerBS's training with one sense per "
        "word and no kernel: the output embeddings fine-tuned on the same data, KerBS's control.",
    )
    p.add_argument(
        "--model", default="smollm2-135m", help="built-in name, local directory or hub id (default smollm2-135m)"
    )
    p.add_argument("--layer", required=True, choices=LAYERS, help="which head to train")
    p.add_argument("--model-args", default=None, metavar="K=V,...", help="model options (docs/models.md)")
    p.add_argument("--corpus", required=True, help="corpus name: food-reviews, movie-reviews or news")
    p.add_argument(
        "--budget-tokens",
        type=int,
        default=None,
        help="training positions taken from the fitting split (default 60000; validation gets a "
        "tenth of it and the held-out test part another tenth); larger budgets train longer",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="maximum epochs (kerbs and ft-softmax default 2, posg 10); early stopping may end sooner",
    )
    p.add_argument("--senses", type=int, default=None, help="kerbs: extra senses beyond one per token (default 1024)")
    p.add_argument(
        "--active-vocab",
        type=int,
        default=None,
        help="kerbs, ft-softmax: words whose senses are trained (default 8192; the rest stay at the base embedding)",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="Adam learning rate (kerbs and ft-softmax 5e-5 for the embeddings, posg 1e-3)",
    )
    p.add_argument(
        "--no-catch-all",
        action="store_true",
        help="posg: no catch-all class (tokens outside every tag vocabulary get probability 0)",
    )
    p.add_argument(
        "--no-lm-prior",
        action="store_true",
        help="posg: the paper's plain linear POS head, without the base model's class log-masses as inputs",
    )
    p.add_argument(
        "--tag-vocab",
        type=int,
        default=None,
        help="posg: at most this many tokens per tag vocabulary, each tag's most frequent (default 0: all)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation and batch order (default 0)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the GPU when present)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: the cores this process may use); on a busy machine "
        "1 thread can be much faster than 2",
    )
    p.add_argument("--retrain", action="store_true", help="train even when a cached head exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_fit)


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _check_base_model(model: str, layer: str) -> None:
    """``fit`` trains a head on a base model: a model with an adapter (``MODEL+ADAPTER``) is refused in
    one line naming the adapter, pointing at the system string that fits the head on the adapted model
    (generate and run fit it there)."""
    from maxbench.errors import MaxbenchError
    from maxbench.systems.adapters import split_adapter

    base, adapter, _ = split_adapter(model)  # stacked adapters are refused here, by name
    if adapter is not None:
        raise MaxbenchError(
            f"--model '{model}' is base model '{base}' with adapter '{adapter}': fit trains a head on a base model; "
            f"give --model {base}, or name the system '{model}/{layer}/greedy' in generate or run, which fit the "
            "head on the adapted model"
        )


def cmd_fit(args) -> int:
    import time

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.errors import MaxbenchError
    from maxbench.systems.hidden_cache import MIN_TRAIN_POSITIONS

    # Cheap checks first, so bad input fails before the model loads.
    _check_base_model(args.model, args.layer)
    corpus = load_corpus(args.corpus)
    if args.budget_tokens is not None and args.budget_tokens < MIN_TRAIN_POSITIONS:
        raise MaxbenchError(
            f"--budget-tokens {args.budget_tokens} is too small; heads need at least "
            f"{MIN_TRAIN_POSITIONS} training positions"
        )
    for name in ("epochs", "senses", "active_vocab", "tag_vocab", "seed"):
        value = getattr(args, name)
        low = 0 if name in ("senses", "tag_vocab", "seed") else 1
        if value is not None and value < low:
            raise MaxbenchError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if args.lr is not None and not args.lr > 0:
        raise MaxbenchError(f"--lr must be > 0, got {args.lr}")
    if args.layer == "ft-softmax" and args.senses:
        raise MaxbenchError("--senses: ft-softmax has one sense per word (it is KerBS without extra senses)")
    if args.layer == "posg":
        from maxbench.systems.layers.posg.fit import load_tagger

        tagger = load_tagger()  # a missing tagger fails here, before any model work
    threads = args.threads if args.threads is not None else _default_threads()

    from maxbench.systems.models import load_model, parse_model_args

    lm = load_model(args.model, device=args.device, threads=threads, options=parse_model_args(args.model_args))
    t0 = time.perf_counter()
    opts = {"epochs": args.epochs, "lr": args.lr, "seed": args.seed}
    progress = not args.quiet
    if args.layer in ("kerbs", "ft-softmax"):
        from maxbench.systems.layers.kerbs.fit import config_from_options, fit_kerbs

        cfg = config_from_options(dict(opts, senses=args.senses, active_vocab=args.active_vocab))
        if args.layer == "ft-softmax":
            cfg.senses, cfg.kernel = 0, False
        _, meta = fit_kerbs(
            lm, corpus, args.budget_tokens, cfg, progress=progress, retrain=args.retrain, layer=args.layer
        )
    else:
        from maxbench.systems.layers.posg.fit import config_from_options, fit_posg

        cfg = config_from_options(
            dict(opts, catch_all=not args.no_catch_all, lm_prior=not args.no_lm_prior, tag_vocab=args.tag_vocab)
        )
        _, meta = fit_posg(lm, corpus, args.budget_tokens, cfg, tagger=tagger, progress=progress, retrain=args.retrain)
    elapsed = time.perf_counter() - t0
    _report(args.layer, lm, corpus, meta, elapsed)
    if meta.get("untrained_best"):
        from maxbench.systems.layers.head_cache import untrained_best_warning

        print(f"maxbench: {untrained_best_warning(args.layer, meta)}", file=sys.stderr, flush=True)
    return 0


def _report(layer: str, lm, corpus, meta: dict, elapsed: float) -> None:
    secs = meta["seconds"]
    print(
        f"{layer} head for model {lm.name} on corpus {corpus.name} (budget {meta['budget_tokens']} training positions)"
    )
    from maxbench.systems.layers.head_cache import head_perplexity_key

    head_ppl = meta[head_perplexity_key(layer)]
    head_text = f"{head_ppl:.3f}" if head_ppl is not None else "inf"
    if layer == "posg":
        head_text += (
            f" (epsilon-perplexity {meta['test_eps_ppl_posg']:.3f} with eps={meta['epsilon']:g}; "
            f"{meta['test_ppl_posg_nonzero_events']:.3f} over the nonzero events)"
            if head_ppl is None
            else ""
        )
    print(
        f"held-out perplexity (test split, {meta['test_positions']} positions): "
        f"softmax {meta['test_ppl_softmax']:.3f}, {layer} {head_text}"
    )
    if layer == "posg":
        print(
            f"POS-head accuracy: {meta['pos_accuracy']:.4f} (majority tag {meta['pos_majority_baseline']:.4f}), "
            f"{len(meta['tags'])} classes"
        )
        print(
            f"zero-probability events: {meta['test_zero_probability_events']} with the layer; "
            f"{meta['test_outside_every_tag_vocabulary']} held-out tokens lie outside every tag vocabulary "
            f"(zero without the catch-all), {meta['test_outside_own_tag_vocabulary']} outside their own tag's"
        )
    elif layer == "ft-softmax":
        print(
            f"senses: one per word, {meta['vocab_size']} output embeddings ({meta['active_words']} fine-tuned), "
            f"no kernel (theta held at 0): a softmax"
        )
    else:
        t = meta["training"]
        print(
            f"senses: {meta['vocab_size']} anchors ({meta['active_words']} trained) + {meta['extra_senses']} extra, "
            f"{t['moves']} reallocations, at most {meta['senses_per_word_max']} per word"
        )
    hist = meta["training"]["history"]
    print(
        f"training: {len(hist) - 1} epochs, best validation perplexity {meta['training']['best_valid_ppl']:.3f} "
        f"at epoch {meta['best_epoch']} (before training {hist[0]['valid_ppl']:.3f})"
    )
    print(
        "times (s): "
        + ", ".join(f"{k} {v}" for k, v in secs.items())
        + f"; torch threads {meta['torch_threads']}, device {meta['device']}"
    )
    print(f"loaded from cache in {elapsed:.1f} s" if meta.get("loaded_from_cache") else f"trained in {elapsed:.1f} s")
    print(f"sha256: {meta['sha256']}")
    print(f"cache path: {meta['path']}")
    from maxbench.fileio import maxbench_home

    hidden = maxbench_home() / "hidden" / meta["cache_key"]
    built = ""
    if (hidden / "meta.json").exists():
        import json

        info = json.loads((hidden / "meta.json").read_text())
        built = f" (built once in {info['build_seconds']} s with {info['torch_threads']} torch threads)"
    print(f"hidden-state cache: {hidden}{built}")
