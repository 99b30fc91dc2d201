"""The report's statistics against hand-worked cases, scipy and the krippendorff package."""

from __future__ import annotations

import json
import math
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import maxbench.human_eval.analysis.analyse
import maxbench.human_eval.analysis.options
import maxbench.human_eval.analysis.ratings
import maxbench.human_eval.analysis.results
import maxbench.human_eval.analysis.statistics
from maxbench.human_eval.analysis.analyse import analyse
from maxbench.human_eval.analysis.options import ReportOptions
from maxbench.human_eval.analysis.ratings import load_ratings, ratings_from_records
from maxbench.human_eval.analysis.statistics import (
    DIFFERENCE_DECIMALS,
    agreement,
    bootstrap_rank_biserial_paired,
    bootstrap_rank_biserial_unpaired,
    detect_design,
    mann_whitney,
    percentile_ci,
    rank_biserial_paired,
    rank_biserial_unpaired,
    seeded_rng,
    wilcoxon_paired,
)
from maxbench.intervals import ConfidenceInterval
from maxbench.multiple_testing import holm
from tests.support.paths import DATA

FIVE = [1.0, 2.0, 3.0, 4.0, 5.0]


# --------------------------------------------------------------------------- hand-worked


def test_holm_hand_worked():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # a test that could not run is not counted in m
    assert holm([0.01, None, 0.04]) == pytest.approx([0.02, None, 0.04])
    assert holm([0.6, 0.7]) == [1.0, 1.0]
    assert holm([]) == []


def test_holm_is_not_holm_sidak():
    # Holm-Sidak (statsmodels' default) would give 1 - (1 - 0.02)**2 = 0.0396 for the smallest.
    assert holm([0.02, 0.5])[0] == pytest.approx(0.04)


def test_rank_biserial_unpaired_hand_worked():
    # pairs (ref, other): 3 beats 1, ties 3, loses to 4; 4 beats 1 and 3, ties 4; 5 beats all:
    # 6 wins, 1 loss, 2 ties of 9 pairs -> (6 - 1) / 9
    assert rank_biserial_unpaired([3, 4, 5], [1, 3, 4]) == pytest.approx(5 / 9)
    assert rank_biserial_unpaired([1, 3, 4], [3, 4, 5]) == pytest.approx(-5 / 9)
    u = stats.mannwhitneyu([3, 4, 5], [1, 3, 4]).statistic  # 6 + 2/2 = 7
    assert u == 7
    assert 2 * u / 9 - 1 == pytest.approx(5 / 9)


def test_rank_biserial_paired_hand_worked():
    # d = (2, -1, 0, 3, 1): the zero is dropped; |d| ranks 1 -> 1.5, 1 -> 1.5, 2 -> 3, 3 -> 4
    # T+ = 3 + 4 + 1.5 = 8.5, T- = 1.5, r = 7 / 10
    assert rank_biserial_paired([2, -1, 0, 3, 1]) == pytest.approx(0.7)
    assert rank_biserial_paired([0, 0]) is None


def test_design_detection_hand_worked():
    both = detect_design({"p1", "p2", "p3"}, {"p1", "p2", "p3"}, "A", "B")
    assert (both.kind, both.n_common_items) == ("paired", 3)
    none = detect_design({"p1", "p2", "p3"}, {"p4", "p5"}, "A", "B")
    assert (none.kind, none.n_common_items) == ("unpaired", 0)
    partial = detect_design({"p1", "p2", "p3"}, {"p1", "p2", "p4"}, "A", "B")
    assert (partial.kind, partial.n_common_items) == ("unpaired", 2)
    assert "only 2" in partial.statement
    forced = detect_design({"p1", "p2", "p3"}, {"p1", "p2", "p4"}, "A", "B", forced="paired")
    assert forced.kind == "paired" and "forced" in forced.statement


def _rows(values: dict[str, list[int]], study="s", annotator="x"):
    return [
        dict(
            study=study,
            item=f"p{i}",
            system=system,
            annotator=annotator,
            criterion="q",
            value=v,
            scale_min=1,
            scale_max=5,
        )
        for system, vs in values.items()
        for i, v in enumerate(vs)
    ]


