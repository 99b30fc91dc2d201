"""The verdict rules of a reproduction (benchmark/reproduce/verdicts.py, issue 39): every verdict
on constructed intervals (the negligible band, 'smaller than claimed', an interval that contains 0
but excludes the paper's effect), Holm's step, the random-effects fold combination against
hand-worked examples, identical rows and cells counted once, the flagged untrained head, and the
bad input that is one line. No model, no corpus: constructed numbers and folders only."""

import copy
import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from maxbench.benchmark.reproduce.cells import CellVerdict, Comparison, Row
from maxbench.benchmark.reproduce.evidence import RunScores, head_training, trained_heads
from maxbench.benchmark.reproduce.judge import (
    claim_verdict,
    decide_cells,
    flag_cells,
    headline,
    mark_identical,
    mark_repeated,
)
from maxbench.benchmark.reproduce.protocol import RunSpec, check_controls, check_metrics
from maxbench.benchmark.reproduce.verdicts import (
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    SMALLER,
    Estimate,
    aggregate,
    combine_folds,
    decide,
    deciding_p,
    holm_step,
    summarise,
)
from maxbench.errors import MaxbenchError
from maxbench.multiple_testing import holm
from tests.support.verdicts import kerbs_run, toy_cell, toy_claim, toy_paper

Z = 1.959963984540054  # the normal 97.5% quantile: an interval d +- Z has se 1


# ---------------------------------------------------------------- each verdict on constructed intervals


@pytest.mark.parametrize(
    "direction, low, high, effect, verdict, why",
    [
        # paper +10%: the interval excludes 0 on its side and reaches +10%
        ("higher", 0.05, 0.20, 0.10, REPRODUCED, "reaches the paper's effect"),
        # ... excludes 0 on its side but lies below +10%
        ("higher", 0.02, 0.06, 0.10, SMALLER, "lies below the paper's effect"),
        # ... excludes 0 on the other side
        ("higher", -0.20, -0.05, 0.10, NOT_REPRODUCED, "other side"),
        # ... lies inside the negligible band of +-1% (containing 0, or not)
        ("higher", -0.005, 0.008, 0.10, NOT_REPRODUCED, "negligible band"),
        ("higher", 0.002, 0.008, 0.10, NOT_REPRODUCED, "negligible band"),
        # ... contains 0 but excludes the paper's effect: no effect of the claimed size (POSG's
        # Self-BLEU-4 on SmolLM2: -2.1% [-13.2%, +9.3%] against the paper's -27.3%)
        ("lower", -0.132, 0.093, -0.273, NOT_REPRODUCED, "no effect of the claimed size"),
        # ... contains both 0 and the paper's effect
        ("higher", -0.05, 0.30, 0.10, INCONCLUSIVE, "also contains the paper's effect"),
        # a claim on a lower score, mirrored
        ("lower", -0.30, -0.12, -0.10, REPRODUCED, "reaches"),
        ("lower", -0.08, -0.03, -0.10, SMALLER, "below"),
        ("lower", 0.03, 0.08, -0.10, NOT_REPRODUCED, "other side"),
    ],
)
def test_each_verdict_on_a_constructed_interval(direction, low, high, effect, verdict, why):
    v = decide(direction, low, high, effect)
    assert v.verdict == verdict and why in v.why


def test_a_paper_effect_inside_the_band_is_judged_on_the_sign_only():
    # KerBS's -0.92% lies inside +-1%: an interval inside the band is not 'negligible', only its sign counts
    v = decide("lower", -0.0000397, -0.0000007, -0.0092)
    assert v.verdict == REPRODUCED and "inside the negligible band" in v.why and "sign alone" in v.why
    assert decide("lower", -0.09, -0.05, -0.0092).verdict == REPRODUCED  # not 'smaller': no size is judged
    assert decide("lower", 0.02, 0.07, -0.0092).verdict == NOT_REPRODUCED
    assert decide("lower", -0.01, 0.02, -0.0092).verdict == INCONCLUSIVE


