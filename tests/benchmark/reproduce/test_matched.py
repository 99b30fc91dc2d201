"""Matched operating points (issue 51, item 8): a paper's ``[[matched]]`` entry compares the method
with its baseline at the same diversity, from sweeps of both in the runs, outside the counts; runs
without the sweep points give one row, not comparable, naming the sweep needed. Synthetic run
folders with known curves."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from maxbench.benchmark.reproduce import matched
from maxbench.benchmark.reproduce.cells import Report
from maxbench.benchmark.reproduce.evidence import Evidence, Pairs
from maxbench.benchmark.reproduce.exports import report_json
from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.protocol import RunSpec, check_metrics, matched_roles
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE
from maxbench.document import render_markdown
from maxbench.errors import MaxbenchError
from maxbench.rundir import generations_sha256

TOY = """
paper = "toy"
title = "toy"
source = "tests"
[protocol]
models = ["m1"]
corpora = ["c"]
folds = 0
baseline = "softmax"
metrics = ["bleu-n", "self-bleu"]
[protocol.systems]
softmax = "softmax/top_p=0.5"
sparsemax = "sparsemax/top_p=0.5"

[[claims]]
id = "bleu"
where = "Table 1"
statement = "sparsemax raises BLEU-4"
methods = ["sparsemax"]
baseline = "softmax"
scores = ["bleu-4"]
direction = "higher"
paper_baseline = [0.1]
paper_method = [0.2]

