"""Verdict rules of a reproduction, the combination of folds, the summary of a claim's correlated
scores and the multiplicity step.

The rules are stated once, in ``RULES``, which every report prints in its "Verdict rules" section;
every other place (docs/reproductions.md, the report's modules) points there. ``decide`` is those
rules for one interval, ``aggregate`` for a cell with several competitors (an intersection-union
test), ``deciding_p`` and ``holm_step`` the multiplicity step, ``combine_folds``, ``summarise``,
``ratio_interval`` and ``step_ratio_interval`` the estimates the rules judge (each docstring gives
its math), ``best_epoch`` which epoch a trained head keeps. ``judge.py`` applies them to a paper's
cells; each claim kind (``claims/``) says on which scale its intervals are judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import norm, t

from maxbench.multiple_testing import holm

REPRODUCED = "reproduced"
SMALLER = "reproduced, smaller than claimed"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
LARGER = "larger than claimed"
NOT_COMPARABLE = "not comparable"
VERDICTS = (REPRODUCED, SMALLER, LARGER, NOT_REPRODUCED, INCONCLUSIVE, NOT_COMPARABLE)

#: the negligible band on the relative scale: +-1% of maxbench's baseline
NEGLIGIBLE = 0.01
#: the negligible band of a correlation claim (judged on r itself): |r| below 0.1
NEGLIGIBLE_R = 0.1
LEVEL = 0.95
ALPHA = 0.05
#: a cell resting on fewer prompts than this (over all its folds) is labelled "few prompts"
FEW_PROMPTS = 30
#: folds below this are combined by fixed effects: a random-effects model needs at least this many
MIN_RANDOM_EFFECTS_FOLDS = 3

#: the verdict rules, stated once: every report prints them, and everything else points here
RULES = (
    "Each claim x base model x corpus is one cell with one verdict, decided on the 95% interval "
    "of maxbench's relative effect, method / baseline - 1, against the paper's (method - baseline) / baseline: "
    "absolute numbers of the paper's models do not compare with SmolLM2's or Gemma's, relative sizes can. "
    "The relative effect is estimated on the log-ratio scale from the per-prompt data of each fold, so its "
    "interval never leaves (-100%, +inf): for a score that is a mean of per-prompt values, the paired "
    "percentile bootstrap over prompts of the ratio of the two systems' means; for any other score (corpus BLEU, "
    "Distinct, MS-Jaccard, perplexity), the delta method on log(method) - log(baseline) with the variances of "
    "both systems' scores and of their paired difference (each from its bootstrap or jackknife over the same "
    "prompts), never a difference divided by a fixed baseline. "
    "Reproduced: the interval excludes 0 on the paper's side and reaches the "
    "paper's effect. Reproduced, smaller than claimed: it excludes 0 on the paper's side but lies below the "
    "paper's effect. Larger than claimed: a cost claim (a price the paper says its method pays, such as "
    "perplexity; `cost = true` in the paper file) whose interval excludes 0 on the paper's side and lies beyond "
    "the paper's effect: the method pays more than the paper says, counted apart from reproduced. Not "
    "reproduced: it excludes 0 on the other side, or lies inside the negligible band of "
    f"+-{100 * NEGLIGIBLE:g}% of the baseline, or contains 0 but excludes the paper's effect (no effect of the "
    "claimed size). Inconclusive: it contains both 0 and the paper's effect. Not comparable: the protocol "
    "cannot run here, the cell's baseline (a control) is not measured, or the quantity depends on things "
    "outside the method, such as hardware. Where the "
    "paper's own effect lies inside the band, or the paper prints no number (a figure), only the sign is "
    "judged. A correlation claim is judged on r with a band of "
    f"|r| < {NEGLIGIBLE_R:g}. Folds are combined on the log-ratio scale: with {MIN_RANDOM_EFFECTS_FOLDS} folds "
    "or more by a random-effects meta-analysis (DerSimonian-Laird between-fold variance, "
    "Hartung-Knapp-Sidik-Jonkman interval, t with K - 1 degrees of freedom, its variance never below the "
    f"fixed-effect one); with fewer than {MIN_RANDOM_EFFECTS_FOLDS} folds (a between-fold variance cannot be "
    "estimated from two) by the fixed-effect inverse-variance mean with a normal interval, which treats the "
    "folds' prompts as one pool; one fold keeps its own interval. The correlated scores of one claim "
    "(BLEU-2..5, Distinct-1..3, MS-Jaccard-1..3) are summarised "
    "into one estimate, the mean of their log-ratios with the mean of their standard errors (a "
    "bound whatever their correlation), and the paper's effect is the mean of its relative effects; each "
    "score is still shown. A claim that a method is best among several competitors is reproduced only "
    "against each of them (intersection-union test). Error control, both ways: Holm's step-down correction "
    "over the paper's counted cells (p-values from each cell's estimate and standard error; a cell resting on "
    "one score and one fold whose per-prompt values are 0 or 1 for both systems, a rate such as rep, enters "
    "with the exact McNemar p-value of its paired values instead, the exact paired permutation test of the "
    "same null for such data, not a normal approximation) controls the "
    f"family-wise error of 'differs from 0' at {ALPHA:g}: a cell whose adjusted p-value is not below {ALPHA:g} "
    "is judged as if its interval contained 0; and every other statement a verdict makes about an interval "
    "(it lies below or beyond the paper's effect, excludes it, or lies inside the negligible band: the "
    "grounds of 'not reproduced', 'smaller than claimed' and 'larger than claimed') is made on the "
    f"Bonferroni-widened interval of level 1 - {ALPHA:g}/m, m the comparisons in the same family, so that those "
    f"statements too hold together with probability at least {1 - ALPHA:g}; the table shows the 95% interval and "
    "the reason gives the widened one where it decided. Diagnostics and sensitivity settings, outside the "
    "family, are judged on their 95% intervals. "
    f"A cell resting on fewer than {FEW_PROMPTS} prompts is labelled 'few prompts'. A trained head (KerBS, POSG) "
    "is judged by its recorded training history (validation perplexity and training loss per epoch, from the "
    "head's fit meta): a method head whose best validation epoch is 0 (training never beat its initialisation, "
    "which is not the base softmax: a KerBS head's extra senses start dormant, not absent) never counts as "
    "reproduced; a head whose history is not recorded is labelled so (its training cannot be checked); a head "
    "whose validation perplexity still fell at its last epoch is labelled 'still improving'; and a cell states "
    "its heads' budget (training tokens, epochs, learning rate) where recorded: its conclusion holds for that "
    "budget. A claim whose baseline is a control (KerBS against its fine-tuned softmax) is not comparable in a "
    "cell where the control is not measured, never judged against another baseline instead. Identical rows are "
    "shown once, and a cell repeating another cell's evidence (the same comparisons of the same scores with the "
    "same numbers, two systems that generated the same texts being one) is counted once: outside Holm's family, "
    "decided as that cell. "
    "The headline counts are counts of claims and of cells, never of rows."
)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    why: str


@dataclass(frozen=True)
class Estimate:
    """One difference with its interval, standard error and degrees of freedom (None: normal)."""

    estimate: float | None
    low: float | None
    high: float | None
    se: float | None = None
    df: float | None = None
    n_folds: int = 0
    method: str = ""
    #: a relative effect estimated on the log-ratio scale: estimate, low and high are ratio - 1,
    #: se and df are those of log(ratio)
    log: bool = False
    #: the p-value of 'no difference' from an exact test of the same paired data (``mcnemar_p``), which
    #: ``p_value`` gives instead of the normal approximation from estimate / se
    exact_p: float | None = None

    @property
    def centre(self) -> float | None:
        """The estimate on the scale its se is on (log(1 + estimate) for a log-ratio estimate)."""
        if self.estimate is None:
            return None
        return math.log1p(self.estimate) if self.log else self.estimate

    @property
    def defined(self) -> bool:
        vals = (self.estimate, self.low, self.high)
        return all(v is not None and math.isfinite(v) for v in vals)

    @property
    def p_value(self) -> float | None:
        """Two-sided p-value of 'no difference': the exact test's where there is one (``exact_p``), else
        from estimate / se (t with df, else normal)."""
        if not self.defined:
            return None
        if self.exact_p is not None:
            return self.exact_p
        if self.se is None or not math.isfinite(self.se):
            return None
        if self.se <= 0:
            return 1.0 if self.estimate == 0 else 0.0
        z = abs(self.centre) / self.se
        return float(2 * (t.sf(z, self.df) if self.df else norm.sf(z)))

    def widened(self, level: float) -> tuple[float | None, float | None]:
        """The interval at ``level`` (a Bonferroni-widened level, 1 - alpha / m): estimate +- q se on the
        scale of se (the log-ratio scale for a log estimate), never narrower than the interval itself.
        An estimate without se keeps its interval."""
        if not self.defined or self.se is None or not math.isfinite(self.se) or level <= LEVEL:
            return self.low, self.high
        h = _quantile(self.df, level) * self.se
        c = self.centre
        lo, hi = (math.expm1(c - h), math.expm1(c + h)) if self.log else (c - h, c + h)
        return min(lo, self.low), max(hi, self.high)

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (e.g. divided by a baseline: factor 1 / b > 0)."""
        if self.log:
            raise ValueError("a log-ratio estimate is not rescaled")
        if not self.defined:
            return Estimate(None, None, None, None, self.df, self.n_folds, self.method)
        lo, hi = sorted((self.low * factor, self.high * factor))
        se = None if self.se is None else self.se * abs(factor)
        return Estimate(self.estimate * factor, lo, hi, se, self.df, self.n_folds, self.method)