def test_a_figure_without_numbers_is_judged_on_the_sign_and_the_band():
    assert decide("higher", 0.1, 0.3).verdict == REPRODUCED
    assert "no size" in decide("higher", 0.1, 0.3).why
    assert decide("higher", -0.002, 0.004).verdict == NOT_REPRODUCED  # inside the band
    assert decide("higher", -0.2, 0.3).verdict == INCONCLUSIVE


def test_not_comparable_when_it_cannot_run_depends_on_hardware_or_has_no_interval():
    v = decide("higher", 0.5, 1.5, runnable=False, reason="mBART is not available offline")
    assert v.verdict == NOT_COMPARABLE and v.why == "mBART is not available offline"
    assert decide("higher", 0.5, 2.7, 13.29, hardware=True).verdict == NOT_COMPARABLE
    assert decide("higher", None, None, 0.1).verdict == NOT_COMPARABLE
    assert decide("higher", 0.1, math.inf, 0.1).verdict == NOT_COMPARABLE


def test_holm_holding_back_an_interval_judges_it_as_containing_0():
    v = decide("higher", 0.02, 0.20, 0.10, significant=False)
    assert v.verdict == INCONCLUSIVE and "not after Holm's step" in v.why
    v = decide("higher", 0.01, 0.05, 0.10, significant=False)  # below the effect: no effect of that size
    assert v.verdict == NOT_REPRODUCED and "claimed size" in v.why
    # the other side held back: it still excludes the paper's +10%; with no size to hold, nothing is decided
    assert decide("higher", -0.2, -0.05, 0.10, significant=False).verdict == NOT_REPRODUCED
    assert decide("higher", -0.2, -0.05, None, significant=False).verdict == INCONCLUSIVE
    # the negligible band needs no test against 0: Holm does not change it
    assert decide("higher", 0.002, 0.008, 0.10, significant=False).verdict == NOT_REPRODUCED


def test_a_correlation_is_judged_on_r_with_its_band():
    assert decide("higher", 0.30, 0.996, 0.987, band=0.1, scale="r").verdict == REPRODUCED
    assert decide("higher", 0.30, 0.90, 0.987, band=0.1, scale="r").verdict == SMALLER
    assert decide("higher", -0.05, 0.08, 0.987, band=0.1, scale="r").verdict == NOT_REPRODUCED


def test_a_best_among_cell_needs_every_competitor():
    ok, small = decide("higher", 0.1, 0.3), decide("higher", 0.02, 0.06, 0.1)
    bad, unsure = decide("higher", -0.3, -0.1), decide("higher", -0.1, 0.3)
    assert aggregate([("a", ok), ("b", ok)]).verdict == REPRODUCED
    assert aggregate([("a", ok), ("b", bad)]).verdict == NOT_REPRODUCED
    assert "vs b" in aggregate([("a", ok), ("b", bad)]).why
    assert aggregate([("a", ok), ("b", unsure)]).verdict == INCONCLUSIVE
    assert aggregate([("a", ok), ("b", small)]).verdict == SMALLER
    # the p-value a cell enters Holm's step with: the largest, or the smallest on the other side
    assert deciding_p([(ok, 0.01), (ok, 0.03)]) == 0.03
    assert deciding_p([(ok, 0.01), (bad, 0.002), (bad, 0.004)]) == 0.002


# ---------------------------------------------------------------- Holm's step


