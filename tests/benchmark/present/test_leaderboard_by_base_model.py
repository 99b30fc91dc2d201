"""A leaderboard over several base models has the papers' table shape: rows grouped by base model,
each model's softmax first, the best value marked within each base model."""

from __future__ import annotations

import csv
import json

from maxbench.benchmark.present.leaderboard import render

SMOL, GEMMA = "smollm2-135m", "gemma3-270m"
# interleaved, softmax not first: the order a hand-written lineup may have
SYSTEMS = {
    f"{SMOL}/sparsemax/top_p=0.9": 0.30,
    f"{GEMMA}/graphmax(lam=1.0,solver=exact)/top_p=0.9": 0.20,
    f"{SMOL}/softmax/top_p=0.9": 0.10,
    f"{GEMMA}/softmax/top_p=0.9": 0.15,
    f"{SMOL}/kerbs/top_p=0.9": 0.25,
}


def _run(tmp_path, systems: dict[str, float]):
    run = tmp_path / "run"
    run.mkdir()
    ident = {"suite": {"name": "toy", "version": "1", "sha256": "a" * 64, "n_items": 4}, "seed": 1, "samples": 1}
    (run / "manifest.json").write_text(json.dumps({"run_id": "run", "identity": ident | {"registry": "t"}}))
    entries = {
        s: {"n_prompts": 4, "scores": {"bleu-4": {"value": v, "ci_low": v - 0.01, "ci_high": v + 0.01}}}
        for s, v in systems.items()
    }
    (run / "scores.json").write_text(json.dumps({"systems": entries, "comparisons": {"baseline": None}}))
    return run


def _md_rows(out):
    lines = (out / "leaderboard.md").read_text().splitlines()
    table = [line for line in lines if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table]


def test_rows_of_several_base_models_are_grouped_softmax_first_with_best_per_model(tmp_path):
    render([_run(tmp_path, SYSTEMS)], tmp_path / "lb")
    rows = _md_rows(tmp_path / "lb")
    assert rows[0] == ["base model", "system", "bleu-4"]
    assert [r[:2] for r in rows[1:]] == [
        [f"`{SMOL}`", f"`{SMOL}/softmax/top_p=0.9`"],
        ["", f"`{SMOL}/sparsemax/top_p=0.9`"],
        ["", f"`{SMOL}/kerbs/top_p=0.9`"],
        [f"`{GEMMA}`", f"`{GEMMA}/softmax/top_p=0.9`"],
        ["", f"`{GEMMA}/graphmax(lam=1.0,solver=exact)/top_p=0.9`"],
    ]
    # Gemma's graphmax (20.00) is below SmolLM2's sparsemax (30.00) but the best of its own model
    bold = [r[1] for r in rows[1:] if r[2].startswith("**")]
    assert bold == [f"`{SMOL}/sparsemax/top_p=0.9`", f"`{GEMMA}/graphmax(lam=1.0,solver=exact)/top_p=0.9`"]
    assert "bold = best in column among the rows of the same base model" in (tmp_path / "lb/leaderboard.md").read_text()
    with open(tmp_path / "lb" / "leaderboard.csv") as f:
        table = list(csv.reader(f))
    assert table[0][:2] == ["base_model", "system"]
    assert [r[0] for r in table[1:]] == [SMOL, SMOL, SMOL, GEMMA, GEMMA]
    html = (tmp_path / "lb" / "leaderboard.html").read_text()
    assert html.index(f"{SMOL}/kerbs/top_p=0.9") < html.index(f"{GEMMA}/softmax/top_p=0.9")


def test_a_one_model_leaderboard_keeps_its_order_and_has_no_base_model_column(tmp_path):
    one = {s: v for s, v in SYSTEMS.items() if s.startswith(SMOL)}
    render([_run(tmp_path, one)], tmp_path / "lb")
    rows = _md_rows(tmp_path / "lb")
    assert rows[0] == ["system", "bleu-4"]
    assert [r[0].strip("`") for r in rows[1:]] == list(one)  # the run's order, softmax not moved
    assert "bold = best in column: " in (tmp_path / "lb/leaderboard.md").read_text()


def test_the_human_row_of_a_several_model_leaderboard_has_a_blank_model_cell_not_an_empty_code_span(tmp_path):
    run = _run(tmp_path, SYSTEMS)
    doc = json.loads((run / "scores.json").read_text())
    doc["human"] = {
        "label": "human (references)",
        "signature": "human|texts:references",
        "n_prompts": 4,
        "scores": {"bleu-4": {"value": None, "reason": "compares texts with the references"}},
    }
    (run / "scores.json").write_text(json.dumps(doc))
    render([run], tmp_path / "lb")
    rows = _md_rows(tmp_path / "lb")
    assert rows[1][:2] == ["", "human (references)"]
    assert "``" not in (tmp_path / "lb" / "leaderboard.md").read_text()
    assert rows[2][:2] == [f"`{SMOL}`", f"`{SMOL}/softmax/top_p=0.9`"]