[[matched]]
id = "bleu-at-matched-diversity"
claims = ["bleu"]
method = "sparsemax"
baseline = "softmax"
quality = "bleu-4"
match = "self-bleu-4"
{extra}
sweeps = {{ sparsemax = {{ top_p = [0.3, 0.5, 0.7] }}, softmax = {{ top_p = [0.3, 0.5, 0.7, 0.9] }} }}
"""

#: the curves' true points (self-bleu-4, bleu-4), in top_p's order
METHOD = {0.3: (0.30, 0.20), 0.5: (0.20, 0.18), 0.7: (0.10, 0.15)}
BASELINE = {0.3: (0.35, 0.15), 0.5: (0.25, 0.12), 0.7: (0.15, 0.09), 0.9: (0.05, 0.05)}
N_PROMPTS = 20


def toy(tmp_path, extra=""):
    path = tmp_path / "toy.toml"
    path.write_text(TOY.format(extra=extra))
    return load_paper(str(path))


def entry(value, rng, higher=True):
    noise = rng.standard_normal(N_PROMPTS) * 0.004
    per = value + noise - noise.mean()  # per-prompt values whose mean is the value
    return {
        "value": float(per.mean()),
        "ci_low": value - 0.01,
        "ci_high": value + 0.01,
        "higher_is_better": higher,
        "metric": "bleu-n" if higher else "self-bleu",
        "per_prompt": {f"p{i:02d}": float(v) for i, v in enumerate(per)},
    }


def run_folder(tmp_path, points=True):
    """A scored run of the toy protocol: its two roles at top_p 0.5, and (``points``) both sweeps."""
    rng = np.random.default_rng(0)
    run_dir = tmp_path / "runs" / "m1-c"
    run_dir.mkdir(parents=True)
    systems = {}
    for layer, curve in (("sparsemax", METHOD), ("softmax", BASELINE)):
        for top_p, (x, y) in curve.items():
            if points or top_p == 0.5:
                scores = {"self-bleu-4": entry(x, rng, higher=False), "bleu-4": entry(y, rng)}
                systems[f"m1/{layer}/top_p={top_p}"] = {"n_prompts": N_PROMPTS, "scores": scores}
    rows = [
        {"system": s, "prompt_id": f"p{i:02d}", "sample": 0, "text": "t"} for s in systems for i in range(N_PROMPTS)
    ]
    (run_dir / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "m1-c", "systems": {s: {} for s in systems}}))
    doc = {
        "format": "maxbench-scores/1",
        "run_id": "m1-c",
        "generations_sha256": generations_sha256(run_dir),
        "bootstrap": {"n_resamples": 400, "seed": 0, "level": 0.95},
        "systems": systems,
    }
    (run_dir / "scores.json").write_text(json.dumps(doc))
    plan = SimpleNamespace(
        run_dir=run_dir, suite=SimpleNamespace(items=[{}] * N_PROMPTS, name="s"), systems=[], corpus="c"
    )
    roles = {"softmax": "m1/softmax/top_p=0.5", "sparsemax": "m1/sparsemax/top_p=0.5"}
    return RunSpec("m1", "c", None, plan, roles, roles["softmax"])


def evidence(tmp_path, run):
    return Evidence.of([run], Pairs(50, tmp_path / "pairs.json"))


def test_with_both_sweeps_the_method_is_compared_at_its_own_diversity_on_the_baseline_s_curve(tmp_path):
    paper = toy(tmp_path)
    run = run_folder(tmp_path)
    (row,) = matched.rows(paper, evidence(tmp_path, run))
    # the method's operating point (top_p 0.5) has self-bleu-4 0.20; the baseline's curve reaches it
    # between top_p 0.5 (0.25, 0.12) and 0.7 (0.15, 0.09): 0.12 + (0.20 - 0.25) / (0.15 - 0.25) * -0.03
    assert row.target == pytest.approx(0.20, abs=1e-9) and "sparsemax's operating point" in row.target_source
    assert row.method_value == pytest.approx(0.18, abs=1e-9)
    assert row.baseline_value == pytest.approx(0.105, abs=1e-9)
    assert row.difference == pytest.approx(0.075, abs=1e-9) and row.low < 0.075 < row.high
    assert row.low > 0 and row.reading == matched.METHOD_BETTER and row.run == "m1-c"
    assert row.method_text.startswith("percentile bootstrap over prompts, resampled jointly")
    md = render_markdown([matched.section(paper, [row])])
    assert "Matched operating points (sensitivity, outside the counts)" in md and "method better" in md
    assert "self-bleu-4 = 0.2" in md and "0.18 / 0.105" in md


def test_without_the_sweep_points_the_row_is_not_comparable_and_names_the_sweep_and_its_command(tmp_path):
    paper = toy(tmp_path)
    run = run_folder(tmp_path, points=False)
    (row,) = matched.rows(paper, evidence(tmp_path, run))
    assert row.reading == NOT_COMPARABLE and row.difference is None
    assert row.why.startswith(
        "needs a sweep of sparsemax over top_p (0.3, 0.5, 0.7) and softmax over top_p (0.3, 0.5, 0.7, 0.9)"
    )
    assert "5 of 7 points not scored in m1-c" in row.why
    assert "`maxbench reproduce toy --models m1 --corpora c --roles bleu-at-matched-diversity`" in row.why


def test_a_matched_value_beyond_a_curve_is_no_overlap_never_extrapolated(tmp_path):
    paper = toy(tmp_path, extra="at = 0.07")  # below the method's lowest self-bleu-4 (0.10), within the baseline's
    (row,) = matched.rows(paper, evidence(tmp_path, run_folder(tmp_path)))
    assert row.reading == matched.NO_OVERLAP and row.difference is None and "never extrapolated" in row.why
    assert row.why.startswith("sparsemax top_p do(es) not reach self-bleu-4 = 0.07")


def test_the_rows_are_in_report_json_only_for_a_paper_with_matched_entries(tmp_path):
    paper = toy(tmp_path)
    run = run_folder(tmp_path)
    ev = evidence(tmp_path, run)
    rep = Report(paper=paper, evidence=ev, rows=[], cells=[], matched=matched.rows(paper, ev))
    doc = report_json(rep)
    assert [r["reading"] for r in doc["matched"]] == [matched.METHOD_BETTER]
    assert doc["headline"]["cells"] == 0  # outside the counts


def test_a_matched_entry_s_sweep_points_are_planned_only_when_roles_names_the_entry(tmp_path):
    paper = toy(tmp_path)
    assert matched_roles(paper, []) == {}
    planned = matched_roles(paper, ["bleu-at-matched-diversity"])
    assert planned["softmax~top_p=0.9"] == (("m1",), ("c",), "softmax/top_p=0.9")
    assert planned["sparsemax~top_p=0.3"][2] == "sparsemax/top_p=0.3" and len(planned) == 7
    assert list(matched_roles(paper, ["softmax~top_p=0.7"])) == ["softmax~top_p=0.7"]


@pytest.mark.parametrize(
    "extra, says",
    [
        ('at = "middle"', "'at' must be one of method, baseline, human or a number"),
        ('sweeps = { sparsemax = { top_p = [0.3] }, softmax = { top_p = [0.3, 0.5] } }', "two distinct numbers"),
        ('sweeps = { sparsemax = { top_p = [0.3, 0.5], temp = [1, 2] }, softmax = { top_p = [0.3, 0.5] } }',
         "exactly one option"),
        ('sweeps = { sparsemax = { top_p = [0.3, 0.5] } }', "for the method and the baseline"),
    ],
)  # fmt: skip
def test_a_bad_matched_entry_is_one_line(tmp_path, extra, says):
    text = TOY.format(extra=extra)
    if extra.startswith("sweeps"):  # the entry's own sweeps replaced
        text = text.replace(
            "sweeps = { sparsemax = { top_p = [0.3, 0.5, 0.7] }, softmax = { top_p = [0.3, 0.5, 0.7, 0.9] } }\n", ""
        )
    (tmp_path / "toy.toml").write_text(text)
    with pytest.raises(MaxbenchError, match=says) as exc:
        load_paper(str(tmp_path / "toy.toml"))
    assert "\n" not in str(exc.value) and "matched 'bleu-at-matched-diversity'" in str(exc.value)


def test_a_matched_entry_on_a_score_no_protocol_metric_computes_is_one_line(tmp_path):
    (tmp_path / "toy.toml").write_text(TOY.format(extra="").replace('match = "self-bleu-4"', 'match = "self-blue-4"'))
    with pytest.raises(MaxbenchError, match="matched 'bleu-at-matched-diversity'.*self-blue-4"):
        check_metrics(load_paper(str(tmp_path / "toy.toml")))


@pytest.mark.parametrize("name", ["posg", "graphmax"])
def test_the_papers_that_trade_quality_for_diversity_name_their_matched_sweeps(name):
    paper = load_paper(name)
    check_metrics(paper)
    assert paper.matched
    for spec in paper.matched:  # graphmax: softmax tuned by its nucleus, and by its temperature
        assert spec.at == "method" and len(spec.sweeps) == 2
        # the protocol's own operating point of each role is a point of its sweep
        for role in (spec.method, spec.baseline):
            sweep = matched.point_systems(spec, role, spec.models[0], paper.roles()[role])
            assert f"{spec.models[0]}/{paper.roles()[role]}" in sweep.systems, (spec.id, role, sweep.systems)