def _quantile(df: float | None, level: float = LEVEL) -> float:
    return float(t.ppf(0.5 + level / 2, df) if df else norm.ppf(0.5 + level / 2))


def combine_folds(diffs: list[tuple[float | None, float | None, float | None]], level: float = LEVEL) -> Estimate:
    """Per-fold (difference, ci_low, ci_high) -> one estimate over folds with its interval.

    One fold keeps its own (paired percentile-bootstrap) interval, with se = width / (2 z). Several
    folds are combined by fixed effects below ``MIN_RANDOM_EFFECTS_FOLDS`` (the inverse-variance mean
    y_w = sum w_k y_k / sum w_k, se = 1 / sqrt(sum w_k), a normal interval: two folds cannot estimate a
    between-fold variance, and a t with one degree of freedom gives intervals wider than any scale),
    else by a random-effects meta-analysis: each fold's within-fold variance
    v_k = (width_k / 2z)^2; the DerSimonian-Laird between-fold variance
    tau^2 = max(0, (Q - (K - 1)) / (S1 - S2 / S1)) with w_k = 1 / v_k, Q = sum w_k (y_k - y_w)^2;
    weights w*_k = 1 / (v_k + tau^2), mu = sum w*_k y_k / sum w*_k; the Hartung-Knapp-Sidik-Jonkman
    variance sum w*_k (y_k - mu)^2 / ((K - 1) sum w*_k), never below 1 / sum w*_k (the modified
    Knapp-Hartung rule), and mu +- t_{K-1} se. A fold without a difference or an interval makes
    the result undefined."""
    z = norm.ppf(0.5 + level / 2)
    if not diffs:
        return Estimate(None, None, None, None, None, 0, "no folds")
    if any(d is None or lo is None or hi is None for d, lo, hi in diffs):
        return Estimate(None, None, None, None, None, len(diffs), "a fold has no difference or interval")
    if len(diffs) == 1:
        d, lo, hi = diffs[0]
        return Estimate(d, lo, hi, (hi - lo) / (2 * z), None, 1, "one fold: its paired percentile-bootstrap interval")
    k = len(diffs)
    ys = [d for d, _, _ in diffs]
    vs = [((hi - lo) / (2 * z)) ** 2 for _, lo, hi in diffs]
    if any(v <= 0 for v in vs):  # a fold with a zero-width interval: the folds' own spread only
        vs = [max(v, 1e-300) for v in vs]
    w = [1 / v for v in vs]
    s1, s2 = sum(w), sum(x * x for x in w)
    y_fixed = sum(wi * yi for wi, yi in zip(w, ys)) / s1
    if k < MIN_RANDOM_EFFECTS_FOLDS:  # no between-fold variance from two folds: fixed effects
        se = math.sqrt(1 / s1)
        return Estimate(
            y_fixed,
            y_fixed - z * se,
            y_fixed + z * se,
            se,
            None,
            k,
            f"fixed effect over {k} folds (inverse-variance mean, normal interval; fewer than "
            f"{MIN_RANDOM_EFFECTS_FOLDS} folds: no random-effects model)",
        )
    q = sum(wi * (yi - y_fixed) ** 2 for wi, yi in zip(w, ys))
    c = s1 - s2 / s1
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    ws = [1 / (v + tau2) for v in vs]
    sw = sum(ws)
    mu = sum(wi * yi for wi, yi in zip(ws, ys)) / sw
    var_hk = sum(wi * (yi - mu) ** 2 for wi, yi in zip(ws, ys)) / ((k - 1) * sw)
    se = math.sqrt(max(var_hk, 1 / sw))
    h = _quantile(k - 1, level) * se
    return Estimate(
        mu,
        mu - h,
        mu + h,
        se,
        k - 1,
        k,
        f"random effects over {k} folds (DerSimonian-Laird tau^2 = {tau2:.3g}, Hartung-Knapp-Sidik-Jonkman t_{k - 1})",
    )


