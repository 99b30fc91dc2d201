"""The committed leaderboards render again byte-identically from the repository."""

import csv
import json
import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.runs import leaderboard_table, write_scored_run


def _committed_run(tmp_path, folder: Path) -> Path:
    """The scored run behind a committed leaderboard, rebuilt from the numbers its csv holds (12
    significant digits, which print the same at the 2 decimals shown) and its md (baseline, n/a)."""
    md = (folder / "leaderboard.md").read_text()
    with open(folder / "leaderboard.csv") as f:
        rows = list(csv.reader(f))
    cols = [c for c in rows[0][1:] if not c.endswith(("_ci_low", "_ci_high", "_p_vs_baseline"))]
    lower = {"kld", "ppl", "ref-eps-ppl", "ref-ppl", "rep", "seq-rep-4", "ref-zero-frac"}
    md_rows = {r[0].strip("`"): r[1:] for r in leaderboard_table(md)[1:]}
    baseline = re.search(r"against the baseline `([^`]*)`", md).group(1)
    source = re.search(r"^Sources: `([^`]*)`$", md, re.M).group(1)
    num = lambda x: None if x == "" else float(x)  # noqa: E731
    systems, comps, human = {}, {}, None
    for row in rows[1:]:
        if row[0].startswith("human (references)"):  # the human row: its scores, signature and n/a reasons
            human = _committed_human(md, cols, row, num)
            continue
        scores, ps = {}, {}
        for i, col in enumerate(cols):
            v, lo, hi, p = row[1 + 4 * i : 5 + 4 * i]
            if v == lo == hi == p == "" and md_rows[row[0]][i] != "n/a":
                continue
            hib = not (col in lower or col.startswith("self-bleu"))
            scores[col] = {"value": num(v), "ci_low": num(lo), "ci_high": num(hi), "higher_is_better": hib}
            if p:
                ps[col] = {"p_value": float(p)}
                way = re.search(r" (closer|farther)", md_rows[row[0]][i])  # a test of the distance to the human row
                if way:
                    ps[col] |= {"test": "closeness", "difference": -1.0 if way.group(1) == "closer" else 1.0}
        systems[row[0]] = {"n_prompts": 96, "scores": scores}
        comps[row[0]] = ps
    registry, suite = re.match(r"# maxbench leaderboard: (\S+) on (\S+)\n", md).groups()
    run = write_scored_run(tmp_path, source, list(systems), suite=suite, n_items=96)
    ident = json.loads((run / "manifest.json").read_text())
    ident["identity"]["registry"] = registry
    (run / "manifest.json").write_text(json.dumps(ident))
    doc = {"systems": systems, "comparisons": {"baseline": baseline, "systems": comps}}
    if human is not None:
        doc["human"] = human
    (run / "scores.json").write_text(json.dumps(doc))
    return Path(source)


def _committed_human(md: str, cols: list[str], row: list[str], num) -> dict:
    """The human row behind a committed leaderboard: its numbers from the csv, its signature and the
    reasons of its n/a cells from the md's legend (which names scores by their display names)."""
    from maxbench.benchmark.metrics.base import builtin_score_info

    display = {i.display: name for name, i in builtin_score_info().items()}
    reasons = {}
    for names, why in re.findall(r"n/a there: (.*?): (.*?\.)(?= n/a there|\n|$)", md):
        reasons |= {display.get(n, n): why[:-1] for n in names.split(", ")}
    signature = re.search(r"`(human\|[^`]*)`", md).group(1)
    words = re.search(r"first-(\d+)-words", signature)
    scores = {}
    for i, col in enumerate(cols):
        v, lo, hi, _ = row[1 + 4 * i : 5 + 4 * i]
        scores[col] = {"value": num(v), "ci_low": num(lo), "ci_high": num(hi), "reason": reasons.get(col)}
    return {
        "signature": signature,
        "n_prompts": 96,
        "cut_words": int(words.group(1)) if words else None,
        "scores": scores,
    }


@pytest.mark.parametrize("folder", ["results", "results/lambda-sweep"])
def test_committed_leaderboards_render_byte_identically_through_the_document_model(tmp_path, monkeypatch, folder):
    from maxbench.benchmark.present.leaderboard import render

    committed = ROOT / folder
    monkeypatch.chdir(tmp_path)  # the md names its source as given: results/runs/<run>
    source = _committed_run(tmp_path, committed)
    render([source], tmp_path / "out")
    for name in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (committed / name).read_bytes(), name
