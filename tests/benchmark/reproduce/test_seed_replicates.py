"""Seed replicates (``[protocol.seeds.CORPUS]``) in the judging: a cell whose replicates are planned
but not generated is partial and says so, and the report's rules state the seed-averaged interval and
the inert-component rule only for a paper that uses them. Constructed runs of the toy paper."""

import json
import math
from types import SimpleNamespace

from maxbench.benchmark.reproduce.evidence import RunScores
from maxbench.benchmark.reproduce.judge import COMPONENT_RULE, SEEDS_RULE, flag_cells, rules_text
from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import RULES, Estimate, relative
from maxbench.rundir import generations_sha256
from tests.support.verdicts import toy_cell, toy_claim, toy_paper

SYSTEMS = ("softmax", "fctg", "fctg-seed1", "softmax-seed1")
SEEDS = '\n[protocol.seeds."c"]\nfctg = ["fctg-seed1"]\nsoftmax = ["softmax-seed1"]\n'


def _paper(tmp_path, seeds=True):
    paper = toy_paper(tmp_path, toy_claim("main", "fctg"), SYSTEMS)
    if seeds:
        paper.path.write_text(paper.path.read_text() + SEEDS)
        paper = load_paper(str(paper.path))
    return paper


def _run(tmp_path, generated) -> RunSpec:
    """A run of m1 on c planning every role, whose scores.json holds only the systems of ``generated``."""
    run_dir = tmp_path / "runs" / "m1-c"
    run_dir.mkdir(parents=True)
    roles = {s: f"m1/{s}/top_k=40" for s in SYSTEMS}
    systems = {roles[r]: {"n_prompts": 64, "scores": {"bleu-2": {"value": 0.5}}} for r in generated}
    rows = [
        {"system": roles[r], "prompt_id": f"p{i:02d}", "sample": 0, "text": "t"} for r in generated for i in range(64)
    ]
    (run_dir / "generations.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    (run_dir / "manifest.json").write_text(json.dumps({"systems": {roles[r]: {} for r in generated}}))
    doc = {
        "generations_sha256": generations_sha256(run_dir),
        "metrics": {"bleu-n": {"scores": ["bleu-2"]}},
        "systems": systems,
    }
    (run_dir / "scores.json").write_text(json.dumps(doc))
    plan = SimpleNamespace(run_dir=run_dir, suite=SimpleNamespace(items=[{}] * 64, name="s"), systems=[], corpus="c")
    return RunSpec("m1", "c", None, plan, roles, roles["softmax"])


def _cell():
    c, h = math.log(1.08), 1.96 * 0.01
    return toy_cell("main", relative(Estimate(c, c - h, c + h, 0.01, None, 1, "constructed")), 0.1, "m1", "fctg")


def test_a_cell_whose_seed_replicates_are_not_generated_is_partial(tmp_path):
    paper = _paper(tmp_path)
    run = _run(tmp_path, ("softmax", "fctg"))
    cell = _cell()
    flag_cells(paper, [run], RunScores([run]), [cell], {})
    assert any(f.startswith("partial: m1-c: 2 of its systems cover part of the suite or none") for f in cell.flags)
    # generated in full, it is not partial; nor is a cell without a seeds table, its replicates aside
    (tmp_path / "full").mkdir()
    full = _run(tmp_path / "full", SYSTEMS)
    cell = _cell()
    flag_cells(paper, [full], RunScores([full]), [cell], {})
    assert not any(f.startswith("partial") for f in cell.flags)
    (tmp_path / "plain").mkdir()
    cell = _cell()
    flag_cells(_paper(tmp_path / "plain", seeds=False), [run], RunScores([run]), [cell], {})
    assert not any(f.startswith("partial") for f in cell.flags)


def test_the_rules_state_the_seeds_and_components_only_for_a_paper_that_uses_them(tmp_path):
    assert rules_text(_paper(tmp_path)) == RULES + SEEDS_RULE
    (tmp_path / "plain").mkdir()
    assert rules_text(_paper(tmp_path / "plain", seeds=False)) == RULES
    fctg = load_paper("fctg")
    assert rules_text(fctg) == RULES + SEEDS_RULE + COMPONENT_RULE
    assert "Welch-Satterthwaite" in SEEDS_RULE and "moved by under 0.01" in COMPONENT_RULE


def test_a_row_says_which_system_is_missing_before_how_many_seed_pairs_it_has(tmp_path):
    from maxbench.benchmark.reproduce.claims import claim_cells
    from maxbench.benchmark.reproduce.evidence import Evidence, Pairs

    paper = _paper(tmp_path)
    # seed 0 of the method missing, its replicate pair generated
    run = _run(tmp_path, ("softmax", "fctg-seed1", "softmax-seed1"))
    (row,), _ = claim_cells(paper.claims[0], paper, Evidence.of([run], Pairs()))
    assert row.note == "'fctg' is not generated in this run yet; seeds: 1 of 2 seed pairs generated in m1-c"
    # no seed pair at all: only what is missing
    (tmp_path / "none").mkdir()
    run = _run(tmp_path / "none", ("softmax", "softmax-seed1"))
    (row,), _ = claim_cells(paper.claims[0], paper, Evidence.of([run], Pairs()))
    assert row.note == "'fctg' is not generated in this run yet"