def summarise(estimates: list[Estimate], level: float = LEVEL) -> Estimate:
    """Correlated scores of one claim (e.g. BLEU-2..5 of the same texts) -> one estimate: the mean,
    with the mean of their standard errors (the standard error of a mean of correlated estimates is
    at most the mean of theirs, whatever the correlation) and the smallest degrees of freedom. One
    estimate is returned as it is."""
    if len(estimates) == 1:
        return estimates[0]
    if not estimates or not all(e.defined and e.se is not None for e in estimates):
        return Estimate(
            None,
            None,
            None,
            None,
            None,
            max((e.n_folds for e in estimates), default=0),
            "undefined",
            log=any(e.log for e in estimates),
        )
    log = estimates[0].log
    if any(e.log != log for e in estimates):
        raise ValueError("summarise: log-ratio and plain estimates mixed")
    m = sum(e.centre for e in estimates) / len(estimates)
    se = sum(e.se for e in estimates) / len(estimates)
    dfs = [e.df for e in estimates]
    df = None if any(d is None for d in dfs) else min(dfs)
    h = _quantile(df, level) * se
    how = f"mean of {len(estimates)} scores" + (" on the log-ratio scale" if log else "") + ", se the mean of theirs"
    if log:
        return Estimate(
            math.expm1(m), math.expm1(m - h), math.expm1(m + h), se, df, max(e.n_folds for e in estimates), how, True
        )
    return Estimate(m, m - h, m + h, se, df, max(e.n_folds for e in estimates), how)