def test_paired_design_chooses_wilcoxon_hand_worked():
    # Every item rated for both systems, B exactly one point above A on each item: the item
    # effect hides the difference from Mann-Whitney, the paired test sees 9 of 9 signs alike.
    a = [1, 2, 3, 4, 1, 2, 3, 4, 2]
    b = [v + 1 for v in a]
    result = analyse(ratings_from_records(_rows({"A": a, "B": b}), "hand"), ReportOptions(reference="A", n_boot=200))
    (c,) = result.comparisons
    assert c.design.kind == "paired" and c.primary == "wilcoxon"
    # all |d| tie at rank 5, T+ = 0; under H0 each of the 2**9 sign patterns is equally likely,
    # and only "all negative" or "all positive" is as extreme: p = 2 / 512
    assert c.wilcoxon.pvalue == pytest.approx(2 / 512)
    assert c.wilcoxon.method == "permutation"
    assert c.wilcoxon.effect_size == pytest.approx(-1.0)  # the reference A is always lower
    assert c.mannwhitney.pvalue > 0.1
    assert result.descriptive("q", "B").mean == pytest.approx(np.mean(b))


def test_unpaired_design_chooses_mann_whitney():
    rows = _rows({"A": [1, 2, 3, 4]}) + [dict(r, item="q" + r["item"]) for r in _rows({"B": [3, 4, 5, 5]})]
    result = analyse(ratings_from_records(rows, "hand"), ReportOptions(reference="A", n_boot=200))
    (c,) = result.comparisons
    assert c.design.kind == "unpaired" and c.primary == "mannwhitneyu" and c.wilcoxon is None
    ref, other = [1, 2, 3, 4], [3, 4, 5, 5]
    assert c.mannwhitney.pvalue == pytest.approx(stats.mannwhitneyu(ref, other).pvalue)
    assert c.mannwhitney.statistic == stats.mannwhitneyu(ref, other).statistic


# --------------------------------------------------------------------------- scipy


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize(
    "ref,other",
    [
        ([1, 2, 3], [4, 5, 6, 7]),  # small, no ties: exact
        ([1, 2, 2, 3], [2, 4, 5]),  # ties: asymptotic
        (list(np.random.default_rng(1).integers(1, 6, 30)), list(np.random.default_rng(2).integers(1, 6, 25))),
    ],
)
def test_mann_whitney_equals_scipy(ref, other, alternative):
    ours = mann_whitney(ref, other, alternative)
    theirs = stats.mannwhitneyu(ref, other, alternative=alternative)  # method="auto"
    assert ours.statistic == theirs.statistic
    assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-12)
    assert ours.effect_size == pytest.approx(2 * theirs.statistic / (len(ref) * len(other)) - 1)
    ties = len(set(ref) | set(other)) < len(ref) + len(other)
    assert ours.method == ("exact" if not ties and min(len(ref), len(other)) <= 8 else "asymptotic")


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("seed,n", [(3, 7), (4, 12), (5, 30), (6, 60)])
def test_wilcoxon_equals_scipy(seed, n, alternative):
    rng = np.random.default_rng(seed)
    ref = rng.integers(1, 6, (n, 3)).mean(axis=1)  # per-item means of three ratings
    other = rng.integers(1, 6, (n, 3)).mean(axis=1)
    ours = wilcoxon_paired(ref, other, alternative)
    d = np.round(ref - other, DIFFERENCE_DECIMALS)
    theirs = stats.wilcoxon(d, alternative=alternative)  # zero_method="wilcox", method="auto"
    assert ours.statistic == theirs.statistic
    assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-12)
    t_plus = stats.wilcoxon(d, alternative="greater", method="asymptotic").statistic  # T+ only
    nonzero = int((d != 0).sum())
    total = nonzero * (nonzero + 1) / 2
    assert ours.effect_size == pytest.approx((2 * t_plus - total) / total)


def test_wilcoxon_differences_of_equal_fractions_tie():
    # 4/3 - 5/3 and 1 - 4/3 are both -1/3, but not in floating point without rounding
    ref = np.array([np.mean([1, 1, 2]), 1.0, 4.0, 5.0])
    other = np.array([np.mean([1, 2, 2]), np.mean([1, 1, 2]), 2.0, 1.0])
    assert (ref - other)[0] != (ref - other)[1]
    d = np.round(ref - other, DIFFERENCE_DECIMALS)
    assert d[0] == d[1]
    assert wilcoxon_paired(ref, other, "two-sided").method == "permutation"  # ties detected


