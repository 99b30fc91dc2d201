"""From long-format ratings to an Analysis: study selection, scales, exclusions, then per aspect
the descriptive statistics, the tests against the reference and the agreement.

The parts live in their own modules: reading and validating ratings in ``human_eval/analysis/ratings.py``,
the statistics in ``human_eval/analysis/statistics.py`` (with the conventions every table follows), the
result objects in ``human_eval/analysis/results.py``. This module decides what is computed on which rows
and collects the warnings a reader must see.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis.best_worst import BestWorst, bws_agreement, counting_scores
from maxbench.human_eval.analysis.direct import z_scores
from maxbench.human_eval.analysis.options import ReportOptions
from maxbench.human_eval.analysis.pairwise import PairJudgment, bradley_terry, pairwise_agreement, sign_tests
from maxbench.human_eval.analysis.ratings import Rating, Ratings, StudyProgress, failing_annotators
from maxbench.human_eval.analysis.results import (
    Analysis,
    AnnotatorSummary,
    BestWorstAnalysis,
    BestWorstAspect,
    Comparison,
    Descriptive,
    Exclusions,
    PairwiseAnalysis,
    PairwiseAspect,
    Scale,
)
from maxbench.human_eval.analysis.statistics import (
    DIFFERENCE_DECIMALS,
    agreement,
    bootstrap_rank_biserial_paired,
    bootstrap_rank_biserial_unpaired,
    detect_design,
    mann_whitney,
    seeded_rng,
    wilcoxon_paired,
)
from maxbench.multiple_testing import holm

# --------------------------------------------------------------------------- the analysis


def analyse(ratings: Ratings, options: ReportOptions) -> Analysis:
    warnings: list[str] = []
    rows = list(ratings.rows)
    if not rows:
        raise MaxbenchError(f"{ratings.source} holds no ratings; nothing to report")
    rows, study = _select_study(rows, ratings.source, options.study)
    progress = ratings.progress
    if progress is not None and not progress.complete:
        warnings.append(_incomplete_text(progress))
    aspects = tuple(dict.fromkeys(r.criterion for r in rows))
    scales = _scales(rows, aspects, options.scale, ratings.source, warnings)
    _check_values(rows, scales, ratings.source)
    _check_duplicates(rows, ratings.source)

    if options.exclude_gold_below is not None and ratings.gold is None:
        raise MaxbenchError(
            f"--exclude-gold-below: {ratings.source} has no gold items (gold accuracy is in the rating "
            "database: use --study ID on a study created with --gold-items)"
        )
    kept, exclusions = _exclude(rows, options, failing_annotators(ratings.gold, options.exclude_gold_below))
    other_flags = Counter(f for r in rows for f in r.flags if f not in options.exclude_flags)
    for flag, n in sorted(other_flags.items()):
        warnings.append(
            f"{n} kept row(s) carry the flag {flag!r}, which is not excluded (exclude them with --exclude-flag {flag})"
        )
    if not kept:
        raise MaxbenchError(
            f"no ratings are left after the exclusions ({_exclusion_text(exclusions)}); "
            "relax --min-seconds, --exclude-flag or --exclude-gold-below"
        )

    all_systems = sorted({r.system for r in rows})
    reference, reference_rule = _choose_reference(all_systems, options.reference, ratings, warnings)
    systems = tuple([reference] + [s for s in all_systems if s != reference]) if reference else tuple(all_systems)
    if len(systems) == 1:
        warnings.append(f"only one system ({systems[0]}) was rated: no comparisons")
    if reference is not None and not any(r.system == reference for r in kept):
        raise MaxbenchError(
            f"reference system {reference!r} has no ratings left after the exclusions "
            f"({_exclusion_text(exclusions)}); nothing to compare against"
        )

    by_aspect: dict[str, list[Rating]] = defaultdict(list)
    for r in kept:
        by_aspect[r.criterion].append(r)
    descriptives, comparisons, agreements = [], [], []
    for aspect in aspects:
        aspect_rows = by_aspect.get(aspect, [])
        scale = scales[aspect]
        for system in systems:
            descriptives.append(_describe(aspect, system, [r for r in aspect_rows if r.system == system], scale))
            if descriptives[-1].n == 0:
                warnings.append(
                    f"system {system!r} has no ratings for aspect {aspect!r}"
                    + (
                        " after the exclusions"
                        if any(r.system == system and r.criterion == aspect for r in rows)
                        else ""
                    )
                )
        if reference is not None:
            tested_rows, tested_scale = aspect_rows, scale
            if options.z_scores:
                tested_rows, tested_scale = _standardised(aspect, aspect_rows, warnings)
            comparisons.extend(
                _compare_aspect(aspect, tested_rows, reference, systems[1:], tested_scale, options, warnings)
            )
        agreements.append(agreement(aspect, aspect_rows, scale, options.n_boot, options.seed))
    for a in agreements:
        if a.undefined_reason:
            warnings.append(f"Krippendorff's alpha for {a.aspect!r} is {a.undefined_reason}")

    annotators, units_label = _annotator_summaries(rows, kept, scales, options.exclude_flags)
    gold = {g.annotator: g for g in ratings.gold or ()}
    annotators = tuple(
        replace(x, gold_correct=gold[x.annotator].correct, gold_n=gold[x.annotator].n) if x.annotator in gold else x
        for x in annotators
    )
    return Analysis(
        source=ratings.source,
        sha256=ratings.sha256,
        sha256_of=ratings.sha256_of,
        study=study,
        progress=progress,
        options=options,
        reference=reference,
        reference_rule=reference_rule,
        systems=systems,
        aspects=aspects,
        scales=scales,
        exclusions=exclusions,
        descriptives=tuple(descriptives),
        comparisons=tuple(comparisons),
        agreement=tuple(agreements),
        annotators=annotators,
        annotator_units=units_label,
        warnings=tuple(warnings),
    )


def _choose_reference(
    systems: Sequence[str], asked: str | None, ratings: Ratings, warnings: list[str]
) -> tuple[str | None, str]:
    """The reference system and how it was chosen: --reference, else the run's baseline recorded
    with the study, else the first system by name (said in a warning)."""
    if asked is not None:
        if asked not in systems:
            raise MaxbenchError(
                f"reference system {asked!r} has no ratings in {ratings.source}; systems present: {', '.join(systems)}"
            )
        return asked, "given with --reference"
    if len(systems) < 2:
        return None, "none: a single system"
    if ratings.baseline in systems:
        return ratings.baseline, "the run's baseline, recorded when the study was created"
    if ratings.baseline is not None:
        warnings.append(f"the run's baseline {ratings.baseline!r} has no ratings in {ratings.source}")
    warnings.append(f"no --reference given: comparing against {systems[0]!r}, the first system by name")
    return systems[0], "the first system by name"


def _incomplete_text(p: StudyProgress) -> str:
    unrated = p.texts_assigned - p.texts_rated
    stopped = f", {p.texts_unrated_stopped} of them by stopped annotators" if p.texts_unrated_stopped else ""
    state = "closed" if p.closed else "open"
    return (
        f"incomplete study ({state}): {p.texts_rated} of {p.texts_assigned} assigned texts are rated "
        f"({unrated} unrated{stopped}); every number below covers the rated texts only"
    )


def _select_study(rows: list[Rating], source: str, study: str | None) -> tuple[list[Rating], str]:
    studies = sorted({r.study for r in rows})
    if study is not None:
        chosen = [r for r in rows if r.study == study]
        if not chosen:
            raise MaxbenchError(f"{source} holds no ratings of study {study!r}; studies present: {', '.join(studies)}")
        return chosen, study
    if len(studies) > 1:
        raise MaxbenchError(
            f"{source} holds {len(studies)} studies ({', '.join(studies)}); pick one with --select-study ID"
        )
    return rows, studies[0]


def _scales(
    rows: list[Rating], aspects: Sequence[str], forced: tuple[float, float] | None, source: str, warnings: list[str]
) -> dict[str, Scale]:
    scales = {}
    for aspect in aspects:
        aspect_rows = [r for r in rows if r.criterion == aspect]
        declared = sorted(
            {(r.scale_min, r.scale_max) for r in aspect_rows if r.scale_min is not None or r.scale_max is not None},
            key=lambda s: (s[0] is None, s[0] or 0, s[1] is None, s[1] or 0),
        )
        if any(low is None or high is None for low, high in declared):
            raise MaxbenchError(
                f"aspect {aspect!r} in {source} has scale_min without scale_max (or the reverse); "
                "fill both or pass --scale MIN:MAX"
            )
        if forced is not None:
            low, high = forced
            how = "--scale"
            if declared and declared != [forced]:
                warnings.append(
                    f"--scale {low:g}:{high:g} overrides the scale columns of {aspect!r} "
                    f"({', '.join(f'{a:g}-{b:g}' for a, b in declared)})"
                )
        elif len(declared) > 1:
            raise MaxbenchError(
                f"aspect {aspect!r} mixes scales {', '.join(f'{a:g}-{b:g}' for a, b in declared)} "
                f"in {source}; ratings on different scales cannot be pooled: split the aspect "
                "or pass --scale MIN:MAX"
            )
        elif declared:
            (low, high), how = declared[0], "scale columns"
            if not low < high:
                raise MaxbenchError(f"aspect {aspect!r} declares the empty scale {low:g}-{high:g} in {source}")
        else:
            values = [r.value for r in aspect_rows if r.value is not None]
            if not values:
                raise MaxbenchError(f"aspect {aspect!r} has no rating values in {source}; nothing to analyse")
            low, high, how = min(values), max(values), "observed values"
            warnings.append(
                f"no scale given for {aspect!r}: using the observed range {low:g}-{high:g} "
                "(pass --scale MIN:MAX or fill scale_min/scale_max)"
            )
            if low == high:
                raise MaxbenchError(
                    f"aspect {aspect!r} has only the value {low:g} and no declared scale; pass --scale MIN:MAX"
                )
        values = sorted({r.value for r in aspect_rows if r.value is not None})
        if float(low).is_integer() and float(high).is_integer() and all(float(v).is_integer() for v in values):
            domain = tuple(float(v) for v in range(int(low), int(high) + 1))
        else:
            domain = tuple(sorted(set(values) | {low, high}))
            warnings.append(
                f"aspect {aspect!r} has non-integer ratings or scale ends: its ordinal value "
                "domain is the observed values plus the scale ends"
            )
        scales[aspect] = Scale(float(low), float(high), domain, how)
    return scales


def _check_values(rows: list[Rating], scales: dict[str, Scale], source: str) -> None:
    outside = [
        r for r in rows if r.value is not None and not scales[r.criterion].low <= r.value <= scales[r.criterion].high
    ]
    if outside:
        first = outside[0]
        s = scales[first.criterion]
        raise MaxbenchError(
            f"{len(outside)} rating(s) in {source} lie outside the scale (first: {first.where}, "
            f"{first.criterion!r} = {first.value:g}, scale {s.low:g}-{s.high:g} from {s.source}); "
            "fix the file or pass the right --scale MIN:MAX"
        )


def _check_duplicates(rows: list[Rating], source: str) -> None:
    seen: dict[tuple, Rating] = {}
    for r in rows:
        key = (r.annotator, r.item, r.system, r.criterion)
        if key in seen:
            raise MaxbenchError(
                f"annotator {r.annotator!r} rated item {r.item!r} of system {r.system!r} on {r.criterion!r} "
                f"twice in {source} ({seen[key].where} and {r.where}); keep one rating per text and aspect"
            )
        seen[key] = r


def _exclude(
    rows: list[Rating], options: ReportOptions, gold_failed: set[str] = frozenset()
) -> tuple[list[Rating], Exclusions]:
    rules: list[tuple[str, Any]] = [("empty value (no rating given)", lambda r: r.value is None)]
    for flag in options.exclude_flags:
        rules.append((f"flag {flag}", lambda r, f=flag: f in r.flags))
    if options.exclude_gold_below is not None:
        rules.append((gold_rule_name(options.exclude_gold_below), lambda r: r.annotator in gold_failed))
    if options.min_seconds is not None:
        rules.append(
            (
                f"faster than {options.min_seconds:g} s on the item",
                lambda r: r.seconds is not None and r.seconds < options.min_seconds,
            )
        )
    matched = Counter()
    per_annotator = Counter()
    kept = []
    for r in rows:
        hits = [name for name, rule in rules if rule(r)]
        matched.update(hits)
        if hits:
            per_annotator[r.annotator] += 1
        else:
            kept.append(r)
    by_rule = tuple((name, matched[name]) for name, _ in rules)
    if options.min_seconds is None:
        by_rule += (("too fast (rule off: no --min-seconds)", 0),)
    return kept, Exclusions(len(rows), len(kept), by_rule, tuple(sorted(per_annotator.items())))


def gold_rule_name(threshold: float) -> str:
    return f"gold-item accuracy below {threshold:g} (annotator)"


def _exclusion_text(ex: Exclusions) -> str:
    return "; ".join(f"{name}: {n}" for name, n in ex.by_rule if n)


def _sample_sd(values: np.ndarray) -> float | None:
    return float(np.std(values, ddof=1)) if values.size >= 2 else None


def _describe(aspect: str, system: str, rows: list[Rating], scale: Scale) -> Descriptive:
    values = np.array([r.value for r in rows], dtype=float)
    counts = Counter(values.tolist())
    distribution = tuple((v, counts.get(v, 0)) for v in scale.domain)
    if values.size == 0:
        return Descriptive(aspect, system, 0, 0, 0, None, None, None, distribution)
    return Descriptive(
        aspect,
        system,
        int(values.size),
        len({r.item for r in rows}),
        len({r.annotator for r in rows}),
        float(values.mean()),
        _sample_sd(values),
        float(np.median(values)),
        distribution,
    )


def _item_histograms(rows: list[Rating], domain: Sequence[float]) -> tuple[list[str], np.ndarray]:
    items = sorted({r.item for r in rows})
    index = {item: i for i, item in enumerate(items)}
    value_index = {v: j for j, v in enumerate(domain)}
    counts = np.zeros((len(items), len(domain)))
    for r in rows:
        counts[index[r.item], value_index[r.value]] += 1
    return items, counts


def _item_means(rows: list[Rating]) -> dict[str, float]:
    sums: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        sums[r.item].append(r.value)
    return {item: float(np.mean(v)) for item, v in sums.items()}


def _standardised(aspect: str, rows: list[Rating], warnings: list[str]) -> tuple[list[Rating], Scale]:
    """Per-annotator z-scores of one aspect and the scale of their observed values (direct assessment)."""
    z, undefined = z_scores(rows)
    if undefined:
        warnings.append(
            f"z-scores of {aspect!r}: annotator(s) {', '.join(undefined)} gave a single rating or one value "
            "throughout and are left out of the tests"
        )
    if not z:
        raise MaxbenchError(f"no annotator's ratings of {aspect!r} vary: z-scores are undefined; drop --z-scores")
    values = sorted({r.value for r in z})
    return z, Scale(values[0], values[-1], tuple(values), "per-annotator z-scores")


def _compare_aspect(
    aspect: str,
    rows: list[Rating],
    reference: str,
    others: Sequence[str],
    scale: Scale,
    options: ReportOptions,
    warnings: list[str],
) -> list[Comparison]:
    ref_rows = [r for r in rows if r.system == reference]
    results = []
    for other in others:
        other_rows = [r for r in rows if r.system == other]
        design = detect_design(
            {r.item for r in ref_rows}, {r.item for r in other_rows}, reference, other, options.design
        )
        if not ref_rows or not other_rows:
            missing = reference if not ref_rows else other
            results.append(Comparison(aspect, reference, other, design, "mannwhitneyu", None, None))
            warnings.append(
                f"no comparison of {other!r} with {reference!r} on {aspect!r}: {missing!r} has no ratings there"
            )
            continue
        mwu = mann_whitney([r.value for r in ref_rows], [r.value for r in other_rows], options.alternative)
        _, ref_hist = _item_histograms(ref_rows, scale.domain)
        _, other_hist = _item_histograms(other_rows, scale.domain)
        ci = bootstrap_rank_biserial_unpaired(
            ref_hist, other_hist, scale.domain, options.n_boot, seeded_rng(options.seed, "mannwhitneyu", aspect, other)
        )
        mwu = replace(mwu, effect_ci=ci)
        if min(len(ref_hist), len(other_hist)) < 2:
            warnings.append(
                f"{other!r} against {reference!r} on {aspect!r}: the effect size has no 95% interval (n/a): "
                "fewer than two items to resample"
            )
        wil = None
        if design.kind == "paired":
            ref_means, other_means = _item_means(ref_rows), _item_means(other_rows)
            common = sorted(set(ref_means) & set(other_means))
            if len(common) == 0:
                warnings.append(f"--design paired: {other!r} and {reference!r} share no item on {aspect!r}")
            else:
                wil = wilcoxon_paired(
                    [ref_means[i] for i in common], [other_means[i] for i in common], options.alternative
                )
                if wil.pvalue is not None:
                    d = np.round(np.array([ref_means[i] - other_means[i] for i in common]), DIFFERENCE_DECIMALS)
                    wil = replace(
                        wil,
                        effect_ci=bootstrap_rank_biserial_paired(
                            d, options.n_boot, seeded_rng(options.seed, "wilcoxon", aspect, other)
                        ),
                    )
        primary = "wilcoxon" if design.kind == "paired" and wil is not None else "mannwhitneyu"
        results.append(Comparison(aspect, reference, other, design, primary, mwu, wil))
    # Holm over this aspect's comparisons, one family per test.
    for test in ("mannwhitney", "wilcoxon"):
        tests = [getattr(c, test) for c in results]
        adjusted = holm([t.pvalue if t is not None else None for t in tests])
        for k, (c, t, p) in enumerate(zip(results, tests, adjusted)):
            if t is not None:
                results[k] = replace(c, **{test: replace(t, pvalue_holm=p)})
    return results


def _annotator_summaries(
    rows: list[Rating], kept: list[Rating], scales: dict[str, Scale], check_flags: Sequence[str]
) -> tuple[tuple[AnnotatorSummary, ...], str]:
    shared = len({(s.low, s.high) for s in scales.values()}) == 1
    units_label = "rating points" if shared else "fraction of the scale"

    def norm(r: Rating) -> float:
        if shared:
            return r.value
        s = scales[r.criterion]
        return (r.value - s.low) / (s.high - s.low)

    by_unit: dict[tuple, list[Rating]] = defaultdict(list)
    for r in kept:
        by_unit[(r.criterion, r.item, r.system)].append(r)
    excluded = Counter(r.annotator for r in rows) - Counter(r.annotator for r in kept)
    summaries = []
    for annotator in sorted({r.annotator for r in rows}):
        mine = [r for r in kept if r.annotator == annotator]
        values = np.array([norm(r) for r in mine], dtype=float)
        offsets = []
        for r in mine:
            others = [norm(o) for o in by_unit[(r.criterion, r.item, r.system)] if o.annotator != annotator]
            if others:
                offsets.append(norm(r) - float(np.mean(others)))
        seconds = sorted({(r.item, r.system): r.seconds for r in mine if r.seconds is not None}.values())
        failures = len(
            {(r.item, r.system) for r in rows if r.annotator == annotator and any(f in r.flags for f in check_flags)}
        )
        summaries.append(
            AnnotatorSummary(
                annotator=annotator,
                n=int(values.size),
                n_items=len({r.unit for r in mine}),
                mean=float(values.mean()) if values.size else None,
                sd=_sample_sd(values),
                offset=float(np.mean(offsets)) if offsets else None,
                drift=_drift(mine, norm),
                median_seconds=float(np.median(seconds)) if seconds else None,
                check_failures=failures,
                excluded=int(excluded.get(annotator, 0)),
                flags=tuple(sorted({f for r in rows if r.annotator == annotator for f in r.flags})),
            )
        )
    return tuple(summaries), units_label


def _drift(rows: list[Rating], norm) -> float | None:
    """Mean of the later half of the positions minus the earlier half (middle one dropped if odd)."""
    positioned = [r for r in rows if r.position is not None]
    positions = sorted({r.position for r in positioned})
    half = len(positions) // 2
    if half == 0:
        return None
    early, late = set(positions[:half]), set(positions[-half:])
    first = [norm(r) for r in positioned if r.position in early]
    second = [norm(r) for r in positioned if r.position in late]
    return float(np.mean(second) - np.mean(first))


# --------------------------------------------------------------------------- pairwise studies


def _exclude_judgments(
    rows: Sequence[dict], options: ReportOptions, gold_failed: set[str]
) -> tuple[list[dict], tuple[tuple[str, int], ...]]:
    """Judgment rows (pairwise, best-worst) kept by the flag and gold rules, and each rule's matches."""
    rules = [(f"flag {f}", lambda r, f=f: f in set(filter(None, r["flags"].split(";")))) for f in options.exclude_flags]
    if options.exclude_gold_below is not None:
        rules.append((gold_rule_name(options.exclude_gold_below), lambda r: r["annotator"] in gold_failed))
    matched = Counter(name for r in rows for name, rule in rules if rule(r))
    kept = [r for r in rows if not any(rule(r) for _, rule in rules)]
    return kept, tuple((name, matched[name]) for name, _ in rules)


