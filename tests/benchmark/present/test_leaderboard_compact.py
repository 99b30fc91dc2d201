"""leaderboard.md leads with a compact table of the design card's metrics (``ScoreInfo.compact``), led by the
scores a run's metrics declare for it (``Metric.compact_scores``: attr-acc and its ceiling), and gives
every score in the full table after it; the HTML page and the csv hold only the full table, and the
explorer's compact view shows the same columns."""

from __future__ import annotations

import json

from maxbench.benchmark.present.leaderboard import render

# the columns' order and the compact table's as they were before the metrics declared them (ScoreInfo)
PREFERRED = (
    "attr-acc attr-acc-ceiling bleu-2 bleu-3 bleu-4 bleu-5 sacrebleu rouge-l-f meteor bertscore-f1 mauve coherence "
    "ms-jaccard-2 ms-jaccard-3 kld ppl ref-eps-ppl self-bleu-2 self-bleu-3 self-bleu-4 self-bleu-5 rep seq-rep-4 "
    "distinct-1-corpus distinct-2-corpus distinct-3-corpus diversity uniq"
).split()
COMPACT = ("bleu-4", "rouge-l-f", "meteor", "ppl", "self-bleu-4", "rep", "ms-jaccard-3")

SYSTEMS = ("smollm2-135m/softmax/top_p=0.9", "smollm2-135m/sparsemax/top_p=0.9")
# every compact column but rouge-l-f, and others around them, in an order of their own
SCORES = ("rep", "bleu-2", "ppl", "meteor", "bleu-4", "distinct-2-corpus", "ms-jaccard-3", "self-bleu-4", "mauve")


def _run(tmp_path, scores=SCORES, metrics=None, table=True):
    """A scored run of ``scores``; ``metrics``: metric -> the scores it gave, written as scores.json's
    ``metrics`` table (``table``) and as each score's ``metric``."""
    run = tmp_path / "run"
    run.mkdir(parents=True)
    metric_of = {name: m for m, names in (metrics or {}).items() for name in names}
    ident = {"suite": {"name": "toy", "version": "1", "sha256": "a" * 64, "n_items": 4}, "seed": 1, "samples": 1}
    (run / "manifest.json").write_text(json.dumps({"run_id": "run", "identity": ident | {"registry": "t"}}))
    entries = {
        s: {
            "n_prompts": 4,
            "scores": {
                name: {"value": 0.1 * (i + 1) + 0.01 * k, "ci_low": 0.01 * k, "ci_high": 0.5 + 0.01 * k}
                | ({"metric": metric_of[name]} if name in metric_of else {})
                for k, name in enumerate(scores)
            },
        }
        for i, s in enumerate(SYSTEMS)
    }
    doc = {"systems": entries, "comparisons": {"baseline": None}}
    if metrics and table:
        doc["metrics"] = {m: {"scores": list(names)} for m, names in metrics.items()}
    (run / "scores.json").write_text(json.dumps(doc))
    return run


def _generations(run):
    (run / "generations.jsonl").write_text(
        "".join(
            json.dumps({"system": s, "prompt_id": "p0", "sample": 0, "prompt": "a", "reference": "b", "text": "c"})
            + "\n"
            for s in SYSTEMS
        )
    )


def _tables(text: str) -> list[list[list[str]]]:
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            if not line.startswith("|---"):  # the separator under the header
                current.append([c.strip() for c in line[2:-2].split(" | ")])
        else:
            current = None
    return tables


def test_markdown_leads_with_the_compact_table_then_the_full_one(tmp_path):
    render([_run(tmp_path)], tmp_path / "lb")
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    compact, full = _tables(md)
    assert compact[0] == ["system", *(c for c in COMPACT if c in SCORES)]  # COMPACT's order, those present
    assert full[0] == ["system", *(c for c in PREFERRED if c in SCORES)]
    assert md.index("## All metrics") < md.index("| system | bleu-2 |")
    for small, big in zip(compact[1:], full[1:]):  # the same cells, bold marks included
        assert all(small[compact[0].index(c)] == big[full[0].index(c)] for c in compact[0])
    html = (tmp_path / "lb" / "leaderboard.html").read_text()
    assert html.count("<table") == 1 and "All metrics" not in html