def test_holm_step_hand_worked():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 -> max(0.06, 0.04)
    adjusted, rejects = holm_step([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rejects == [True, False, False, True]
    assert holm([0.01, None, 0.04]) == pytest.approx([0.02, None, 0.04])  # a missing test is not counted
    assert holm_step([]) == ([], [])


def _cell(claim, low, high, se, paper=0.1, model="m1", counted=True):
    return toy_cell(claim, Estimate((low + high) / 2, low, high, se, None, 1), paper, model, counted=counted)


def test_holm_over_a_papers_cells_holds_back_the_weak_ones(tmp_path):
    paper = toy_paper(tmp_path, toy_claim("a") + toy_claim("b"))
    strong = _cell("a", 0.16, 0.24, 0.02)  # +20%, se 2%: p ~ 1e-23
    weak = _cell("b", 0.001, 0.079, 0.0199)  # +4%, se 2%: p = 0.044 alone
    weak2 = _cell("b", 0.002, 0.080, 0.0199, model="m2")  # p = 0.039 alone
    raw = [c.details[0].est.p_value for c in (strong, weak, weak2)]
    assert raw[1] == pytest.approx(0.0444, abs=1e-3) and raw[2] == pytest.approx(0.0394, abs=1e-3)
    decide_cells(paper, [strong, weak, weak2])
    # Holm over the three counted cells: 3 x p1, then max(., 2 x 0.0394) = 0.0788 for both weak ones
    assert [strong.p_holm, weak.p_holm, weak2.p_holm] == pytest.approx(holm(raw))
    assert weak.p_holm == pytest.approx(2 * raw[2])
    assert strong.verdict == REPRODUCED
    # alone each weak cell would be 'reproduced, smaller than claimed'; after Holm's step it counts as
    # containing 0 and, lying below the paper's +10%, shows no effect of the claimed size
    assert decide("higher", weak.est.low, weak.est.high, 0.1).verdict == SMALLER
    for c in (weak, weak2):
        assert c.verdict == NOT_REPRODUCED and "not after Holm's step" in c.why and "claimed size" in c.why


# ---------------------------------------------------------------- combining folds


def test_one_fold_keeps_its_own_interval():
    c = combine_folds([(0.5, 0.1, 0.9)])
    assert (c.estimate, c.low, c.high, c.df) == (0.5, 0.1, 0.9, None)
    assert c.se == pytest.approx(0.8 / (2 * Z))
    assert combine_folds([(0.5, 0.1, 0.9), (None, None, None)]).estimate is None


def test_folds_combine_by_random_effects_hand_worked():
    # y = 1, 2, 3 with se 1 each: Q = 2 = K - 1, so tau^2 = 0; mu = 2; the HKSJ variance
    # sum (y - mu)^2 / ((K - 1) sum w) = 2 / (2 x 3) = 1/3 (= the fixed-effect 1/3); t_2 = 4.302653
    c = combine_folds([(y, y - Z, y + Z) for y in (1.0, 2.0, 3.0)])
    assert c.estimate == pytest.approx(2.0) and c.df == 2
    assert c.se == pytest.approx(math.sqrt(1 / 3))
    assert (c.low, c.high) == pytest.approx(
        (2 - 4.302653 * math.sqrt(1 / 3), 2 + 4.302653 * math.sqrt(1 / 3)), rel=1e-6
    )
    # y = 0, 4, 4 with se 1: y_w = 8/3, Q = 64/9 + 2 x 16/9 = 96/9, C = 3 - 3/3 = 2, tau^2 = (96/9 - 2) / 2
    # = 39/9; w* = 9/48 each, mu = 8/3; HKSJ: (9/48)(96/9) / (2 x 27/48) = 16/9 > floor 48/27 = 16/9
    c = combine_folds([(0.0, -Z, Z), (4.0, 4 - Z, 4 + Z), (4.0, 4 - Z, 4 + Z)])
    assert c.estimate == pytest.approx(8 / 3) and c.se == pytest.approx(4 / 3)
    assert c.high - c.estimate == pytest.approx(4.302653 * 4 / 3, rel=1e-6)
    assert "tau^2 = 4.33" in c.method and "Hartung-Knapp" in c.method


def test_two_folds_never_go_through_hksj_but_fixed_effects():
    # y = 0, 4 with se 1: under random effects tau^2 = 7 and t_1 = 12.7 would give 2 +- 25.4; two
    # folds cannot estimate tau^2: the fixed-effect mean 2 with se sqrt(1/2) and a normal interval
    c = combine_folds([(0.0, -Z, Z), (4.0, 4 - Z, 4 + Z)])
    assert c.estimate == pytest.approx(2.0) and c.se == pytest.approx(math.sqrt(0.5))
    assert (c.low, c.high) == pytest.approx((2 - Z * math.sqrt(0.5), 2 + Z * math.sqrt(0.5)))
    assert c.df is None and "fixed effect" in c.method and "Hartung" not in c.method
    # y = 1, 3 with se 1 and 2: w = 1, 1/4; y_w = 1.4; se = 1 / sqrt(1.25)
    c = combine_folds([(1.0, 1 - Z, 1 + Z), (3.0, 3 - 2 * Z, 3 + 2 * Z)])
    assert c.estimate == pytest.approx(1.4) and c.se == pytest.approx(math.sqrt(0.8)) and c.df is None


def test_correlated_scores_summarise_to_the_mean_with_the_mean_se():
    a = Estimate(0.10, 0.10 - 0.02 * Z, 0.10 + 0.02 * Z, 0.02, None, 1)
    b = Estimate(0.30, 0.30 - 0.04 * Z, 0.30 + 0.04 * Z, 0.04, None, 1)
    s = summarise([a, b])
    assert s.estimate == pytest.approx(0.2) and s.se == pytest.approx(0.03)
    assert (s.low, s.high) == pytest.approx((0.2 - 0.03 * Z, 0.2 + 0.03 * Z))
    assert summarise([a]) is a
    assert summarise([a, Estimate(None, None, None)]).estimate is None


# ---------------------------------------------------------------- identical rows and cells counted once


def _row(claim, score, variant, numbers, peer=""):
    d, lo, hi = numbers
    return Row(
        claim=claim,
        model="m1",
        corpus="c",
        method="graphmax",
        baseline="softmax",
        score=score,
        variant=variant,
        kind="difference",
        paper_baseline=0.5,
        paper_method=0.55,
        paper_relative=0.1,
        method_mean=0.3,
        baseline_mean=0.4,
        diff=Estimate(d, lo, hi, None, None, 5),
        rel=Estimate(d / 0.4, lo / 0.4, hi / 0.4, 0.01, None, 5),
        n_prompts=80,
        peer=peer,
    )


def test_identical_rows_are_shown_once():
    rows = [
        _row("table2", "texygen-bleu-4", "paper", (-0.1, -0.12, -0.08)),
        # maxbench's BLEU-4 beside the paper's, with the same numbers: not shown again
        _row("table2", "bleu-4", "maxbench", (-0.1, -0.12, -0.08), peer="texygen-bleu-4"),
        # the same numbers as another score's are a coincidence, not a twin: shown
        _row("table2", "bleu-2", "maxbench", (-0.1, -0.12, -0.08), peer="texygen-bleu-2"),
        _row("figure5", "texygen-bleu-4", "paper", (-0.1, -0.12, -0.08)),  # an earlier claim's row
    ]
    mark_identical(rows)
    assert rows[1].identical_to == "texygen-bleu-4" and not rows[2].identical_to
    assert rows[3].same_as == "table2" and not rows[0].same_as


def test_a_cell_repeating_another_cells_evidence_is_counted_once(tmp_path):
    paper = toy_paper(tmp_path, toy_claim("a") + toy_claim("b"))
    cells = [_cell("a", 0.16, 0.24, 0.02), _cell("b", 0.16, 0.24, 0.02), _cell("a", 0.16, 0.24, 0.02, model="m2")]
    mark_repeated(paper, [], RunScores([]), cells)
    decide_cells(paper, cells)
    assert [c.counted for c in cells] == [True, False, True]
    assert cells[1].same_as == "a" and "counted once" in "; ".join(cells[1].flags)
    # outside Holm's family (two cells, not three), and decided as the cell it repeats
    assert cells[0].p_holm == pytest.approx(2 * cells[0].p_value)
    assert cells[1].p_holm == cells[0].p_holm and cells[1].verdict == cells[0].verdict
    assert claim_verdict([cells[1]]) == (REPRODUCED, "1 cell; it repeats the evidence of a, counted there")
    h = headline(paper, cells)
    assert h["cells"] == 2 and h["repeated_cells"] == 1 and h["cells_by_verdict"] == {REPRODUCED: 2}
    assert h["claims"] == 2  # claims are counted as claims, whatever their cells


def _texts_run(root, texts: dict[str, list[str]]) -> RunSpec:
    """A run of the toy paper (m1 on c) whose generations.jsonl holds ``texts`` (role -> its texts, one
    per prompt); each role's system is named for its layer."""
    run_dir = root / "runs" / "m1-c"
    run_dir.mkdir(parents=True)
    roles = {role: f"m1/{role}/top_k=40" for role in texts}
    rows = [
        {"system": roles[role], "prompt_id": f"p{i}", "sample": 0, "text": text, "reference": "r"}
        for role, those in texts.items()
        for i, text in enumerate(those)
    ]
    (run_dir / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = SimpleNamespace(run_dir=run_dir, suite=SimpleNamespace(items=[{}] * 2, name="s"), systems=[], corpus="c")
    return RunSpec("m1", "c", None, plan, roles, roles["softmax"])


@pytest.mark.parametrize("same_texts", [True, False])
def test_a_cell_against_a_baseline_with_the_same_texts_as_an_earlier_cells_is_the_same_evidence(tmp_path, same_texts):
    """Two claims against differently named baselines rest on the same evidence when the baselines
    generated the same texts (FCTG's mu variants whose gate stayed shut are the zero-shot model, its
    'without MVA' row): the later cell is counted once and says whose texts they are. Other texts, or
    the same texts with other numbers, are other evidence."""
    other = ["a cat", "a dog"] if same_texts else ["a cat", "a bird"]
    run = _texts_run(tmp_path, {"softmax": ["a cat", "a dog"], "sparsemax": other, "graphmax": ["x", "y"]})
    paper = toy_paper(tmp_path, toy_claim("a") + toy_claim("b") + toy_claim("c"))
    cells = [_cell("a", 0.16, 0.24, 0.02), _cell("b", 0.16, 0.24, 0.02), _cell("c", 0.10, 0.24, 0.02)]
    cells[1].baselines = cells[1].details[0].baseline = "sparsemax"
    cells[2].baselines = cells[2].details[0].baseline = "sparsemax"  # the same texts, other numbers
    mark_repeated(paper, [run], RunScores([run]), cells)
    decide_cells(paper, cells)
    assert cells[1].counted is not same_texts and cells[2].counted
    if same_texts:
        assert cells[1].same_as == "a"
        assert "the same evidence as a (sparsemax's texts are softmax's, text for text): counted once" in cells[1].flags
    else:
        assert not cells[1].same_as and not any("same evidence" in f for f in cells[1].flags)


def test_a_repeat_is_found_across_method_names_and_names_each_new_role_s_twin(tmp_path):
    """The repeat of a cell whose method has another name but the same texts is decided as that cell;
    a later cell with one more baseline of the same texts names which earlier role's texts it has."""
    run = _texts_run(tmp_path, {"softmax": ["a", "b"], "sparsemax": ["a", "b"], "graphmax": ["x", "y"]})
    paper = toy_paper(tmp_path, toy_claim("a") + toy_claim("b") + toy_claim("c"))
    first = _cell("a", 0.16, 0.24, 0.02)
    other_method = toy_cell("b", first.est, 0.1, "m1", method="graphmax")
    more = _cell("c", 0.16, 0.24, 0.02)
    more.baselines = "softmax, sparsemax"
    more.details = [replace(more.details[0]), replace(more.details[0], baseline="sparsemax")]
    mark_repeated(paper, [run], RunScores([run]), [first, more])
    assert more.twin is first
    assert "the same evidence as a (sparsemax's texts are softmax's, text for text): counted once" in more.flags
    run.roles["renamed"] = run.roles["graphmax"]  # the method under another name: the same texts
    other_method.method = "renamed"
    cells = [_cell("a", 0.16, 0.24, 0.02), other_method]
    mark_repeated(paper, [run], RunScores([run]), cells)
    decide_cells(paper, cells)
    assert cells[1].twin is cells[0] and cells[1].p_holm == cells[0].p_holm == pytest.approx(cells[0].p_value)


def test_a_repeat_whose_twin_is_not_judged_counts_itself(tmp_path):
    """Marked as repeating a cell that then stays out of Holm's family, a cell is counted after all:
    its evidence is counted once, never zero times."""
    paper = toy_paper(tmp_path, toy_claim("a") + toy_claim("b"))
    cells = [_cell("a", 0.16, 0.24, 0.02, counted=False), _cell("b", 0.16, 0.24, 0.02)]
    cells[1].same_as, cells[1].twin, cells[1].counted = "a", cells[0], False
    cells[1].flags.append("the same evidence as a: counted once")
    decide_cells(paper, cells)
    assert cells[1].counted and not cells[1].same_as and cells[1].twin is None and not cells[1].flags
    assert cells[1].p_holm == pytest.approx(cells[1].p_value)  # a family of one


def test_a_claim_with_cells_that_differ_is_mixed():
    a = _cell("a", 0.16, 0.24, 0.02)
    b = _cell("a", -0.2, -0.1, 0.02, model="m2")
    a.verdict, b.verdict = REPRODUCED, NOT_REPRODUCED
    assert claim_verdict([a, b]) == ("mixed", "reproduced 1, not reproduced 1")
    assert claim_verdict([a]) == (REPRODUCED, "1 cell")


def test_few_prompts_are_labelled(tmp_path):
    paper = toy_paper(tmp_path, toy_claim("a"))
    cell = _cell("a", 0.16, 0.24, 0.02)
    cell.n_prompts = 16
    decide_cells(paper, [cell])
    flag_cells(paper, [], RunScores([]), [cell], {})
    assert "few prompts (16)" in cell.flags


# ---------------------------------------------------------------- the untrained head


def _kerbs_run(root, resources):
    return kerbs_run(root, resources, role="graphmax")  # the toy paper's method here


def test_a_head_whose_best_epoch_is_0_is_flagged_and_never_reproduced(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MAXBENCH_HOME", str(home))
    head = home / "heads" / "kerbs" / "k1"
    head.mkdir(parents=True)
    history = [
        {"epoch": 0, "valid_ppl": 30.0},  # the untrained head is the best: training made it worse
        {"epoch": 1, "valid_ppl": 30.4},
        {"epoch": 2, "valid_ppl": 30.9},
    ]
    (head / "meta.json").write_text(json.dumps({"sha256": "abc", "training": {"history": history}}))
    run, system = _kerbs_run(tmp_path, {"kerbs_head": "abc"})
    rec = head_training(run, system)
    assert rec["best_epoch"] == 0 and rec["untrained"] and rec["history"] == history
    paper = toy_paper(tmp_path, toy_claim("a"))
    cell = _cell("a", 0.16, 0.24, 0.02)  # its interval alone says 'reproduced'
    decide_cells(paper, [cell])
    assert cell.verdict == REPRODUCED
    heads = trained_heads([run])
    flag_cells(paper, [run], RunScores([run]), [cell], heads)
    assert cell.verdict == INCONCLUSIVE and "never counted as reproduced" in cell.why
    assert any(f.startswith("untrained head") and "best validation epoch 0" in f for f in cell.flags)
    assert not any("exactly the base softmax" in f for f in cell.flags)


def test_the_manifests_untrained_mark_flags_too_and_a_trained_head_is_not_flagged(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    run, system = _kerbs_run(tmp_path, {"kerbs_head": "def", "untrained_best": True})
    assert head_training(run, system)["untrained"]
    other = tmp_path / "other"
    other.mkdir()
    run2, system2 = _kerbs_run(other, {"kerbs_head": "ghi"})
    head = tmp_path / "home" / "heads" / "kerbs" / "k2"
    head.mkdir(parents=True)
    hist = [{"epoch": 0, "valid_ppl": 30.0}, {"epoch": 1, "valid_ppl": 29.0}]
    (head / "meta.json").write_text(json.dumps({"sha256": "ghi", "training": {"history": hist}}))
    assert head_training(run2, system2)["best_epoch"] == 1
    paper = toy_paper(tmp_path, toy_claim("a"))
    cell = _cell("a", 0.16, 0.24, 0.02)
    decide_cells(paper, [cell])
    flag_cells(paper, [run2], RunScores([run2]), [cell], trained_heads([run2]))
    assert cell.verdict == REPRODUCED and not any("untrained" in f for f in cell.flags)


# ---------------------------------------------------------------- bad input: one line


@pytest.mark.parametrize(
    "change, message",
    [
        (('direction = "higher"', 'direction = "upward"'), "unknown direction 'upward'"),
        (('scores = ["bleu-2"]', 'scores = ["bleu-2"]\nmodels = ["gpt2"]'), "unknown base model 'gpt2'"),
        (('scores = ["bleu-2"]', 'scores = ["bleu-2"]\nkind = "difference2"'), "unknown claim kind"),
    ],
)
def test_a_claim_with_an_unknown_direction_kind_or_base_model_is_one_line(tmp_path, change, message):
    with pytest.raises(MaxbenchError, match=message) as err:
        toy_paper(tmp_path, toy_claim("a").replace(*change))
    assert "\n" not in str(err.value)


def test_a_claim_with_an_unknown_metric_or_a_missing_control_run_is_one_line(tmp_path):
    paper = toy_paper(tmp_path, toy_claim("a").replace('["bleu-2"]', '["blue-2"]'))
    with pytest.raises(MaxbenchError, match="unknown score 'blue-2': did you mean 'bleu-2'") as err:
        check_metrics(paper)
    assert "\n" not in str(err.value)
    paper = toy_paper(tmp_path, toy_claim("a") + 'controls = ["m1-c-ft-softmax"]\n')
    (tmp_path / "out" / "runs").mkdir(parents=True)
    with pytest.raises(MaxbenchError, match="control run 'm1-c-ft-softmax' is missing") as err:
        check_controls(paper, tmp_path / "out")
    assert "\n" not in str(err.value)
    (tmp_path / "out" / "runs" / "m1-c-ft-softmax").mkdir()
    (tmp_path / "out" / "runs" / "m1-c-ft-softmax" / "generations.jsonl").write_text("")
    check_controls(paper, tmp_path / "out")


def test_bad_paper_files_exit_2_with_one_line(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    toy_paper(tmp_path, toy_claim("a"))
    bad.write_text((tmp_path / "toy.toml").read_text().replace('direction = "higher"', 'direction = "up"'))
    rc, _, err = cli("reproduce", str(bad), "--estimate")
    assert rc == 2 and "unknown direction 'up'" in err and err.count("\n") == 1


def test_a_ratio_of_step_costs_has_a_t_interval_on_the_log_scale():
    """The training-time claim: the ratio of mean CPU seconds per step, its delta-method interval on the
    log scale; equal samples give ratio 1 and an interval around it; one step gives no interval."""
    import math

    from maxbench.benchmark.reproduce.verdicts import step_ratio_interval

    a = [2.0, 2.2, 1.8, 2.1, 1.9]
    b = [1.0, 1.1, 0.9, 1.05, 0.95]
    est = step_ratio_interval(a, b)
    assert est.estimate == pytest.approx(2.0)
    # by hand: var of log(mean) = s^2 / (n mean^2) for each side
    va = (0.0 + 0.04 + 0.04 + 0.01 + 0.01) / 4 / (5 * 4.0)
    vb = (0.0 + 0.01 + 0.01 + 0.0025 + 0.0025) / 4 / (5 * 1.0)
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 4)
    from scipy.stats import t

    h = t.ppf(0.975, df) * math.sqrt(va + vb)
    assert est.low == pytest.approx(2.0 * math.exp(-h)) and est.high == pytest.approx(2.0 * math.exp(h))
    assert est.df == pytest.approx(df)
    same = step_ratio_interval(a, a)
    assert same.estimate == pytest.approx(1.0) and same.low < 1.0 < same.high
    assert step_ratio_interval([2.0], b).low is None and step_ratio_interval([], b).estimate is None


# ---------------------------------------------------------------- claim kinds: one module each


def test_every_claim_kind_is_one_module_of_claims_and_the_kinds_a_paper_file_may_name():
    import pkgutil

    from maxbench.benchmark.reproduce import claims
    from maxbench.benchmark.reproduce.kinds import kind_of, kinds

    modules = sorted(m.name for m in pkgutil.iter_modules(claims.__path__))
    assert modules == sorted(kinds())
    for name in kinds():
        kind = kind_of(name)
        assert isinstance(kind, claims.ClaimKind) and type(kind).__module__ == f"{claims.__name__}.{name}"
        assert kind.name == name


def test_a_new_claim_kind_is_one_registered_class_that_a_paper_file_can_name(tmp_path, monkeypatch):
    """Registering a ClaimKind is all a new kind needs: the paper file may name it, its check refuses
    a malformed claim in one line, its cells are the claim's, and the judge decides them on its scale."""
    from maxbench.benchmark.reproduce import kinds
    from maxbench.benchmark.reproduce.claims import ClaimKind, claim_cells
    from maxbench.benchmark.reproduce.evidence import Evidence, Pairs

    monkeypatch.setattr(kinds, "CLAIM_KINDS", copy.deepcopy(kinds.CLAIM_KINDS))
    monkeypatch.setattr(kinds, "_INSTANCES", {})

    @kinds.CLAIM_KINDS.register("share")
    class Share(ClaimKind):
        name = "share"
        scale = "r"  # judged on the number itself

        def check(self, claim):
            return "a share claim needs one score" if len(claim.scores) != 1 else ""

        def cells(self, claim, paper, evidence):
            est = Estimate(0.5, 0.4, 0.6, 0.05, None, 1)
            cell = CellVerdict(claim=claim.id, model="m1", corpus="c", kind=self.name, est=est, n_prompts=64)
            cell.details = [Comparison(baseline="", est=est, paper=claim.paper_relative(0))]
            return [], [cell]

    text = toy_claim("a").replace('direction = "higher"', 'direction = "higher"\nkind = "share"')
    paper = toy_paper(tmp_path, text)
    assert paper.claims[0].kind == "share" and paper.claims[0].paper_relative(0) == pytest.approx(0.1)
    rows, cells = claim_cells(paper.claims[0], paper, Evidence.of([], Pairs()))
    decide_cells(paper, cells)
    assert rows == [] and cells[0].verdict == REPRODUCED and "+0.1" in cells[0].why  # the paper's effect on r
    with pytest.raises(MaxbenchError, match="a share claim needs one score") as err:
        toy_paper(tmp_path, text.replace('["bleu-2"]', '["bleu-2", "bleu-3"]'))
    assert "\n" not in str(err.value)
