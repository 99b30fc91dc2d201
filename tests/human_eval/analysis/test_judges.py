"""A judge against people (human_eval/analysis/judges.py): agreement, pair behaviour, length control, PPI tables."""

import math

import numpy as np
import pytest

from maxbench.human_eval.analysis import judges
from maxbench.human_eval.analysis.ppi import classical_mean
from maxbench.multiple_testing import holm


def test_length_controlled_win_rate_removes_a_preference_for_length_only():
    """Outcomes that depend on the length difference alone: the raw win rate follows the longer
    system, the length-controlled one is 0.5 (no preference at equal length)."""
    rng = np.random.default_rng(0)
    d = rng.normal(8, 10, size=4000)  # the system writes longer texts than the baseline
    sd = d.std()
    p = 1 / (1 + np.exp(-(0.0 + 1.5 * np.tanh(d / sd))))
    outcome = (rng.random(d.size) < p).astype(float)
    got = judges.length_controlled_win_rate(outcome, d)
    assert got["win_rate"] > 0.6
    assert got["lc_win_rate"] == pytest.approx(0.5, abs=0.04)
    assert got["length_coef"] == pytest.approx(1.5, abs=0.2)
    # a real preference at equal length stays
    p = 1 / (1 + np.exp(-(1.0 + 1.5 * np.tanh(d / sd))))
    outcome = (rng.random(d.size) < p).astype(float)
    assert judges.length_controlled_win_rate(outcome, d)["lc_win_rate"] == pytest.approx(1 / (1 + np.exp(-1)), abs=0.04)
    # always winning stays finite
    assert 0.9 < judges.length_controlled_win_rate([1.0] * 20, list(range(20)))["lc_win_rate"] < 1


def test_pair_behaviour_counts_order_consistency_and_position_bias():
    units = {
        (1, 2): (1, {"A": 0.7, "B": 0.3}),  # 1 better
        (2, 1): (2, {"A": 0.4, "B": 0.6}),  # 1 better again: consistent
        (3, 4): (1, {"A": 0.9, "B": 0.1}),  # 3 better
        (4, 3): (1, {"A": 0.8, "B": 0.2}),  # 4 better: always A, inconsistent
        (5, 6): (0, {"A": 0.2, "B": 0.2, "T": 0.6}),
        (6, 5): (0, {"A": 0.3, "B": 0.1, "T": 0.6}),  # tie both times: consistent
    }
    got = judges.pair_behaviour(units)
    assert got["pairs_both_orders"] == 3 and got["order_consistency"] == pytest.approx(2 / 3)
    assert got["position_bias"] == pytest.approx(np.mean([0.4, -0.2, 0.8, 0.6, 0.0, 0.2]))
    assert got["share_first"] == pytest.approx(3 / 4)
    people = [((1, 2), 1), ((2, 1), 1), ((4, 3), 1), ((9, 8), 2)]
    # matched (people, judge): (1, 1), (1, 2), (1, 1); chance = p_people(1) p_judge(1) = 1 x 2/3
    assert judges.pairwise_agreement(people, units) == {
        "judgments": 3,
        "agreement": pytest.approx(2 / 3),
        "chance": pytest.approx(2 / 3),
    }


def test_a_judge_answering_always_a_is_at_chance_whatever_the_number_of_choices():
    """Chance is Cohen's expected agreement from the two raters' shares of each answer, not
    1/choices: a judge that always says "A" repeats the people's share of "A" and no more."""
    matched = [(1, 1), (2, 1), (1, 1), (2, 1), (2, 1)]  # the people: A 2 of 5; the judge: always A
    assert judges.chance_agreement(matched) == pytest.approx(2 / 5)
    assert sum(h == j for h, j in matched) / len(matched) == pytest.approx(2 / 5)
    assert judges.chance_agreement([(1, 1), (2, 2), (3, 3)]) == pytest.approx(1 / 3)
    assert judges.chance_agreement([]) is None