def test_wilcoxon_all_differences_zero_is_reported_not_run():
    result = wilcoxon_paired([3, 4], [3, 4], "two-sided")
    assert result.pvalue is None and "same mean" in result.note


# --------------------------------------------------------------------------- bootstrap


def test_unpaired_bootstrap_equals_loop_over_resampled_items():
    rng = np.random.default_rng(11)
    ref_items = [list(rng.integers(1, 6, 3)) for _ in range(7)]
    other_items = [list(rng.integers(1, 6, 2)) for _ in range(5)]

    def hist(items):
        return np.array([[sum(v == k for v in item) for k in range(1, 6)] for item in items], dtype=float)

    ci = bootstrap_rank_biserial_unpaired(hist(ref_items), hist(other_items), FIVE, 300, np.random.default_rng(42))
    draw = np.random.default_rng(42)  # the same draws, in the same order, item by item
    picks_ref = draw.integers(0, 7, (300, 7))
    picks_other = draw.integers(0, 5, (300, 5))
    rs = []
    for pr, po in zip(picks_ref, picks_other):
        x = [v for i in pr for v in ref_items[i]]
        y = [v for i in po for v in other_items[i]]
        rs.append(2 * stats.mannwhitneyu(x, y).statistic / (len(x) * len(y)) - 1)
    assert ci == pytest.approx(tuple(np.percentile(rs, [2.5, 97.5])), abs=1e-12)


def test_paired_bootstrap_equals_loop_over_resampled_items():
    d = np.array([1, -0.5, 0, 2, 1, 0.5, -1, 1.5, 0, 2.5])
    ci = bootstrap_rank_biserial_paired(d, 300, np.random.default_rng(7))
    picks = np.random.default_rng(7).integers(0, d.size, (300, d.size))
    rs = []
    for p in picks:
        sample = d[p]
        nz = sample[sample != 0]
        if nz.size == 0:
            continue
        t_plus = stats.wilcoxon(sample, alternative="greater", method="asymptotic").statistic  # T+ only
        total = nz.size * (nz.size + 1) / 2
        rs.append((2 * t_plus - total) / total)
    assert ci == pytest.approx(tuple(np.percentile(rs, [2.5, 97.5])), abs=1e-12)


def test_bootstrap_is_seeded_and_seed_matters():
    path = DATA / "ratings_paired.csv"
    one = analyse(load_ratings(path), ReportOptions(reference="graphmax", n_boot=200, seed=1))
    two = analyse(load_ratings(path), ReportOptions(reference="graphmax", n_boot=200, seed=1))
    three = analyse(load_ratings(path), ReportOptions(reference="graphmax", n_boot=200, seed=2))
    assert one.to_dict() == two.to_dict()
    assert one.agreement[0].ordinal_ci != three.agreement[0].ordinal_ci


# --------------------------------------------------------------------------- krippendorff


def test_alpha_equals_krippendorff_on_its_documented_example():
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
        [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan],
    ]
    records = [
        dict(study="s", item=f"u{j:02d}", system="S", annotator=f"c{i}", criterion="q", value=v)
        for i, row in enumerate(data)
        for j, v in enumerate(row)
        if not math.isnan(v)
    ]
    ratings = ratings_from_records(records, "doc")
    from maxbench.human_eval.analysis.results import Scale

    result = agreement("q", ratings.rows, Scale(1, 5, tuple(FIVE), "test"), n_boot=200, seed=0)
    assert round(result.ordinal, 3) == 0.815  # the value in krippendorff.alpha's docstring
    assert result.interval == pytest.approx(krippendorff.alpha(data, level_of_measurement="interval"))
    assert result.n_units == 12 and result.n_pairable_units == 11


def _table(path: Path, min_seconds=None) -> pd.DataFrame:
    """The fixture read independently of maxbench.human_eval.analysis.ratings, with the report's exclusions."""
    df = pd.read_csv(path, keep_default_na=False)
    df = df[~df["flags"].astype(str).str.contains("attention_failed")]
    if min_seconds is not None:
        df = df[df["seconds"] >= min_seconds]
    return df


@pytest.fixture(scope="module")
def paired():
    path = DATA / "ratings_paired.csv"
    options = ReportOptions(reference="graphmax", n_boot=200, min_seconds=3)
    return analyse(load_ratings(path), options), _table(path, min_seconds=3)