def relative(log_est: Estimate) -> Estimate:
    """A log-ratio estimate (log(method / baseline), its interval, se and df) on the relative scale:
    ratio - 1 for the estimate and both ends (exp(x) - 1, so the interval lies in (-100%, +inf)), se and
    df kept on the log scale (``log=True``)."""
    if not log_est.defined:
        return Estimate(None, None, None, None, log_est.df, log_est.n_folds, log_est.method, True)
    return Estimate(
        math.expm1(log_est.estimate),
        math.expm1(log_est.low),
        math.expm1(log_est.high),
        log_est.se,
        log_est.df,
        log_est.n_folds,
        log_est.method,
        True,
    )


def mcnemar_p(a: list[float], b: list[float]) -> float | None:
    """The exact two-sided McNemar p-value of paired 0/1 outcomes (one text per prompt: a rate such as
    rep's share of texts with a repetition): under 'no difference' each discordant pair (1, 0) or
    (0, 1) is either with probability 1/2, so the count of (1, 0) among the n discordant pairs is
    Binomial(n, 1/2) (the paired permutation test's distribution for 0/1 data, computed exactly);
    1 without discordant pairs. None unless every value of both is 0 or 1 and they pair up."""
    from scipy.stats import binomtest

    if len(a) != len(b) or not a or any(v not in (0, 1) for v in (*a, *b)):
        return None
    n10 = sum(1 for x, y in zip(a, b) if x == 1 and y == 0)
    n01 = sum(1 for x, y in zip(a, b) if x == 0 and y == 1)
    return 1.0 if n10 + n01 == 0 else float(binomtest(n10, n10 + n01, 0.5).pvalue)


