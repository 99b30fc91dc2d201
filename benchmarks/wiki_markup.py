"""Stripping the wikipedia corpus's markup: mwparserfromhell's own ``remove`` against maxbench's
removal through one walk of the page (maxbench.benchmark.data.corpora._remove), side by side.

Extracting the ``wikipedia`` corpus (part of the set-up, in the process beside the model's
conversion) parses each of the gensim sample's 106 articles and removes its headings, file and
category links and reference, table and formula tags, 11,334 nodes in all. mwparserfromhell's
``Wikicode.remove`` searches the page for every node it removes; ``_remove`` takes each node's
holder from one walk. Each --repeats run strips the first --articles articles both ways,
alternating their order, and the script prints the median seconds of each, their ratio and
whether both gave the same prose; then the load average.

    .venv/bin/python benchmarks/wiki_markup.py
"""

from __future__ import annotations

import argparse
import itertools

from harness import alternate, load_average, positive_int, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=positive_int, default=106, help="the first N articles (106 in all)")
    ap.add_argument("--repeats", type=positive_int, default=1)
    args = ap.parse_args()
    from maxbench.benchmark.data import corpora

    bodies = list(itertools.islice(corpora.wiki_articles(), args.articles))
    print(f"{len(bodies)} articles, {sum(map(len, bodies)):,} characters of markup; {load_average()}")
    walk = corpora._holders, corpora._remove

    def strip(library: bool) -> list[str]:
        if library:  # the page itself stands for the holders, and each node is removed from it
            corpora._holders, corpora._remove = (
                (lambda code: code),
                (lambda page, nodes: [page.remove(n) for n in nodes]),
            )
        try:
            return [corpora.wiki_prose(b) for b in bodies]
        finally:
            corpora._holders, corpora._remove = walk

    medians, prose = alternate({"Wikicode.remove": lambda: strip(True), "one walk": lambda: strip(False)}, args.repeats)
    for label, seconds in medians.items():
        print(f"  {label:<16} {seconds:7.2f} s")
    same = prose["Wikicode.remove"] == prose["one walk"]
    print(f"ratio {medians['Wikicode.remove'] / medians['one walk']:.2f}x; same prose: {'yes' if same else 'NO'}")
    print(load_average())
    return 0 if same else 1


if __name__ == "__main__":
    run(main)