def test_explorer_compact_view_shows_the_same_columns(tmp_path):
    from maxbench.benchmark.present.explorer import write_explorer

    run = _run(tmp_path)
    _generations(run)
    index = write_explorer([run], tmp_path / "ex")
    render([run], tmp_path / "lb")
    compact = _tables((tmp_path / "lb" / "leaderboard.md").read_text())[0][0][1:]
    assert f'"compact":{json.dumps(compact, separators=(",", ":"))}' in index.read_text()


def test_without_compact_columns_or_with_only_them_there_is_one_table(tmp_path):
    render([_run(tmp_path, ("bleu-2", "mauve"))], tmp_path / "a")
    render([_run(tmp_path / "x", ("ppl", "bleu-4"))], tmp_path / "b")
    for out in ("a", "b"):
        md = (tmp_path / out / "leaderboard.md").read_text()
        assert len(_tables(md)) == 1 and "All metrics" not in md


# the metrics of SCORES, as scores.json names them
METRICS = {
    "bleu-n": ["bleu-2", "bleu-4"],
    "meteor": ["meteor"],
    "ppl": ["ppl"],
    "self-bleu": ["self-bleu-4"],
    "rep": ["rep"],
    "distinct": ["distinct-2-corpus"],
    "ms-jaccard": ["ms-jaccard-3"],
    "mauve": ["mauve"],
}
ATTR = {"attr-acc": ["attr-acc", "attr-acc-ceiling"]}


def test_attr_acc_leads_the_compact_table_when_the_run_scored_it(tmp_path):
    """attr-acc declares itself for the compact table (AttributeAccuracy.compact_scores): a conditional
    run's leaderboard and explorer lead with it and its ceiling, then the design card's columns."""
    from maxbench.benchmark.present.explorer import write_explorer

    run = _run(tmp_path, (*SCORES, "attr-acc-ceiling", "attr-acc"), METRICS | ATTR)
    _generations(run)
    render([run], tmp_path / "lb")
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    compact, full = _tables(md)
    assert compact[0] == ["system", "attr-acc", "attr-acc-ceiling", *(c for c in COMPACT if c in SCORES)]
    assert full[0] == ["system", *(c for c in PREFERRED if c in (*SCORES, "attr-acc", "attr-acc-ceiling"))]
    for small, big in zip(compact[1:], full[1:]):  # the same cells, bold marks included
        assert all(small[compact[0].index(c)] == big[full[0].index(c)] for c in compact[0])
    index = write_explorer([run], tmp_path / "ex")
    assert f'"compact":{json.dumps(compact[0][1:], separators=(",", ":"))}' in index.read_text()


def test_a_run_without_attr_acc_has_no_such_compact_column(tmp_path):
    render([_run(tmp_path, SCORES, METRICS)], tmp_path / "lb")
    compact, full = _tables((tmp_path / "lb" / "leaderboard.md").read_text())
    assert compact[0] == ["system", *(c for c in COMPACT if c in SCORES)]
    assert not any(c.startswith("attr-acc") for c in compact[0] + full[0])


def test_a_plugin_metric_may_declare_compact_scores(tmp_path):
    """The rule is the Metric contract's, not attr-acc's: a plugin metric declaring compact_scores leads
    the compact table where it is registered; where it is not (a plugin not installed or included),
    its scores stay in the full table only. A scores.json without a metrics table is read score by score."""
    from maxbench import plugins
    from maxbench.benchmark.metrics.base import METRICS as REGISTRY
    from maxbench.benchmark.metrics.base import Metric

    class Judge(Metric):
        name = "toy-judge"
        compact_scores = ("judge",)

    run = _run(tmp_path, (*SCORES, "judge", "judge-extra"), {"toy-judge": ["judge", "judge-extra"]}, table=False)
    render([run], tmp_path / "without")
    compact, _ = _tables((tmp_path / "without" / "leaderboard.md").read_text())
    assert compact[0] == ["system", *(c for c in COMPACT if c in SCORES)]
    REGISTRY.add_plugin("toy-judge", Judge, {"source": "session", "sha256": "0"})
    try:
        render([run], tmp_path / "with")
    finally:
        plugins.forget()
    compact, full = _tables((tmp_path / "with" / "leaderboard.md").read_text())
    assert compact[0] == ["system", "judge", *(c for c in COMPACT if c in SCORES)]
    assert "judge-extra" in full[0]