def log_ratio_bootstrap(
    a: list[float], b: list[float], n_resamples: int = 1000, seed: int = 0, level: float = LEVEL
) -> tuple[float, float, float] | None:
    """log(mean a / mean b) of paired per-prompt values and its paired percentile-bootstrap interval
    (prompts resampled with replacement, the same for both systems): the ratio of the resampled means,
    its percentiles, logged. None where a mean is not positive or a percentile of the ratio is 0."""
    import numpy as np

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or x.size != y.size or x.mean() <= 0 or y.mean() <= 0:
        return None
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = x[idx].mean(axis=1) / y[idx].mean(axis=1)
    ratios = ratios[np.isfinite(ratios)]
    if not ratios.size:
        return None
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    if lo <= 0:
        return None
    return math.log(x.mean() / y.mean()), math.log(float(lo)), math.log(float(hi))


def log_ratio_delta(
    a: tuple[float, float, float], b: tuple[float, float, float], diff: tuple[float, float, float], level: float = LEVEL
) -> tuple[float, float, float] | None:
    """log(a / b) and its normal interval by the delta method, from each system's (value, ci_low,
    ci_high) and their paired difference's (d, ci_low, ci_high) over the same prompts: each se =
    width / 2z, cov(a, b) = (se_a^2 + se_b^2 - se_d^2) / 2, var log(a / b) = se_a^2 / a^2 + se_b^2 / b^2 -
    2 cov / (a b), never below se_d^2 / max(a, b)^2 (the variance when both move together). None where a
    value is not positive or an interval is missing."""
    z = norm.ppf(0.5 + level / 2)
    if any(v is None or not math.isfinite(v) for v in (*a, *b, *diff)):
        return None
    (ma, la, ha), (mb, lb, hb), (_, ld, hd) = a, b, diff
    if ma <= 0 or mb <= 0:
        return None
    sa, sb, sd = (ha - la) / (2 * z), (hb - lb) / (2 * z), (hd - ld) / (2 * z)
    cov = (sa**2 + sb**2 - sd**2) / 2
    var = sa**2 / ma**2 + sb**2 / mb**2 - 2 * cov / (ma * mb)
    var = max(var, sd**2 / max(ma, mb) ** 2)
    c, h = math.log(ma / mb), z * math.sqrt(var)
    return c, c - h, c + h


def ratio_interval(ratios: list[float | None], level: float = LEVEL) -> Estimate:
    """A ratio measured once per fold (e.g. time per token) -> its geometric mean and a t interval
    over folds (on the log scale, so the interval stays positive); fewer than two folds give no
    interval."""
    good = [r for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    if len(good) < 2:
        return Estimate(
            good[0] if good else None, None, None, None, None, len(good), "fewer than two folds: no interval"
        )
    logs = [math.log(r) for r in good]
    k = len(logs)
    m = sum(logs) / k
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (k - 1))
    h = _quantile(k - 1, level) * sd / math.sqrt(k)
    return Estimate(
        math.exp(m),
        math.exp(m - h),
        math.exp(m + h),
        None,
        k - 1,
        k,
        f"geometric mean over {k} folds, t interval on the log scale",
    )


