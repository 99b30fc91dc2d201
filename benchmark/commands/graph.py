"""``maxbench graph build``: build (or load) the corpus graph that graphmax uses."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "graph",
        help="corpus graphs for graphmax",
        description="Corpus graphs for graphmax: row-normalised bigram counts over a model's tokens.",
    )
    graph_sub = p.add_subparsers(dest="graph_command", metavar="ACTION", required=True)
    b = graph_sub.add_parser(
        "build",
        help="build a corpus graph for a model (or load it from the cache)",
        description="Count bigrams of the model's token ids over the fitting split of a corpus, "
        "normalise rows (A = D^-1 C, eps in D), cache the graph under "
        "$MAXBENCH_HOME/graphs and print its size and cache path.",
    )
    b.add_argument("--model", default="smollm2-135m", help="built-in name, local directory or hub id")
    b.add_argument("--corpus", required=True, help="corpus name: food-reviews, movie-reviews or news")
    b.add_argument(
        "--ngram",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: the bigram graph A; 2: the paper's mixture A + A^2 (default 1)",
    )
    b.add_argument(
        "--eps", type=float, default=None, help="added to each row's total count before dividing (default 1e-6)"
    )
    b.add_argument("--rebuild", action="store_true", help="build even when a cached graph exists")
    b.set_defaults(func=cmd_graph_build)


def cmd_graph_build(args) -> int:
    import time

    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.systems.graph import DEFAULT_EPS, get_graph
    from maxbench.systems.models import load_model

    corpus = load_corpus(args.corpus)
    lm = load_model(args.model, device="cpu")
    t0 = time.perf_counter()
    graph = get_graph(
        lm, corpus, eps=DEFAULT_EPS if args.eps is None else args.eps, ngram=args.ngram, rebuild=args.rebuild
    )
    elapsed = time.perf_counter() - t0
    print(f"graph for model {lm.name} on corpus {corpus.name} (fitting split, {len(corpus.fit)} texts)")
    print(f"vocabulary size: {graph.vocab_size}")
    print(f"nnz: {graph.nnz}")
    if graph.build_seconds is not None:
        print(f"build time: {graph.build_seconds:.2f} s")
    else:
        print(f"build time: loaded from cache in {elapsed:.2f} s")
    print(f"options: ngram={graph.options['ngram']} eps={graph.options['eps']:g}")
    print(f"sha256: {graph.sha256}")
    print(f"cache path: {graph.path}")
    return 0