def test_every_statistic_equals_scipy_and_krippendorff_paired(paired):
    result, df = paired
    assert result.exclusions.rows_kept == len(df)
    for aspect in ("fluency", "diversity"):
        at = df[df.criterion == aspect]
        ref = at[at.system == "graphmax"]
        ref_means = ref.groupby("item")["value"].mean()
        for system in ("graphmax", "softmax", "sparsemax"):
            values = at[at.system == system]["value"].to_numpy(dtype=float)
            d = result.descriptive(aspect, system)
            assert d.n == len(values)
            assert d.mean == pytest.approx(values.mean())
            assert d.sd == pytest.approx(stats.tstd(values))
            assert d.median == np.median(values)
            assert dict(d.distribution) == {float(k): int((values == k).sum()) for k in range(1, 6)}
            if system == "graphmax":
                continue
            c = result.comparison(aspect, system)
            other = at[at.system == system]
            mwu = stats.mannwhitneyu(ref["value"], other["value"])
            assert c.mannwhitney.statistic == mwu.statistic
            assert c.mannwhitney.pvalue == pytest.approx(mwu.pvalue, rel=1e-12)
            other_means = other.groupby("item")["value"].mean()
            assert c.design.kind == "paired"
            diff = np.round((ref_means - other_means.loc[ref_means.index]).to_numpy(), DIFFERENCE_DECIMALS)
            w = stats.wilcoxon(diff)
            assert c.wilcoxon.statistic == w.statistic
            assert c.wilcoxon.pvalue == pytest.approx(w.pvalue, rel=1e-12)
        # Holm over the two comparisons of this aspect
        ps = [result.comparison(aspect, s).wilcoxon.pvalue for s in ("softmax", "sparsemax")]
        adjusted = [result.comparison(aspect, s).wilcoxon.pvalue_holm for s in ("softmax", "sparsemax")]
        low, high = sorted(ps)  # m = 2: the smaller doubled, the larger at least that
        expected = {low: min(1, 2 * low), high: max(min(1, 2 * low), high)}
        assert adjusted == pytest.approx([expected[p] for p in ps])
        # agreement: annotators x texts, straight into the krippendorff package
        matrix = at.pivot_table(index="annotator", columns=["item", "system"], values="value").to_numpy()
        g = next(x for x in result.agreement if x.aspect == aspect)
        assert g.ordinal == pytest.approx(
            krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal", value_domain=FIVE), rel=1e-12
        )
        assert g.interval == pytest.approx(
            krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval"), rel=1e-12
        )
        assert g.ordinal_ci[0] <= g.ordinal <= g.ordinal_ci[1]
        assert g.n_annotators == 3


def test_alpha_bootstrap_equals_loop_over_resampled_items(paired):
    result, df = paired
    from maxbench.human_eval.analysis.statistics import seeded_rng

    at = df[df.criterion == "fluency"]
    wide = at.pivot_table(index="annotator", columns=["item", "system"], values="value")
    items = sorted(set(wide.columns.get_level_values(0)))
    rng = seeded_rng(0, "alpha", "fluency")
    reps = []
    for _ in range(200):
        picked = rng.integers(0, len(items), size=len(items))
        columns = [col for i in picked for col in wide.columns if col[0] == items[i]]
        reps.append(
            krippendorff.alpha(
                reliability_data=wide[columns].to_numpy(), value_domain=FIVE, level_of_measurement="ordinal"
            )
        )
    g = next(x for x in result.agreement if x.aspect == "fluency")
    assert g.ordinal_ci == pytest.approx(tuple(np.percentile(reps, [2.5, 97.5])), rel=1e-9)


def test_every_statistic_equals_scipy_unpaired():
    path = DATA / "ratings_unpaired.csv"
    result = analyse(load_ratings(path), ReportOptions(reference="gpt2+graphmax", scale=(1, 5), n_boot=200))
    df = _table(path)
    for aspect in result.aspects:
        at = df[df.criterion == aspect]
        c = result.comparison(aspect, "gpt2")
        assert c.design.kind == "unpaired" and c.design.n_common_items == 0 and c.wilcoxon is None
        mwu = stats.mannwhitneyu(at[at.system == "gpt2+graphmax"]["value"], at[at.system == "gpt2"]["value"])
        assert (c.mannwhitney.statistic, c.mannwhitney.pvalue) == (mwu.statistic, pytest.approx(mwu.pvalue))
        assert c.mannwhitney.pvalue_holm == c.mannwhitney.pvalue  # one comparison: Holm changes nothing
        matrix = at.pivot_table(index="annotator", columns=["item", "system"], values="value").to_numpy()
        g = next(x for x in result.agreement if x.aspect == aspect)
        assert g.ordinal == pytest.approx(
            krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal", value_domain=FIVE), rel=1e-12
        )