def step_ratio_interval(a: list[float], b: list[float], level: float = LEVEL) -> Estimate:
    """The ratio of two mean costs measured per step (an adapter's CPU seconds per training step,
    ``a`` against ``b``) with a t interval on the log scale: the delta method's standard error of
    log(mean a) - log(mean b), Welch-Satterthwaite degrees of freedom. Fewer than two steps on
    either side give no interval."""
    a = [x for x in a if x is not None and math.isfinite(x)]
    b = [x for x in b if x is not None and math.isfinite(x)]
    if not a or not b or sum(a) <= 0 or sum(b) <= 0:
        return Estimate(None, None, None, None, None, 0, "no step times")
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    ratio = ma / mb
    if len(a) < 2 or len(b) < 2:
        return Estimate(ratio, None, None, None, None, 1, "fewer than two steps: no interval")
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / (len(a) * ma**2)  # var of log(mean a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / (len(b) * mb**2)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0) + (vb**2 / (len(b) - 1) if vb else 0) or 1e-300)
    h = _quantile(df, level) * se
    return Estimate(
        ratio,
        ratio * math.exp(-h),
        ratio * math.exp(h),
        None,
        df,
        1,
        f"ratio of mean CPU seconds per step over {len(a)} and {len(b)} steps, t interval on the log scale "
        "(delta method, Welch df)",
    )


def _pct(x: float, scale: str) -> str:
    return f"{x:+.3g}" if scale == "r" else f"{100 * x:+.3g}%"


def _interval_text(lo: float, hi: float, scale: str) -> str:
    return f"[{_pct(lo, scale)}, {_pct(hi, scale)}]"


def decide(
    direction: str,
    low: float | None,
    high: float | None,
    paper_effect: float | None = None,
    band: float = NEGLIGIBLE,
    significant: bool = True,
    runnable: bool = True,
    hardware: bool = False,
    reason: str = "",
    scale: str = "%",
    wide: tuple[float | None, float | None] | None = None,
    cost: bool = False,
) -> Verdict:
    """The verdict of one interval (the rules of ``RULES``), on the relative scale (``scale``
    "%": fractions of the baseline; "r": a correlation). ``paper_effect`` is the paper's effect on
    the same scale (None: the paper gives no size); ``significant=False`` (Holm's step did not
    reject 'no difference') judges the interval as if it contained 0. ``wide`` is the interval
    widened for the family (``Estimate.widened``): every statement about the paper's effect and the
    negligible band is made on it (None: the interval itself). ``cost``: a cost claim, whose interval
    beyond the paper's effect is 'larger than claimed'."""
    if not runnable:
        return Verdict(NOT_COMPARABLE, reason or "the protocol cannot run here")
    if hardware:
        return Verdict(NOT_COMPARABLE, reason or "the quantity depends on hardware and implementation, not the method")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return Verdict(NOT_COMPARABLE, reason or "no interval: the score is undefined here")
    s = 1 if direction == "higher" else -1
    lo, hi = sorted((s * low, s * high))  # the paper's side is positive
    w = wide if wide is not None and None not in wide else (low, high)
    widened = w != (low, high)
    wlo, whi = sorted((s * w[0], s * w[1]))
    on = f" (its family-widened interval {_interval_text(w[0], w[1], scale)})" if widened else ""
    effect = None if paper_effect is None else s * paper_effect
    band_txt = f"+-{_pct(band, scale)[1:]}"
    paper_in_band = effect is not None and abs(effect) <= band
    size = effect is not None and not paper_in_band
    eff = "" if effect is None else _pct(s * effect, scale)
    sign_note = (
        f"; the paper's effect {eff} lies inside the negligible band {band_txt}, so the sign alone is judged"
        if paper_in_band
        else ("; the paper gives no size, so the sign alone is judged" if effect is None else "")
    )
    if not paper_in_band and -band <= wlo and whi <= band:
        return Verdict(NOT_REPRODUCED, f"the interval lies inside the negligible band {band_txt}{on}")
    if significant and lo > 0:
        if size and whi < effect:
            return Verdict(
                SMALLER, f"the interval excludes 0 on the paper's side but lies below the paper's effect {eff}{on}"
            )
        if size and cost and wlo > effect:
            return Verdict(
                LARGER,
                f"a cost: the interval excludes 0 on the paper's side and lies beyond the paper's effect {eff}{on}: "
                "the method pays more than the paper says",
            )
        if size:
            return Verdict(
                REPRODUCED, f"the interval excludes 0 on the paper's side and reaches the paper's effect {eff}"
            )
        return Verdict(REPRODUCED, "the interval excludes 0 on the paper's side" + sign_note)
    if significant and hi < 0:
        return Verdict(NOT_REPRODUCED, "the interval excludes 0 on the other side: the opposite sign")
    held = not significant and (lo > 0 or hi < 0)
    zero = (
        "the interval excludes 0 but not after Holm's step, so it counts as containing 0"
        if held
        else "the interval contains 0"
    )
    if size and whi < effect:
        return Verdict(
            NOT_REPRODUCED, f"{zero}, and it excludes the paper's effect {eff}{on}: no effect of the claimed size"
        )
    if size and wlo > effect:  # only an interval Holm's step held back can lie above the effect
        return Verdict(INCONCLUSIVE, f"{zero}; it lies beyond the paper's effect {eff}{on}")
    if size:
        return Verdict(INCONCLUSIVE, f"{zero}; it also contains the paper's effect {eff}{on}")
    return Verdict(INCONCLUSIVE, zero + sign_note)


