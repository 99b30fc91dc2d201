"""The verdict rules of issue 51: relative effects on the log-ratio scale (an interval never leaves
(-100%, +inf)), two folds never through a random-effects model, error control both ways (the
intervals behind 'not reproduced' and 'smaller than claimed' widened with Holm's family), 'larger
than claimed' for a cost, the trained-head rule that reads the recorded history, a control that is
missing, and a claim without a baseline. Constructed numbers and folders, and the committed reports."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm

from maxbench.benchmark.reproduce.evidence import RunScores, head_training, log_ratio, trained_heads
from maxbench.benchmark.reproduce.judge import decide_cells, flag_cells, headline, missing_baselines
from maxbench.benchmark.reproduce.verdicts import (
    ALPHA,
    INCONCLUSIVE,
    LARGER,
    NOT_REPRODUCED,
    REPRODUCED,
    RULES,
    SMALLER,
    Estimate,
    combine_folds,
    decide,
    family_level,
    log_ratio_bootstrap,
    log_ratio_delta,
    mcnemar_p,
    relative,
    summarise,
)
from maxbench.errors import MaxbenchError
from tests.support.paths import ROOT
from tests.support.verdicts import kerbs_run, toy_cell, toy_claim, toy_paper

Z = 1.959963984540054
REPORTS = ROOT / "results" / "reproductions"

#: the toy paper's systems here: a trained head and a fine-tuned baseline (the trained-head rule)
SYSTEMS = ("softmax", "kerbs", "ft-softmax")


def _paper(tmp_path, claims: str):
    return toy_paper(tmp_path, claims, SYSTEMS)


def _claim(claim_id: str) -> str:
    return toy_claim(claim_id, "kerbs")


def _cell(claim, est: Estimate, paper=0.1, model="m1"):
    return toy_cell(claim, est, paper, model, method="kerbs")


def _log_cell(claim, centre, se, paper=0.1, model="m1"):
    """A cell whose relative effect is exp(centre) - 1, se on the log scale."""
    c, h = centre, Z * se
    est = relative(Estimate(c, c - h, c + h, se, None, 1, "constructed"))
    return _cell(claim, est, paper, model)


# ---------------------------------------------------------------- the log-ratio scale


def test_a_repetition_rate_falling_from_21_to_7_of_192_has_a_ratio_interval_inside_minus_100_percent():
    # the POSG Rep cell: a difference interval divided by the baseline gave [-114%, -23.8%]
    rng = np.random.default_rng(3)
    base = np.zeros(192)
    base[rng.choice(192, 21, replace=False)] = 1
    method = np.zeros(192)
    method[rng.choice(192, 7, replace=False)] = 1
    got = log_ratio_bootstrap(list(method), list(base), 1000)
    assert got is not None
    rel = relative(Estimate(got[0], got[1], got[2], (got[2] - got[1]) / (2 * Z), None, 1, "", False))
    assert rel.estimate == pytest.approx(7 / 21 - 1)
    assert -1 < rel.low < rel.estimate < rel.high < 0
    # the old rule's interval on the same data: d +- z se_d over the fixed baseline 21/192 leaves the scale
    d = method - base
    se_d = d.std(ddof=1) / math.sqrt(192)
    assert (d.mean() - Z * se_d) / base.mean() < rel.low


@pytest.mark.parametrize("centre, se", [(-3.0, 2.0), (0.0, 5.0), (2.0, 0.1), (-0.01, 0.001)])
def test_a_ratio_interval_never_leaves_minus_100_percent_to_infinity(centre, se):
    # however wide on the log scale, after folds, summaries and the family's widening
    folds = [(centre, centre - Z * se, centre + Z * se)] * 4
    for k in (1, 2, 4):
        rel = relative(combine_folds(folds[:k]))
        lo, hi = rel.widened(family_level(40))
        assert -1 < lo <= rel.low < rel.estimate < rel.high <= hi < math.inf
    both = summarise([relative(combine_folds(folds[:2])), relative(combine_folds(folds[:3]))])
    assert both.log and -1 < both.low < both.high


def test_the_delta_method_log_ratio_uses_the_paired_covariance():
    # a = 10 +- 1, b = 10 +- 1 (se 1 each), their difference se 0.2: strongly paired, var log(a/b)
    # = 0.01 + 0.01 - 2 x (1 + 1 - 0.04) / 2 / 100 = 0.0004: se 0.02, not the unpaired sqrt(0.02)
    got = log_ratio_delta((11.0, 11 - Z, 11 + Z), (10.0, 10 - Z, 10 + Z), (1.0, 1 - 0.2 * Z, 1 + 0.2 * Z))
    centre, lo, hi = got
    assert centre == pytest.approx(math.log(1.1))
    se = (hi - lo) / (2 * Z)
    expected = 1 / 121 + 1 / 100 - (1 + 1 - 0.04) / 110
    assert se == pytest.approx(math.sqrt(expected))
    assert log_ratio_delta((0.0, 0.0, 0.1), (1.0, 0.9, 1.1), (-1.0, -1.1, -0.9)) is None  # no ratio scale at 0


def test_a_runs_relative_effect_comes_from_its_per_prompt_values(tmp_path):
    per_a = {f"p{i}": float(i % 3 == 0) for i in range(60)}
    per_b = {f"p{i}": float(i % 2 == 0) for i in range(60)}

    def entry(per):
        v = sum(per.values()) / len(per)
        return {"value": v, "ci_low": v - 0.1, "ci_high": v + 0.1, "per_prompt": per}

    doc = {"systems": {"A": {"scores": {"rep": entry(per_a)}}, "B": {"scores": {"rep": entry(per_b)}}}}
    run = SimpleNamespace(roles={"m": "A", "b": "B"})
    got, how = log_ratio(run, doc, "m", "b", "rep", (-0.16, -0.3, -0.02))
    assert "ratio of means" in how and got[0] == pytest.approx(math.log((20 / 60) / (30 / 60)))
    # a corpus-level score (its value is not the mean of its per-prompt values): the delta method
    doc["systems"]["A"]["scores"]["rep"]["value"] = 0.5
    got, how = log_ratio(run, doc, "m", "b", "rep", (0.0, -0.1, 0.1))
    assert how == "" and got[0] == pytest.approx(0.0)


def test_every_committed_relative_interval_lies_inside_minus_100_percent():
    for path in sorted(REPORTS.glob("*/report.json")):
        doc = json.loads(path.read_text())
        for c in doc["cells"]:
            for x in [c, *c["comparisons"]]:
                if c["kind"] == "difference" and x["rel_low"] is not None:
                    assert x["rel_low"] > -1, (path.parent.name, c["claim"], c["model"], c["corpus"])


# ---------------------------------------------------------------- folds


def test_two_folds_never_go_through_hksj():
    # the graphmax Gemma BLEU-4 folds: -55% [-77, -34] and -69% [-91, -48]; with HKSJ, t_1 = 12.7
    # gave about [-170%, +40%]; fixed effects give an interval inside the scale that excludes 0
    folds = [
        (math.log1p(x), math.log1p(lo), math.log1p(hi)) for x, lo, hi in ((-0.55, -0.77, -0.34), (-0.69, -0.91, -0.48))
    ]
    c = combine_folds(folds)
    assert c.df is None and "fixed effect" in c.method and "Hartung" not in c.method
    rel = relative(c)
    assert -1 < rel.low < rel.high < 0
    three = combine_folds([*folds, folds[0]])
    assert three.df == 2 and "Hartung-Knapp-Sidik-Jonkman" in three.method
    assert "fewer than 3 folds" in RULES and "fixed-effect" in RULES


# ---------------------------------------------------------------- error control both ways


def test_the_family_widens_the_intervals_behind_smaller_than_claimed(tmp_path):
    claims = "".join(_claim(x) for x in "abcdefghij")
    paper = _paper(tmp_path, claims)
    # +6% [+2.2%, +9.8%] on the log scale: alone 'smaller than claimed' against the paper's +10%
    cells = [_log_cell(x, math.log(1.06), 0.018, paper=0.1) for x in "abcdefghij"]
    alone = decide("higher", cells[0].est.low, cells[0].est.high, 0.1)
    assert alone.verdict == SMALLER
    decide_cells(paper, cells)
    # ten comparisons: each interval at 1 - 0.05 / 10 = 99.5% reaches +10%: no longer 'smaller'
    assert family_level(10) == pytest.approx(1 - ALPHA / 10)
    wide = cells[0].est.widened(family_level(10))
    assert wide[1] > 0.1 > cells[0].est.high
    assert all(c.verdict == REPRODUCED for c in cells)
    # one interval far below the paper's effect stays 'smaller' on its widened interval, and says so
    cells = [_log_cell(x, math.log(1.03), 0.005, paper=0.1) for x in "abcdefghij"]
    decide_cells(paper, cells)
    assert cells[0].verdict == SMALLER and "family-widened interval" in cells[0].why


def test_not_reproduced_for_a_missing_effect_is_decided_on_the_widened_interval(tmp_path):
    paper = _paper(tmp_path, "".join(_claim(x) for x in "abcdef"))
    # contains 0, its 95% interval just below the paper's +10%: alone 'not reproduced'
    cells = [_log_cell(x, math.log(1.02), 0.035, paper=0.1) for x in "abcdef"]
    assert decide("higher", cells[0].est.low, cells[0].est.high, 0.1).verdict == NOT_REPRODUCED
    decide_cells(paper, cells)
    assert all(c.verdict == INCONCLUSIVE for c in cells)


# ---------------------------------------------------------------- costs


def test_a_cost_beyond_the_papers_effect_is_larger_than_claimed_and_counted_apart(tmp_path):
    # POSG's perplexity: +17.5% against the paper's +5.2%
    v = decide("higher", 0.14, 0.21, 0.052, cost=True)
    assert v.verdict == LARGER and "pays more than the paper says" in v.why
    assert decide("higher", 0.14, 0.21, 0.052).verdict == REPRODUCED  # not a cost: reproduced
    assert decide("higher", 0.03, 0.21, 0.052, cost=True).verdict == REPRODUCED  # reaches the effect
    paper = _paper(tmp_path, _claim("a").replace('direction = "higher"', 'direction = "higher"\ncost = true'))
    assert paper.claims[0].cost
    cell = _log_cell("a", math.log(1.175), 0.015, paper=0.052)
    decide_cells(paper, [cell])
    assert cell.verdict == LARGER
    counts = headline(paper, [cell])
    assert counts["cells_by_verdict"] == {LARGER: 1} and REPRODUCED not in counts["claims_by_verdict"]


# ---------------------------------------------------------------- trained heads: the recorded history


def _meta(sha, valid, loss=None):
    history = [
        {"epoch": i, "valid_ppl": v, **({} if loss is None or i == 0 else {"train_loss": loss[i - 1]})}
        for i, v in enumerate(valid)
    ]
    return {
        "sha256": sha,
        "budget_tokens": 60000,
        "config": {"epochs": len(valid) - 1, "lr": 5e-5},
        "training": {"history": history},
    }


def test_the_head_rule_reads_the_committed_history_and_scopes_the_conclusion_to_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))  # no cache: the committed copy only
    run, system = kerbs_run(tmp_path, {"kerbs_head": "abc"})
    heads_dir = tmp_path / "heads" / "m1-c"
    heads_dir.mkdir(parents=True)
    (heads_dir / "kerbs-seed0.json").write_text(json.dumps(_meta("abc", [55.8, 49.6, 48.3], [4.1, 3.9])))
    rec = head_training(run, system)
    assert rec["best_epoch"] == 2 and rec["still_improving"] is True
    assert (
        rec["budget"] == {"tokens": 60000, "epochs": 2, "lr": 5e-5} and rec["source"] == "heads/m1-c/kerbs-seed0.json"
    )
    paper = _paper(tmp_path, _claim("a"))
    cell = _log_cell("a", math.log(1.2), 0.02)
    decide_cells(paper, [cell])
    flag_cells(paper, [run], RunScores([run]), [cell], trained_heads([run]))
    assert cell.verdict == REPRODUCED
    improving = [f for f in cell.flags if f.startswith("still improving")]
    assert improving and "60,000 training tokens, 2 epochs, lr 5e-05" in improving[0] and "3.9" in improving[0]


def test_the_head_rule_reads_an_untrained_best_and_a_missing_history(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    paper = _paper(tmp_path, _claim("a"))
    root = tmp_path / "one"
    run, system = kerbs_run(root, {"kerbs_head": "abc"})
    (root / "heads" / "m1-c").mkdir(parents=True)
    (root / "heads" / "m1-c" / "h.json").write_text(json.dumps(_meta("abc", [30.0, 30.4, 30.9])))
    cell = _log_cell("a", math.log(1.2), 0.02)
    decide_cells(paper, [cell])
    flag_cells(paper, [run], RunScores([run]), [cell], trained_heads([run]))
    assert cell.verdict == INCONCLUSIVE and "never counted as reproduced" in cell.why
    assert "which is not the base softmax" in cell.why and "60,000 training tokens" in cell.why
    # the same head with its history changed to one that trained: the verdict stands
    (root / "heads" / "m1-c" / "h.json").write_text(json.dumps(_meta("abc", [30.0, 29.0, 29.5])))
    cell = _log_cell("a", math.log(1.2), 0.02)
    decide_cells(paper, [cell])
    flag_cells(paper, [run], RunScores([run]), [cell], trained_heads([run]))
    assert cell.verdict == REPRODUCED and any(f.startswith("budget") for f in cell.flags)
    # no history anywhere: labelled, never guessed from the interval
    run2, _ = kerbs_run(tmp_path / "two", {"kerbs_head": "zzz"})
    cell = _log_cell("a", math.log(1.00001), 0.00001)
    decide_cells(paper, [cell])
    flag_cells(paper, [run2], RunScores([run2]), [cell], trained_heads([run2]))
    assert any(f.startswith("training history not recorded") for f in cell.flags)
    assert "exactly the base softmax" not in RULES


def test_a_head_without_history_shows_its_committed_refit_beside_it_and_the_rules_do_not_read_it(tmp_path, monkeypatch):
    from maxbench.benchmark.reproduce.render import heads_section, refit_text

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    paper = _paper(tmp_path, _claim("a"))
    run, system = kerbs_run(tmp_path, {"kerbs_head": "old"})
    heads_dir = tmp_path / "heads" / "m1-c"
    heads_dir.mkdir(parents=True)
    # a refit of the same identity under the current code, other bits, whose best epoch is its untrained one
    (heads_dir / "kerbs-refit.json").write_text(json.dumps(_meta("new", [30.0, 30.4, 30.9])))
    rec = head_training(run, system)
    assert rec["history"] == [] and rec["best_epoch"] is None and not rec["untrained"]
    refit = rec["refit"]
    assert refit["same"] is False and refit["best_epoch"] == 0 and refit["file"] == "heads/m1-c/kerbs-refit.json"
    cell = _log_cell("a", math.log(1.2), 0.02)
    decide_cells(paper, [cell])
    flag_cells(paper, [run], RunScores([run]), [cell], trained_heads([run]))
    assert cell.verdict == REPRODUCED  # the refit's untrained best is not the run head's
    label = next(f for f in cell.flags if f.startswith("training history not recorded"))
    assert "a refit of the same identity under the current code, other bits, kept epoch 0" in label
    row = heads_section(trained_heads([run])).tables[0].rows[0]
    assert "0: 30, 1: 30.4, 2: 30.9; best epoch 0; other bits (sha256 new...)" in [c.text for c in row]
    assert refit_text(None) == ""
    # a refit with the run head's bits is the head's own committed meta: its history, read by the rules
    (heads_dir / "kerbs-refit.json").write_text(json.dumps(_meta("old", [30.0, 30.4, 30.9])))
    rec = head_training(run, system)
    assert rec["untrained"] and rec["source"] == "heads/m1-c/kerbs-refit.json" and rec["refit"] is None


# ---------------------------------------------------------------- a control that is missing; no baseline


def test_a_cell_without_its_control_is_not_comparable_with_a_warning_naming_it(tmp_path):
    paper = _paper(tmp_path, _claim("a").replace('baseline = "softmax"', 'baseline = "ft-softmax"'))
    run, _ = kerbs_run(tmp_path, {"kerbs_head": "abc"})
    run.roles["ft-softmax"] = "m1/ft-softmax/greedy,max_new_tokens=1"
    (run.run_dir / "generations.jsonl").write_text("")
    scores = {"generations_sha256": "", "systems": {run.roles["softmax"]: {}, run.roles["kerbs"]: {}}}
    (run.run_dir / "scores.json").write_text(json.dumps(scores))
    cell = _cell("a", Estimate(None, None, None))
    cell.baselines, cell.details[0].baseline = "ft-softmax", "ft-softmax"
    decide_cells(paper, [cell])
    assert cell.verdict == "not comparable"
    lines = missing_baselines([run], RunScores([run]), [cell])
    assert (
        len(lines) == 1 and "cell a x m1 x c (kerbs)" in lines[0] and "'ft-softmax' is not measured in m1-c" in lines[0]
    )


def test_a_claim_without_a_baseline_is_one_line_naming_it(tmp_path, cli):
    with pytest.raises(MaxbenchError, match="claim 'a'.*has no 'baseline'") as err:
        _paper(tmp_path, _claim("a").replace('baseline = "softmax"\n', ""))
    assert "\n" not in str(err.value)
    rc, _, err = cli("reproduce", str(tmp_path / "toy.toml"), "--estimate")
    assert rc == 2 and "has no 'baseline'" in err and err.count("\n") == 1


def test_report_only_warns_of_each_missing_control_and_exits_0(cli, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    out = tmp_path / "kerbs"
    shutil.copytree(REPORTS / "kerbs", out)
    rc, _, err = cli("reproduce", "kerbs", "--report-only", "--no-progress", "--threads", "1", "--out", str(out))
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    missing = [c for c in doc["cells"] if c["claim"] == "table1-lm-ppl" and c["verdict"] == "not comparable"]
    for c in missing:  # each named on a warning line; none silently judged against the untrained softmax
        assert f"warning: cell table1-lm-ppl x {c['model']} x {c['corpus']} (kerbs): its baseline 'ft-softmax'" in err
        assert c["baselines"] == "ft-softmax"
    assert all(c["baselines"] == "ft-softmax" for c in doc["cells"] if c["claim"] == "table1-lm-ppl")


# ---------------------------------------------------------------- Holm's p-value of a 0/1 rate


def test_the_exact_mcnemar_p_of_paired_rates_by_hand_and_only_for_0_1_values():
    # POSG's rep on Gemma: 4 prompts where only POSG repeats, 18 where only MLE does; under 'no difference'
    # the 4 is Binomial(22, 1/2): two-sided p = 2 P(X <= 4) = 2 (C(22,0) + ... + C(22,4)) / 2^22
    a = [1] * 3 + [1] * 4 + [0] * 18 + [0] * 167
    b = [1] * 3 + [0] * 4 + [1] * 18 + [0] * 167
    by_hand = 2 * sum(math.comb(22, k) for k in range(5)) / 2**22
    assert mcnemar_p(a, b) == pytest.approx(by_hand, rel=1e-12) and by_hand == pytest.approx(0.0043435, rel=1e-4)
    assert mcnemar_p([0, 1, 1], [0, 1, 1]) == 1.0  # no discordant pair
    assert mcnemar_p([0.5, 1], [0, 1]) is None and mcnemar_p([1, 0], [1]) is None


def test_a_one_fold_0_1_rate_enters_holm_with_its_exact_p_and_other_scores_with_estimate_and_se(tmp_path):
    per_a = {f"p{i:03d}": float(i < 7) for i in range(192)}  # 7 of 192 texts repeat
    per_b = {f"p{i:03d}": float(3 <= i < 24) for i in range(192)}  # 21 of 192, 3 prompts shared

    def entry(per, scale=1.0):
        vals = {k: v * scale for k, v in per.items()}
        v = sum(vals.values()) / len(vals)
        return {"value": v, "ci_low": v - 0.02, "ci_high": v + 0.02, "per_prompt": vals}

    comparisons = {"A": {s: {"difference": -0.073, "ci_low": -0.125, "ci_high": -0.026} for s in ("rep", "rep2")}}
    doc = {
        "systems": {
            "A": {"scores": {"rep": entry(per_a), "rep2": entry(per_a, 2.0)}},
            "B": {"scores": {"rep": entry(per_b), "rep2": entry(per_b, 2.0)}},
        },
        "metrics": {"rep": {"scores": ["rep", "rep2"]}},
        "comparisons": {"systems": comparisons},
    }
    run = SimpleNamespace(roles={"m": "A", "b": "B"}, baseline="B", run_dir=tmp_path)
    evidence = SimpleNamespace(pairs=SimpleNamespace(n_resamples=1000))
    from maxbench.benchmark.reproduce.cells import Row
    from maxbench.benchmark.reproduce.claims.difference import Difference

    rows = {}
    for score in ("rep", "rep2"):  # rep2: the same texts, values 0 or 2 (not a 0/1 rate)
        rows[score] = Row(claim="a", model="m1", corpus="c", method="m", baseline="b", score=score, kind="difference")
        Difference().measure(rows[score], None, [(run, doc)], evidence)
    exact = mcnemar_p(list(per_a.values()), list(per_b.values()))
    assert rows["rep"].rel.p_value == exact and "exact McNemar" in rows["rep"].rel.method
    assert rows["rep2"].rel.exact_p is None  # the normal approximation from estimate / se
    assert rows["rep2"].rel.p_value == pytest.approx(2 * norm.sf(abs(rows["rep2"].rel.centre) / rows["rep2"].rel.se))
    # two folds: no exact test is combined across them, estimate / se decide
    Difference().measure(two := Row(claim="a", model="m1", corpus="c", method="m", baseline="b", score="rep",
                                    kind="difference"), None, [(run, doc), (run, doc)], evidence)  # fmt: skip
    assert two.rel.exact_p is None
    assert "exact McNemar p-value" in RULES