def analyse_pairwise(
    rows: Sequence[dict], options: ReportOptions, source: str, gold: tuple | None = None
) -> PairwiseAnalysis:
    """A pairwise study's rows (``export.pair_judgment_rows``): per criterion, Bradley-Terry
    strengths, a sign test per pair (Holm over the pairs), and agreement. ``gold``: each
    annotator's gold accuracy (``gold.gold_accuracy``), for the report and ``exclude_gold_below``."""
    if not rows:
        raise MaxbenchError(f"{source} holds no pairwise judgments; nothing to report")
    if options.exclude_gold_below is not None and gold is None:
        raise MaxbenchError(f"--exclude-gold-below: {source} has no gold items")
    gold_failed = failing_annotators(gold, options.exclude_gold_below)
    kept, exclusions = _exclude_judgments(rows, options, gold_failed)
    if not kept:
        raise MaxbenchError("no judgments are left after the exclusions; relax --exclude-flag or --exclude-gold-below")
    systems = tuple(sorted({r["left"] for r in rows} | {r["right"] for r in rows}))
    aspects = []
    for criterion in dict.fromkeys(r["criterion"] for r in kept):
        judgments = [
            PairJudgment(r["item"], r["annotator"], r["left"], r["right"], r["winner"] or None)
            for r in kept
            if r["criterion"] == criterion
        ]
        aspects.append(
            PairwiseAspect(
                criterion,
                tuple(bradley_terry(systems, judgments, options.n_boot, options.seed, criterion)),
                tuple(sign_tests(systems, judgments)),
                pairwise_agreement(judgments),
                len(judgments),
            )
        )
    left_counts = Counter(r["left"] for r in kept)
    return PairwiseAnalysis(
        study=rows[0]["study"],
        source=source,
        options=options,
        systems=systems,
        aspects=tuple(aspects),
        rows_in=len(rows),
        rows_kept=len(kept),
        annotators=len({r["annotator"] for r in kept}),
        shown_left=tuple((s, left_counts.get(s, 0)) for s in systems),
        exclusions=exclusions,
        gold=tuple(gold or ()),
    )