def aggregate(parts: list[tuple[str, Verdict]]) -> Verdict:
    """One cell from its comparisons with several competitors (a 'best among' claim: an
    intersection-union test): not reproduced if against any one; larger than claimed (a cost) if
    against any one; reproduced only if against every one; otherwise the weakest of them."""
    if len(parts) == 1:
        return parts[0][1]
    verdicts = [v.verdict for _, v in parts]

    def named(kind: str) -> str:
        return "; ".join(f"vs {name}: {v.why}" for name, v in parts if v.verdict == kind)

    for kind in (NOT_COMPARABLE, NOT_REPRODUCED, LARGER):
        if kind in verdicts:
            return Verdict(kind, named(kind))
    if all(v == REPRODUCED for v in verdicts):
        return Verdict(REPRODUCED, "against every competitor: " + "; ".join(f"vs {n}" for n, _ in parts))
    if INCONCLUSIVE in verdicts:
        return Verdict(INCONCLUSIVE, named(INCONCLUSIVE))
    return Verdict(SMALLER, named(SMALLER))


def deciding_p(parts: list[tuple[Verdict, float | None]]) -> float | None:
    """The p-value a cell enters Holm's step with: that of the comparison deciding it (the smallest
    among comparisons on the other side when there are some, else the largest: the
    intersection-union test's)."""
    other = [p for v, p in parts if v.verdict == NOT_REPRODUCED and "other side" in v.why and p is not None]
    if other:
        return min(other)
    ps = [p for _, p in parts]
    if not ps or any(p is None for p in ps):
        return None
    return max(ps)


def family_level(m: int, alpha: float = ALPHA) -> float:
    """The Bonferroni level of each interval of a family of ``m`` comparisons: 1 - alpha / m (at least
    the report's level), so that the m intervals cover together with probability at least 1 - alpha."""
    return max(LEVEL, 1 - alpha / max(m, 1))


def holm_step(pvalues: list[float | None], alpha: float = ALPHA) -> tuple[list[float | None], list[bool]]:
    """Holm-adjusted p-values of a paper's counted cells and whether each rejects 'no difference'."""
    adjusted = holm(pvalues)
    return adjusted, [p is not None and p < alpha for p in adjusted]


def best_epoch(history: list[dict]) -> int | None:
    """The epoch a head keeps: the first with the lowest validation perplexity (epoch 0: untrained)."""
    if not history:
        return None
    best = min(range(len(history)), key=lambda i: (history[i]["valid_ppl"], i))
    return int(history[best].get("epoch", best))