def test_a_judge_that_repeats_the_people_agrees_fully_and_a_shuffled_one_does_not():
    rng = np.random.default_rng(1)
    human, expected = {}, {}
    for code in range(30):
        for s in ("a", "b", "c"):
            base = {"a": 2, "b": 3, "c": 4}[s]
            human[(f"p{code}", s)] = [int(np.clip(base + rng.integers(-1, 2), 1, 5)) for _ in range(3)]
            expected[(f"p{code}", s)] = float(np.mean(human[(f"p{code}", s)]))
    argmax = {u: round(v) for u, v in expected.items()}
    got = judges.scale_agreement(human, expected, argmax, [1, 2, 3, 4, 5])
    assert got["items"] == 90 and got["ratings"] == 270
    assert got["pearson"] == pytest.approx(1.0) and got["ranking"] == {"tau": pytest.approx(1.0), "systems": 3}
    assert got["alpha_people_and_judge"] > got["alpha_people"] > 0.3
    keys = list(expected)
    shuffled = dict(zip(keys, rng.permutation([expected[k] for k in keys]), strict=True))
    bad = judges.scale_agreement(human, shuffled, {u: round(v) for u, v in shuffled.items()}, [1, 2, 3, 4, 5])
    assert abs(bad["pearson"]) < 0.3 and bad["alpha_people_and_judge"] < got["alpha_people_and_judge"]


def test_ppi_table_puts_people_only_beside_ppi_with_holm_over_systems():
    rng = np.random.default_rng(2)
    human, judge = {}, {}
    for code in range(60):
        for s, mu in (("base", 3.0), ("x", 3.3), ("y", 3.0)):
            q = mu + rng.normal(0, 0.7)
            judge[(f"p{code:02d}", s)] = 0.8 * q + 1.0 + rng.normal(0, 0.3)
            if code < 20:
                human[(f"p{code:02d}", s)] = q + rng.normal(0, 0.3)
    table = judges.ppi_table(human, judge, "base", (-math.inf, math.inf))
    for s in ("base", "x", "y"):
        people = table["systems"][s]["people"]
        ys = np.array([human[(f"p{c:02d}", s)] for c in range(20)])
        assert people == pytest.approx(classical_mean(ys).at() | {"clipped": False}, rel=1e-12)
        assert table["systems"][s]["ppi"]["n"] == 20 and table["systems"][s]["ppi"]["N"] == 40
        ppi = table["systems"][s]["ppi"]
        assert ppi["high"] - ppi["low"] < people["high"] - people["low"]
    diffs = table["differences"]
    assert sorted(diffs) == ["x", "y"]
    for kind in ("people", "ppi"):
        assert [diffs[s][kind]["p_holm"] for s in ("x", "y")] == holm([diffs[s][kind]["p"] for s in ("x", "y")])


def test_position_bias_is_the_same_whatever_order_the_units_are_read_in():
    """A database rebuilt from saved judgments reads them in another order: the report must not move."""
    import random

    rng = random.Random(0)
    items = []
    for k in range(60):
        a = rng.random()
        items += [((k, k + 100), (1, {"A": a, "B": 1 - a})), ((k + 100, k), (2, {"A": a / 3, "B": 1 - a / 3}))]
    biases = set()
    for _ in range(20):
        rng.shuffle(items)
        biases.add(judges.pair_behaviour(dict(items))["position_bias"])
    assert len(biases) == 1


def test_ppi_table_intervals_stay_on_the_scale_of_what_they_estimate():
    """A win rate near 0 (one win in 12) has a normal interval reaching below 0: clipped to [0, 1]
    for a system's mean and to [-1, 1] for a difference, the estimate and standard error kept."""
    human = {(f"p{c:02d}", s): float(s == "x" and c == 0) for c in range(12) for s in ("x", "base")}
    judge = dict(human) | {(f"q{c:02d}", s): 0.0 for c in range(12) for s in ("x", "base")}
    table = judges.ppi_table(human, judge, "base", (0.0, 1.0))
    for kind in ("people", "ppi"):
        x = table["systems"]["x"][kind]
        raw = classical_mean(np.array([human[(f"p{c:02d}", "x")] for c in range(12)])).at()
        assert raw["low"] < 0  # what the scale forbids
        if kind == "people":
            assert (x["low"], x["high"], x["estimate"], x["se"]) == (0.0, raw["high"], raw["estimate"], raw["se"])
        assert x["low"] >= 0.0 and x["high"] <= 1.0 and x["clipped"]
        d = table["differences"]["x"][kind]
        assert -1.0 <= d["low"] <= d["high"] <= 1.0
