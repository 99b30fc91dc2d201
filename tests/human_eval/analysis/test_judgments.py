"""Statistics of the judgment types beyond Likert (pairwise, best-worst, direct assessment),
against choix and scipy called directly and against hand-worked cases."""

import math

import choix
import krippendorff
import numpy as np
import pytest
from scipy.stats import binomtest

from maxbench.human_eval.analysis.best_worst import BestWorst, bws_agreement, counting_scores
from maxbench.human_eval.analysis.direct import z_scores
from maxbench.human_eval.analysis.pairwise import BT_ALPHA, PairJudgment, bradley_terry, pairwise_agreement, sign_tests
from maxbench.human_eval.analysis.ratings import Rating

SYSTEMS = ["softmax", "graphmax", "sparsemax"]


def judgments(seed=0, n_items=30, annotators=("x", "y")):
    """Seeded judgments where graphmax is usually preferred, sparsemax usually not; positions swap."""
    rng = np.random.default_rng(seed)
    strength = {"softmax": 0.0, "graphmax": 0.8, "sparsemax": -0.6}
    out = []
    for i in range(n_items):
        for a in annotators:
            for k, (s, t) in enumerate([("softmax", "graphmax"), ("softmax", "sparsemax"), ("graphmax", "sparsemax")]):
                left, right = (s, t) if (i + k) % 2 == 0 else (t, s)
                p = 1 / (1 + math.exp(strength[right] - strength[left]))
                u = rng.random()
                winner = None if abs(u - p) < 0.05 else (left if u < p else right)
                out.append(PairJudgment(f"item-{i:03d}", a, left, right, winner))
    return out


def test_bradley_terry_equals_choix_called_directly():
    data = judgments()
    decisive = [j for j in data if j.winner is not None]
    index = {s: k for k, s in enumerate(SYSTEMS)}
    # Without ties: choix's list interface on (winner, loser) pairs, a path of its own.
    pairs = [(index[j.winner], index[j.right if j.winner == j.left else j.left]) for j in decisive]
    expected = choix.ilsr_pairwise(len(SYSTEMS), pairs, alpha=BT_ALPHA)
    got = bradley_terry(SYSTEMS, decisive, n_boot=200, seed=0)
    assert [s.system for s in got] == SYSTEMS
    np.testing.assert_allclose([s.score for s in got], expected, atol=1e-8)
    assert got[1].score > got[0].score > got[2].score  # the generating order
    for s in got:
        assert s.ci.low <= s.score <= s.ci.high
    # With ties: each tie is half a win for each side.
    m = np.zeros((3, 3))
    for j in data:
        a, b = index[j.left], index[j.right]
        if j.winner is None:
            m[a, b] += 0.5
            m[b, a] += 0.5
        else:
            w = index[j.winner]
            m[w, b if w == a else a] += 1
    np.testing.assert_allclose(
        [s.score for s in bradley_terry(SYSTEMS, data, 200, 0)], choix.ilsr_pairwise_dense(m, alpha=BT_ALPHA), atol=1e-8
    )


def test_bradley_terry_intervals_are_seeded_and_widen_with_fewer_items():
    many = bradley_terry(SYSTEMS, judgments(n_items=40), 300, seed=1)
    again = bradley_terry(SYSTEMS, judgments(n_items=40), 300, seed=1)
    few = bradley_terry(SYSTEMS, judgments(n_items=5), 300, seed=1)
    assert many == again
    width = lambda s: s.ci.high - s.ci.low  # noqa: E731
    assert all(width(f) > width(m) for f, m in zip(few, many))