def test_every_interval_is_a_confidence_interval_written_as_a_pair(paired):
    result, _ = paired
    intervals = [t.effect_ci for c in result.comparisons for t in (c.mannwhitney, c.wilcoxon)]
    intervals += [g.ordinal_ci for g in result.agreement]
    assert intervals and all(type(ci) is ConfidenceInterval and ci.low <= ci.high for ci in intervals)
    data = result.to_dict()
    ci = result.comparisons[0].wilcoxon.effect_ci
    assert data["comparisons"][0]["wilcoxon"]["effect_ci"] == [ci.low, ci.high]
    assert json.loads(json.dumps(data))["agreement"][0]["ordinal_ci"] == list(result.agreement[0].ordinal_ci)


def test_no_class_of_the_analysis_is_named_like_a_pytest_test_class():
    # pytest collects classes named Test* from any test module that imports them, and warns
    for module in (
        maxbench.human_eval.analysis.analyse,
        maxbench.human_eval.analysis.options,
        maxbench.human_eval.analysis.ratings,
        maxbench.human_eval.analysis.results,
        maxbench.human_eval.analysis.statistics,
    ):
        classes = [n for n, obj in vars(module).items() if isinstance(obj, type) and n.startswith("Test")]
        assert classes == [], module.__name__


def test_annotator_drift_offset_and_check_failures(paired):
    result, df = paired
    a02 = next(a for a in result.annotators if a.annotator == "a02")
    mine = df[df.annotator == "a02"]
    positions = sorted(mine.position.unique())
    half = len(positions) // 2
    early = mine[mine.position.isin(positions[:half])]["value"].mean()
    late = mine[mine.position.isin(positions[-half:])]["value"].mean()
    assert a02.drift == pytest.approx(late - early)
    assert a02.mean == pytest.approx(mine["value"].mean())
    a04 = next(a for a in result.annotators if a.annotator == "a04")
    assert (a04.n, a04.check_failures, a04.excluded, a04.flags) == (0, 3, 6, ("attention_failed",))
    a03 = next(a for a in result.annotators if a.annotator == "a03")
    assert a03.excluded == 4  # two pages under 3 s, two criteria each
    # offset: own rating minus the mean of the others on the same text and aspect
    others = df[df.annotator != "a01"].groupby(["criterion", "item", "system"])["value"].mean()
    own = df[df.annotator == "a01"].set_index(["criterion", "item", "system"])["value"]
    a01 = next(a for a in result.annotators if a.annotator == "a01")
    assert a01.offset == pytest.approx((own - others.loc[own.index]).mean())


def test_alpha_without_variation_is_undefined_and_said():
    records = [
        dict(study="s", item=f"p{i}", system="S", annotator=a, criterion="q", value=3)
        for i in range(4)
        for a in ("x", "y")
    ]
    from maxbench.human_eval.analysis.results import Scale

    result = agreement(
        "q", ratings_from_records(records, "flat").rows, Scale(1, 5, tuple(FIVE), "test"), n_boot=200, seed=0
    )
    assert result.ordinal is None and "no variation" in result.undefined_reason
    with pytest.warns(RuntimeWarning):  # the package itself divides 0 by 0 here
        assert math.isnan(
            krippendorff.alpha(
                reliability_data=[[3, 3, 3, 3], [3, 3, 3, 3]], level_of_measurement="ordinal", value_domain=FIVE
            )
        )


def test_one_item_gives_no_interval_and_two_do():
    replicates = np.array([-0.194] * 50)
    assert percentile_ci(replicates, 1) is None
    assert percentile_ci(np.linspace(-1, 1, 50), 2) is not None
    rng = seeded_rng(1, "t")
    assert bootstrap_rank_biserial_paired(np.array([0.5]), 100, rng) is None
    one = np.array([[0, 1, 0, 0, 0]])
    assert (
        bootstrap_rank_biserial_unpaired(one, np.array([[0, 0, 1, 0, 0], [1, 0, 0, 0, 0]]), range(1, 6), 100, rng)
        is None
    )
