"""The human row (the suite's references scored as a system's texts) in scores.json, the leaderboard,
the explorer and the API; bold and the tests of closest-to-human scores read against it."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics

import numpy as np
import pytest

from maxbench.benchmark.metrics.base import MetricResult, ScoreInfo, get_metric, stats_score
from maxbench.benchmark.metrics.human import HUMAN_ROW
from maxbench.benchmark.metrics.scoring import ScoringOptions, compare_one, score_run
from maxbench.benchmark.metrics.stats import mean_stats
from maxbench.benchmark.present.leaderboard import render

BASE = "smollm2-135m/softmax/top_p=0.9"
DEGENERATE = "smollm2-135m/sparsemax/top_p=0.9"  # the lowest perplexity, on text that repeats itself
CLOSE = "smollm2-135m/kerbs/top_p=0.9"  # the perplexity nearest the references'
N = 40


def _result(values_by_score: dict[str, np.ndarray]) -> list[MetricResult]:
    ids = [f"p{i}" for i in range(N)]
    scores = {n: stats_score(n, mean_stats(ids, np.arange(N), v)) for n, v in values_by_score.items()}
    return [
        MetricResult("ppl", "", "", False, {"ppl": scores["ppl"]}),
        MetricResult("rep", "", "", False, {"rep": scores["rep"]}),
    ]


def _entry(result: list[MetricResult]) -> dict:
    out = {}
    for r in result:
        for n, s in r.scores.items():
            out[n] = {"metric": r.metric, "value": s.value, "ci_low": s.value * 0.9, "ci_high": s.value * 1.1}
            out[n]["higher_is_better"] = False
    return out


def _scored_run(tmp_path, display: dict | None = None):
    """A run scored by hand through the real comparisons: the degenerate system has the lowest perplexity
    and the most repetition; the human row has perplexity near 20."""
    rng = np.random.default_rng(0)
    human = _result({"ppl": 20 + rng.normal(size=N), "rep": 0.02 + 0.01 * rng.random(N)})
    systems = {
        BASE: _result({"ppl": 14 + rng.normal(size=N), "rep": 0.01 + 0.01 * rng.random(N)}),
        DEGENERATE: _result({"ppl": 2.5 + 0.1 * rng.normal(size=N), "rep": 0.3 + 0.05 * rng.random(N)}),
        CLOSE: _result({"ppl": 19.5 + rng.normal(size=N), "rep": 0.0 + 0.001 * rng.random(N)}),
    }
    options = ScoringOptions(metrics=["ppl", "rep"], n_resamples=200)
    closeness = {"ppl", "rep"}
    run = tmp_path / "run"
    run.mkdir()
    ident = {"suite": {"name": "toy", "version": "1", "sha256": "a" * 64, "n_items": N}, "seed": 1, "samples": 1}
    (run / "manifest.json").write_text(json.dumps({"run_id": "run", "identity": ident | {"registry": "t"}}))
    doc = {
        "metrics": {
            "ppl": {"scores": ["ppl"], "display": display or {"ppl": get_metric("ppl").score_info["ppl"].to_dict()}},
            "rep": {"scores": ["rep"], "display": {"rep": get_metric("rep").score_info["rep"].to_dict()}},
        },
        "systems": {s: {"n_prompts": N, "scores": _entry(r)} for s, r in systems.items()},
        "human": {
            "label": HUMAN_ROW,
            "signature": "human|texts:references|cut:whole",
            "n_prompts": N,
            "cut_words": None,
            "scores": _entry(human)
            | {"bleu-4": {"metric": "bleu-n", "value": None, "reason": "compares texts with the references"}},
        },
        "comparisons": {
            "baseline": BASE,
            "systems": {
                s: compare_one(r, systems[BASE], options, human, closeness) for s, r in systems.items() if s != BASE
            },
        },
    }
    (run / "scores.json").write_text(json.dumps(doc))
    return run, doc


def _md_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_a_degenerate_system_is_not_bold_for_perplexity_and_its_lower_perplexity_reads_as_farther(tmp_path):
    run, doc = _scored_run(tmp_path)
    tests = doc["comparisons"]["systems"][DEGENERATE]["ppl"]
    assert tests["test"] == "closeness" and tests["difference"] > 0 and tests["p_value"] < 0.01
    render([run], tmp_path / "lb")
    md = (tmp_path / "lb/leaderboard.md").read_text()
    rows = _md_rows(md)
    header, body = rows[0], {r[0].strip("`"): r for r in rows[1 : 1 + 4]}
    ppl = header.index("ppl")
    assert rows[1][0] == HUMAN_ROW  # the human row leads
    assert not body[DEGENERATE][ppl].startswith("**")  # the lowest perplexity is not the best
    assert body[CLOSE][ppl].startswith("**")  # the one nearest the references' is
    assert "farther" in body[DEGENERATE][ppl] and "closer" not in body[DEGENERATE][ppl]
    assert "closer" in body[CLOSE][ppl]
    assert not body[HUMAN_ROW][ppl].startswith("**")  # the human row is the reference, never bold
    assert "|system - human| - |baseline - human|" in md and "resampled jointly" in md
    assert "the row closest to the human row for PPL, rep" in md
    assert "n/a there" not in md or "compares texts with the references" in md
    # the csv: the human row first, its numbers as computed
    table = list(csv.DictReader(io.StringIO((tmp_path / "lb/leaderboard.csv").read_text())))
    assert table[0]["system"] == HUMAN_ROW
    assert float(table[0]["ppl"]) == pytest.approx(doc["human"]["scores"]["ppl"]["value"])
    assert table[0]["ppl_p_vs_baseline"] == ""
    html = (tmp_path / "lb/leaderboard.html").read_text()
    assert HUMAN_ROW in html and "closer" in html and "farther" in html


def test_the_explorer_shows_the_human_row_and_bolds_by_closeness(tmp_path):
    from maxbench.benchmark.present.explorer.data import leaderboard_data
    from maxbench.benchmark.present.leaderboard import comparable_rows, load_scored_run

    run, _ = _scored_run(tmp_path)
    runs = [load_scored_run(run)]
    lb = leaderboard_data(runs, comparable_rows(runs, False), None, {})
    first = lb["rows"][0]
    assert first["human"] is True and first["system"] == HUMAN_ROW and "cut:whole" in first["signature"]
    best = {r["system"]: r["cells"]["ppl"]["best"] for r in lb["rows"]}
    assert best == {HUMAN_ROW: False, BASE: False, DEGENERATE: False, CLOSE: True}
    assert lb["meta"]["ppl"] | {"family": None} == {
        "family": None,
        "higher_is_better": False,
        "goal": "human",
        "display": "PPL",
        "scale": 1.0,
        "digits": 2,
    }
    assert lb["meta"]["rep"]["scale"] == 100.0


def test_a_plugin_score_is_shown_as_computed_and_the_legend_says_no_goal_was_declared(tmp_path):
    """A plugin "mean length in words" of 21.25 shows as 21.25, not 2125.00, in the md, the HTML and the
    explorer: a score is scaled only where its metadata says so."""
    from maxbench.benchmark.present.explorer.data import leaderboard_data
    from maxbench.benchmark.present.leaderboard import comparable_rows, load_scored_run

    run, doc = _scored_run(tmp_path)
    for i, s in enumerate(doc["systems"].values()):
        s["scores"]["mean-words"] = {"metric": "mean-words", "value": 21.25 + i, "ci_low": 20.0, "ci_high": 23.5}
    doc["metrics"]["mean-words"] = {
        "scores": ["mean-words"],
        "display": {"mean-words": ScoreInfo("mean words").to_dict()},
    }
    (run / "scores.json").write_text(json.dumps(doc))
    render([run], tmp_path / "lb")
    md = (tmp_path / "lb/leaderboard.md").read_text()
    assert "21.25 [20.00, 23.50]" in md and "2125.00" not in md
    assert "no goal declared, so by the metric's direction (mean words)" in md
    html = (tmp_path / "lb/leaderboard.html").read_text()
    assert "21.25" in html and "2125.00" not in html
    runs = [load_scored_run(run)]
    lb = leaderboard_data(runs, comparable_rows(runs, False), None, {})
    assert lb["meta"]["mean-words"]["scale"] == 1.0 and lb["meta"]["mean-words"]["goal"] is None
    # a plugin score whose metric is not installed and kept no metadata: as computed too
    del doc["metrics"]["mean-words"]
    (run / "scores.json").write_text(json.dumps(doc))
    render([run], tmp_path / "lb2")
    assert "21.25 [20.00, 23.50]" in (tmp_path / "lb2/leaderboard.md").read_text()


def _tiny_run(tmp_path):
    """A run of two systems on four prompts, written as generate writes it (finish 'length' where a text
    reached max_new_tokens), for scoring with the tiny-random evaluator."""
    refs = [
        "thin. Not good at all, maybe old, not sure; it was a waste and I used it to absorb smells.",
        "It is a really good stabilizer of real whipped cream and it lasts longer in the fridge.",
        "local grocery store sells them for less, so buy there instead of here.",
        "pops are great for kids and adults alike, sweet and not sticky at all.",
    ]
    prompts = ["It tastes watery--very", "I've used Whip It for a long time.", "Better at your", "John's xylitol"]
    texts = {
        "a": [" good coffee with a rich taste and more", " a fine product", " nice and cheap and good", " tasty"],
        "b": [" the the the the the the the", " and and and and", " so so so so so so", " yes yes yes yes"],
    }
    rows = []
    for s, ts in texts.items():
        for i, t in enumerate(ts):
            rows.append(
                {
                    "system": f"tiny-random/{'softmax' if s == 'a' else 'sparsemax'}/top_p=0.9",
                    "prompt_id": f"p{i}",
                    "sample": 0,
                    "seed": i,
                    "prompt": prompts[i],
                    "reference": refs[i],
                    "text": t,
                    "n_tokens": 8,
                    "finish": "length" if len(t.split()) > 3 else "eos",
                }
            )
    run = tmp_path / "run"
    run.mkdir()
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, rows


def test_the_human_rows_perplexity_is_the_evaluators_perplexity_of_the_cut_references(tmp_path):
    import torch

    from maxbench.systems.models import load_model

    run, rows = _tiny_run(tmp_path)
    doc = score_run(
        run,
        ScoringOptions(
            metrics=["ppl", "rep", "bleu-n"], n_resamples=50, evaluator="tiny-random", threads=1, progress=False
        ),
        baseline="tiny-random/softmax/top_p=0.9",
        use_cache=False,
    )
    human = doc["human"]
    words = round(statistics.median(len(r["text"].split()) for r in rows if r["finish"] == "length"))
    assert human["cut_words"] == words and f"first-{words}-words" in human["signature"]
    assert human["scores"]["bleu-4"]["value"] is None and "references" in human["scores"]["bleu-4"]["reason"]
    assert human["not_applicable"]["bleu-n"]
    # independently: each reference cut to its first `words` words, continuing its prompt after a space
    lm = load_model("tiny-random")
    total, count = 0.0, 0
    seen = {}
    for r in rows:
        seen.setdefault(r["prompt_id"], r)
    for r in seen.values():
        ctx = lm.tokenizer(r["prompt"])["input_ids"]
        cont = lm.tokenizer(" " + " ".join(r["reference"].split()[:words]), add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = lm.model(torch.tensor([ctx + cont])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        total -= sum(float(logp[len(ctx) + j - 1, t]) for j, t in enumerate(cont))
        count += len(cont)
    assert human["scores"]["ppl"]["value"] == pytest.approx(math.exp(total / count), rel=1e-4)
    assert human["scores"]["ppl"]["ci_low"] is not None  # the same bootstrap over prompts
    # the perplexity's test is of the distance to the human row
    assert doc["comparisons"]["systems"]["tiny-random/sparsemax/top_p=0.9"]["ppl"]["test"] == "closeness"
    assert "test" not in doc["comparisons"]["systems"]["tiny-random/sparsemax/top_p=0.9"]["bleu-4"]
    # kept in scores.json through the run folder's owner, and shown by the API
    from maxbench.api import load_run

    assert load_run(run).human == human