def test_sign_tests_are_scipys_binomial_test_with_holm():
    data = judgments()
    tests = sign_tests(SYSTEMS, data)
    assert [(t.first, t.second) for t in tests] == [
        ("softmax", "graphmax"),
        ("softmax", "sparsemax"),
        ("graphmax", "sparsemax"),
    ]
    raw = []
    for t in tests:
        between = [j for j in data if {j.left, j.right} == {t.first, t.second}]
        w1 = sum(j.winner == t.first for j in between)
        w2 = sum(j.winner == t.second for j in between)
        assert (t.first_wins, t.second_wins, t.ties) == (w1, w2, len(between) - w1 - w2)
        assert t.pvalue == pytest.approx(binomtest(w1, w1 + w2, 0.5).pvalue)
        raw.append(t.pvalue)
    order = np.argsort(raw)
    m = len(raw)
    running = 0
    for rank, k in enumerate(order):  # Holm by hand
        running = max(running, min(1, (m - rank) * raw[k]))
        assert tests[k].pvalue_holm == pytest.approx(running)


def test_pairwise_agreement_against_krippendorff_and_by_hand():
    j = PairJudgment
    data = [
        j("i1", "x", "A", "B", "A"),
        j("i1", "y", "B", "A", "A"),  # same outcome, other positions
        j("i2", "x", "A", "B", "B"),
        j("i2", "y", "A", "B", None),
        j("i3", "x", "A", "B", "A"),
        j("i3", "y", "B", "A", "A"),
        j("i3", "z", "A", "B", "B"),
    ]
    got = pairwise_agreement(data)
    # Annotator pairs: i1 1/1, i2 0/1, i3 1/3 -> 2/5 agree.
    assert got.rate == pytest.approx(2 / 5) and got.n_units == 3
    # outcomes: 0 = A better, 1 = B better, 2 = tie; annotators x, y, z as rows.
    reliability = np.array([[0, 1, 0], [0, 2, 0], [np.nan, np.nan, 1]])
    assert got.alpha_nominal == pytest.approx(krippendorff.alpha(reliability, level_of_measurement="nominal"))


def test_best_worst_counting_scores_by_hand():
    b = BestWorst
    shown = ("A", "B", "C", "D")
    data = [
        b("i1", "x", shown, "A", "D"),
        b("i1", "y", shown, "A", "C"),
        b("i2", "x", shown, "B", "D"),
        b("i2", "y", shown, "A", "D"),
    ]
    got = {s.system: s for s in counting_scores(["A", "B", "C", "D"], data, 200, 0)}
    assert got["A"].score == pytest.approx(3 / 4) and (got["A"].best, got["A"].worst, got["A"].shown) == (3, 0, 4)
    assert got["B"].score == pytest.approx(1 / 4)
    assert got["C"].score == pytest.approx(-1 / 4)
    assert got["D"].score == pytest.approx(-3 / 4)
    for s in got.values():
        assert s.ci.low <= s.score <= s.ci.high
    agreement = bws_agreement(data)
    assert agreement.best_rate == pytest.approx(1 / 2) and agreement.worst_rate == pytest.approx(1 / 2)


def rating(annotator, value, item="i1", system="s"):
    return Rating("st", item, system, annotator, "quality", value, None, None, (), 0, 100, "test")


def test_z_scores_hand_worked():
    rows = [
        rating("a", 10, "i1"),
        rating("a", 20, "i2"),
        rating("a", 30, "i3"),
        rating("b", 50, "i1"),
        rating("b", 50, "i2"),
        rating("b", 80, "i3"),
        rating("c", 70, "i1"),  # every rating the same: no z-score
        rating("c", 70, "i2"),
    ]
    z, undefined = z_scores(rows)
    assert undefined == ["c"]
    by = {(r.annotator, r.item): r.value for r in z}
    # a: mean 20, sd 10.  b: mean 60, sd sqrt((100 + 100 + 400) / 2) = sqrt(300).
    assert [by[("a", i)] for i in ("i1", "i2", "i3")] == pytest.approx([-1, 0, 1])
    s = math.sqrt(300)
    assert [by[("b", i)] for i in ("i1", "i2", "i3")] == pytest.approx([-10 / s, -10 / s, 20 / s])