# --------------------------------------------------------------------------- best-worst studies


def analyse_best_worst(rows: Sequence[dict], options: ReportOptions, source: str) -> BestWorstAnalysis:
    """A best-worst study's rows (``export.best_worst_rows``): per criterion, counting scores with
    item-bootstrap intervals and agreement (``human_eval/analysis/best_worst.py``)."""
    if not rows:
        raise MaxbenchError(f"{source} holds no best-worst judgments; nothing to report")
    if options.exclude_gold_below is not None:
        raise MaxbenchError("--exclude-gold-below: a best-worst study has no gold items")
    kept, exclusions = _exclude_judgments(rows, options, set())
    if not kept:
        raise MaxbenchError("no judgments are left after the exclusions; relax --exclude-flag")
    systems = tuple(sorted({s for r in rows for s in r["shown"].split(";")}))
    aspects = []
    for criterion in dict.fromkeys(r["criterion"] for r in kept):
        judgments = [
            BestWorst(r["item"], r["annotator"], tuple(r["shown"].split(";")), r["best"], r["worst"])
            for r in kept
            if r["criterion"] == criterion
        ]
        aspects.append(
            BestWorstAspect(
                criterion,
                tuple(counting_scores(systems, judgments, options.n_boot, options.seed, criterion)),
                bws_agreement(judgments),
                len(judgments),
            )
        )
    return BestWorstAnalysis(
        study=rows[0]["study"],
        source=source,
        options=options,
        systems=systems,
        aspects=tuple(aspects),
        rows_in=len(rows),
        rows_kept=len(kept),
        annotators=len({r["annotator"] for r in kept}),
        exclusions=exclusions,
    )
