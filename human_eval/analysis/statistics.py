"""Statistics for human ratings: tests, effect sizes, their bootstrap intervals, agreement.

Everything here is computed by scipy and the krippendorff package; what is hand-written
(rank-biserial correlations and their bootstrap) is checked against a hand-worked case and
against scipy in ``tests/human_eval/analysis/test_statistics.py``. Holm's step-down correction is the shared
base's (``maxbench.multiple_testing.holm``), checked there too.

Conventions, stated once because every table depends on them:
- an *aspect* is a rubric criterion; each aspect is analysed on its own scale;
- a *unit* (for agreement) is one text: an (item, system) pair;
- comparisons are "reference vs other": a positive rank-biserial r and the alternative
  ``greater`` both mean the reference is rated higher than the other system;
- Holm's correction runs over the comparisons of one aspect (one family per test).
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from maxbench.human_eval.analysis.options import CONFIDENCE
from maxbench.human_eval.analysis.ratings import Rating
from maxbench.human_eval.analysis.results import AgreementResult, Design, Scale, SignificanceTest
from maxbench.intervals import ConfidenceInterval

# Per-item means are averages of a few integers; rounding their differences makes
# differences that are equal as fractions (11/3 - 3 and 3 - 7/3) tie exactly in ranks.
DIFFERENCE_DECIMALS = 9


# --------------------------------------------------------------------------- hand-written statistics


def rank_biserial_unpaired(reference: Sequence[float], other: Sequence[float]) -> float:
    """P(reference > other) - P(reference < other) over all pairs; equals 2U/(n1 n2) - 1."""
    ref = np.asarray(reference, dtype=float)
    oth = np.sort(np.asarray(other, dtype=float))
    below = np.searchsorted(oth, ref, side="left").sum()
    above = (len(oth) - np.searchsorted(oth, ref, side="right")).sum()
    return float((below - above) / (len(ref) * len(oth)))


def rank_biserial_paired(differences: Sequence[float]) -> float | None:
    """Matched-pairs rank-biserial (T+ - T-) / (T+ + T-), zero differences dropped (scipy's 'wilcox')."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def percentile_ci(values: np.ndarray, n_items: int) -> ConfidenceInterval | None:
    """The 95% percentile interval of bootstrap replicates ``values`` drawn from ``n_items`` items;
    None where there is none: fewer than two items (a resample of one item is that item again, so
    its "interval" would be a single point, not an interval) or no finite replicate."""
    if n_items < 2:
        return None
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return ConfidenceInterval(float(low), float(high))


def seeded_rng(seed: int, *names: str) -> np.random.Generator:
    """The random stream of one purpose, e.g. ``seeded_rng(seed, "wilcoxon", aspect, other)``."""
    # One stream per (aspect, system, purpose): a result does not change when other
    # systems or aspects are added to the study.
    return np.random.default_rng([seed, *(zlib.crc32(n.encode("utf-8")) for n in names)])


def bootstrap_rank_biserial_unpaired(
    ref_counts: np.ndarray, other_counts: np.ndarray, domain: Sequence[float], n_boot: int, rng: np.random.Generator
) -> ConfidenceInterval | None:
    """Percentile CI of the unpaired rank-biserial r, resampling items within each system.

    ``*_counts`` are (items, len(domain)) histograms: an item's ratings are resampled
    together, because ratings of one text by several annotators are not independent.
    """
    dom = np.asarray(domain, dtype=float)
    sign = np.sign(dom[:, None] - dom[None, :])
    boot_ref = _resampled_totals(ref_counts, n_boot, rng)
    boot_other = _resampled_totals(other_counts, n_boot, rng)
    n_pairs = boot_ref.sum(axis=1) * boot_other.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.einsum("bi,ij,bj->b", boot_ref, sign, boot_other) / n_pairs
    return percentile_ci(r, min(ref_counts.shape[0], other_counts.shape[0]))


def _resampled_totals(counts: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    n = counts.shape[0]
    picks = rng.integers(0, n, size=(n_boot, n))
    weights = np.bincount((picks + np.arange(n_boot)[:, None] * n).ravel(), minlength=n_boot * n).reshape(n_boot, n)
    return weights @ counts


def bootstrap_rank_biserial_paired(
    differences: np.ndarray, n_boot: int, rng: np.random.Generator
) -> ConfidenceInterval | None:
    """Percentile CI of the matched-pairs rank-biserial r, resampling items (pairs)."""
    from scipy.stats import rankdata

    d = np.asarray(differences, dtype=float)
    n = d.size
    sample = d[rng.integers(0, n, size=(n_boot, n))]
    ranks = rankdata(np.abs(sample), axis=1)
    # Zeros rank below every non-zero |d|, so dropping them shifts the other ranks by their count.
    zeros = (sample == 0).sum(axis=1, keepdims=True)
    ranks = ranks - zeros
    plus = np.where(sample > 0, ranks, 0).sum(axis=1)
    minus = np.where(sample < 0, ranks, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (plus - minus) / (plus + minus)
    return percentile_ci(r, n)


# --------------------------------------------------------------------------- scipy tests


def mann_whitney(reference: Sequence[float], other: Sequence[float], alternative: str) -> SignificanceTest:
    """scipy.stats.mannwhitneyu(reference, other) with the method scipy's 'auto' would pick, named."""
    from scipy.stats import mannwhitneyu

    ref = np.asarray(reference, dtype=float)
    oth = np.asarray(other, dtype=float)
    ties = np.unique(np.concatenate([ref, oth])).size < ref.size + oth.size
    method = "asymptotic" if (ref.size > 8 and oth.size > 8) or ties else "exact"
    res = mannwhitneyu(ref, oth, alternative=alternative, method=method)
    assumes = "independent ratings (each rating one observation); " + (
        "normal approximation with tie and continuity correction"
        if method == "asymptotic"
        else "exact null distribution (no ties, small samples)"
    )
    return SignificanceTest(
        "mannwhitneyu",
        float(res.statistic),
        float(res.pvalue),
        alternative,
        method,
        int(ref.size),
        int(oth.size),
        rank_biserial_unpaired(ref, oth),
        None,
        assumes,
    )


def wilcoxon_paired(
    reference_means: Sequence[float], other_means: Sequence[float], alternative: str
) -> SignificanceTest:
    """scipy.stats.wilcoxon on per-item mean differences (reference - other), zero_method 'wilcox'."""
    from scipy.stats import wilcoxon

    d = np.round(np.asarray(reference_means, dtype=float) - np.asarray(other_means, dtype=float), DIFFERENCE_DECIMALS)
    n = int(d.size)
    nonzero = d[d != 0]
    has_ties = np.unique(np.abs(nonzero)).size < nonzero.size
    if n > 50:
        method = "asymptotic"
    elif not has_ties and nonzero.size == n:
        method = "exact"
    elif n <= 13:
        method = "permutation"
    else:
        method = "asymptotic"
    assumes = (
        "paired by item: one mean per item and system, differences symmetric about their "
        "median under H0; zero differences dropped (zero_method='wilcox'); "
        + {
            "exact": "exact null distribution",
            "permutation": "exhaustive permutation distribution (ties or zeros, n <= 13)",
            "asymptotic": "normal approximation with tie correction",
        }[method]
    )
    if nonzero.size == 0:
        return SignificanceTest(
            "wilcoxon",
            None,
            None,
            alternative,
            method,
            n,
            n,
            None,
            None,
            assumes,
            note="every item has the same mean for both systems: no test",
        )
    import warnings

    with warnings.catch_warnings():
        # scipy warns about the normal approximation for n < 10 with zeros; the method is reported.
        warnings.simplefilter("ignore", UserWarning)
        res = wilcoxon(d, zero_method="wilcox", alternative=alternative, method="auto")
    return SignificanceTest(
        "wilcoxon",
        float(res.statistic),
        float(res.pvalue),
        alternative,
        method,
        n,
        n,
        rank_biserial_paired(d),
        None,
        assumes,
    )


# --------------------------------------------------------------------------- agreement


def krippendorff_alpha(value_counts: np.ndarray, domain: Sequence[float], level: str) -> float | None:
    """krippendorff.alpha from a (units, values) count matrix; None where alpha is undefined."""
    import krippendorff

    if (value_counts.sum(axis=1) >= 2).sum() == 0:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        value = float(
            krippendorff.alpha(value_counts=value_counts, value_domain=list(domain), level_of_measurement=level)
        )
    return value if math.isfinite(value) else None


def reliability_matrix(rows: Sequence[Rating]) -> tuple[list[str], list[tuple[str, str]], np.ndarray]:
    """(annotators, units, matrix annotators x units with NaN where a unit was not rated)."""
    annotators = sorted({r.annotator for r in rows})
    units = sorted({r.unit for r in rows})
    a_index = {a: i for i, a in enumerate(annotators)}
    u_index = {u: j for j, u in enumerate(units)}
    matrix = np.full((len(annotators), len(units)), np.nan)
    for r in rows:
        matrix[a_index[r.annotator], u_index[r.unit]] = r.value
    return annotators, units, matrix


def agreement(aspect: str, rows: Sequence[Rating], scale: Scale, n_boot: int, seed: int) -> AgreementResult:
    """Krippendorff's alpha of one aspect's ratings (ordinal and interval), with a bootstrap interval
    of the ordinal alpha over items; undefined cases carry their reason instead of a number."""
    annotators, units, matrix = reliability_matrix(rows)
    domain = np.asarray(scale.domain)
    counts = np.stack([(matrix == v).sum(axis=0) for v in domain], axis=1).astype(float)
    pairable = int((counts.sum(axis=1) >= 2).sum())
    base = dict(
        aspect=aspect,
        n_units=len(units),
        n_pairable_units=pairable,
        n_annotators=len(annotators),
        value_domain=tuple(scale.domain),
    )
    if len(annotators) < 2:
        who = annotators[0] if annotators else "nobody"
        return AgreementResult(
            ordinal=None,
            ordinal_ci=None,
            interval=None,
            n_boot_valid=0,
            undefined_reason=f"undefined: only one annotator ({who}) rated this aspect; alpha needs two or more",
            **base,
        )
    if pairable == 0:
        return AgreementResult(
            ordinal=None,
            ordinal_ci=None,
            interval=None,
            n_boot_valid=0,
            undefined_reason="undefined: no text was rated by two or more annotators",
            **base,
        )
    ordinal = krippendorff_alpha(counts, domain, "ordinal")
    interval = krippendorff_alpha(counts, domain, "interval")
    if ordinal is None:
        return AgreementResult(
            ordinal=None,
            ordinal_ci=None,
            interval=None,
            n_boot_valid=0,
            undefined_reason="undefined: all pairable ratings have the same value (no variation to agree on)",
            **base,
        )
    # Resample items, each bringing all of its texts (one per system), as in a new study
    # drawing other prompts.
    items = sorted({u[0] for u in units})
    by_item = defaultdict(list)
    for j, u in enumerate(units):
        by_item[u[0]].append(j)
    rng = seeded_rng(seed, "alpha", aspect)
    replicates = np.empty(n_boot)
    for b in range(n_boot):
        picked = rng.integers(0, len(items), size=len(items))
        columns = [j for i in picked for j in by_item[items[i]]]
        value = krippendorff_alpha(counts[columns], domain, "ordinal")
        replicates[b] = np.nan if value is None else value
    valid = int(np.isfinite(replicates).sum())
    return AgreementResult(
        ordinal=ordinal, ordinal_ci=percentile_ci(replicates, len(items)), interval=interval, n_boot_valid=valid, **base
    )


# --------------------------------------------------------------------------- design


def detect_design(
    reference_items: set[str], other_items: set[str], reference: str, other: str, forced: str = "auto"
) -> Design:
    """Paired when every item was rated for both systems; a forced design is stated as forced."""
    common = reference_items & other_items
    counts = (len(common), len(reference_items), len(other_items))
    if forced == "paired":
        return Design(
            "paired",
            *counts,
            f"paired (forced by --design): the {len(common)} items rated for both "
            f"{reference!r} and {other!r} are compared item by item",
        )
    if forced == "unpaired":
        return Design(
            "unpaired", *counts, f"unpaired (forced by --design); {len(common)} items were rated for both systems"
        )
    if common and reference_items == other_items:
        return Design(
            "paired", *counts, f"paired: all {len(common)} items were rated for both {reference!r} and {other!r}"
        )
    if not common:
        return Design(
            "unpaired",
            *counts,
            f"unpaired: no item was rated for both {reference!r} "
            f"({len(reference_items)} items) and {other!r} ({len(other_items)} items)",
        )
    return Design(
        "unpaired",
        *counts,
        f"unpaired: only {len(common)} of the items were rated for both "
        f"{reference!r} ({len(reference_items)} items) and {other!r} "
        f"({len(other_items)} items); --design paired would use those",
    )
