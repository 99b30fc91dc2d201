"""Statistics for human ratings: from long-format rows to tests, effect sizes and agreement.

Input is the rating app's long format (one row per study, item, system, annotator and
criterion). Everything here is computed by scipy and the krippendorff package; what is
hand-written (Holm's step-down correction, rank-biserial correlations and their
bootstrap) is checked against a hand-worked case and against scipy in the tests.

Conventions, stated once because every table depends on them:
- an *aspect* is a rubric criterion; each aspect is analysed on its own scale;
- a *unit* (for agreement) is one text: an (item, system) pair;
- comparisons are "reference vs other": a positive rank-biserial r and the alternative
  ``greater`` both mean the reference is rated higher than the other system;
- Holm's correction runs over the comparisons of one aspect (one family per test).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import MaxbenchError

REQUIRED_COLUMNS = ("study", "item", "system", "annotator", "criterion", "value")
OPTIONAL_COLUMNS = ("position", "seconds", "flags", "scale_min", "scale_max")
ALTERNATIVES = ("two-sided", "greater", "less")
DESIGNS = ("auto", "paired", "unpaired")
DEFAULT_EXCLUDE_FLAGS = ("attention_failed",)
CONFIDENCE = 0.95
# Per-item means are averages of a few integers; rounding their differences makes
# differences that are equal as fractions (11/3 - 3 and 3 - 7/3) tie exactly in ranks.
DIFFERENCE_DECIMALS = 9


# --------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Rating:
    study: str
    item: str
    system: str
    annotator: str
    criterion: str
    value: float | None  # None: the row holds no rating (empty cell)
    position: float | None
    seconds: float | None
    flags: tuple[str, ...]
    scale_min: float | None
    scale_max: float | None
    where: str  # "line 12" of a file, "record 3" of JSON or a database export

    @property
    def unit(self) -> tuple[str, str]:
        return (self.item, self.system)


@dataclass(frozen=True)
class Ratings:
    rows: tuple[Rating, ...]
    source: str  # file name or "study <id>": never an absolute path (reports stay portable)
    sha256: str
    sha256_of: str = "the file's bytes"  # or "the exported rows as canonical JSON"


def load_ratings(path: str | Path) -> Ratings:
    """Read a long-format CSV, JSON (a list of rows, or {"ratings": [...]}) or JSON Lines file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MaxbenchError(f"ratings file {path} does not exist; pass the CSV/JSON the rating app exported") from None
    except IsADirectoryError:
        raise MaxbenchError(f"ratings file {path} is a directory; pass the exported CSV or JSON file") from None
    try:
        text = data.decode("utf-8-sig")  # a BOM is what spreadsheet programs write
    except UnicodeDecodeError as exc:
        raise MaxbenchError(
            f"{path.name} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); re-save it as UTF-8"
        ) from None
    sha = hashlib.sha256(data).hexdigest()
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".ndjson"):
        records = _json_records(text, path.name, lines=suffix != ".json")
    else:
        records = _csv_records(text, path.name)
    return ratings_from_records(records, source=path.name, sha256=sha)


def _csv_records(text: str, name: str) -> list[tuple[str, dict]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise MaxbenchError(f"{name} is empty; it needs a header row with {','.join(REQUIRED_COLUMNS)}")
    reader.fieldnames = [f.strip() for f in reader.fieldnames]
    _check_columns(reader.fieldnames, name)
    records = []
    try:
        for row in reader:
            if None in row:
                raise MaxbenchError(
                    f"{name} line {reader.line_num} has more fields than the header; quote fields that contain commas"
                )
            records.append((f"line {reader.line_num}", row))
    except csv.Error as exc:
        raise MaxbenchError(f"{name} line {reader.line_num} is not valid CSV ({exc})") from None
    return records


def _json_records(text: str, name: str, lines: bool) -> list[tuple[str, dict]]:
    try:
        if lines:
            raw = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MaxbenchError(
            f"{name} is not valid JSON ({exc.msg} at line {exc.lineno}); export it again from the rating app"
        ) from None
    if isinstance(raw, dict) and isinstance(raw.get("ratings"), list):
        raw = raw["ratings"]
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise MaxbenchError(f'{name} must hold a list of rating objects (or {{"ratings": [...]}})')
    columns = set().union(*(r.keys() for r in raw)) if raw else set()
    _check_columns(columns, name, per_row=raw)
    return [(f"record {i + 1}", r) for i, r in enumerate(raw)]


def _check_columns(columns: Iterable[str], name: str, per_row: list[dict] | None = None) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in set(columns)]
    if missing:
        raise MaxbenchError(
            f"{name} lacks required column(s) {', '.join(missing)}; the long format needs {','.join(REQUIRED_COLUMNS)}"
        )
    for i, row in enumerate(per_row or []):
        lacking = [c for c in REQUIRED_COLUMNS if c not in row]
        if lacking:
            raise MaxbenchError(f"{name} record {i + 1} lacks {', '.join(lacking)}")


def ratings_from_records(records: Sequence[tuple[str, dict] | dict], source: str, sha256: str | None = None) -> Ratings:
    """Parse dict rows (as the rating app's export gives them) into validated Ratings."""
    rows = []
    for n, rec in enumerate(records):
        where, rec = rec if isinstance(rec, tuple) else (f"record {n + 1}", rec)
        rows.append(_parse_row(rec, where, source))
    if sha256 is None:
        canonical = json.dumps(
            [r if not isinstance(r, tuple) else r[1] for r in records], sort_keys=True, ensure_ascii=False, default=str
        )
        return Ratings(
            tuple(rows), source, hashlib.sha256(canonical.encode("utf-8")).hexdigest(), "the rows as canonical JSON"
        )
    return Ratings(tuple(rows), source, sha256)


def _text(rec: dict, key: str, where: str, source: str) -> str:
    value = rec.get(key)
    text = "" if value is None else str(value).strip()
    if not text:
        raise MaxbenchError(f"{source} {where}: column {key} is empty; every row needs {key}")
    return text


def _number(rec: dict, key: str, where: str, source: str) -> float | None:
    value = rec.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}, not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}, not a number") from None
    if not math.isfinite(number):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}; give a finite number or leave it empty")
    return number


def _parse_row(rec: dict, where: str, source: str) -> Rating:
    flags = rec.get("flags")
    if isinstance(flags, (list, tuple)):
        flag_list = [str(f).strip() for f in flags]
    else:
        flag_list = [] if flags is None else [f.strip() for f in str(flags).split(";")]
    return Rating(
        study=_text(rec, "study", where, source),
        item=_text(rec, "item", where, source),
        system=_text(rec, "system", where, source),
        annotator=_text(rec, "annotator", where, source),
        criterion=_text(rec, "criterion", where, source),
        value=_number(rec, "value", where, source),
        position=_number(rec, "position", where, source),
        seconds=_number(rec, "seconds", where, source),
        flags=tuple(sorted({f for f in flag_list if f})),
        scale_min=_number(rec, "scale_min", where, source),
        scale_max=_number(rec, "scale_max", where, source),
        where=where,
    )


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ReportOptions:
    reference: str | None = None
    study: str | None = None  # which study to keep when the input holds several
    scale: tuple[float, float] | None = None  # overrides the per-row scale columns
    min_seconds: float | None = None
    exclude_flags: tuple[str, ...] = DEFAULT_EXCLUDE_FLAGS
    alternative: str = "two-sided"
    alpha: float = 0.05  # significance level
    design: str = "auto"
    n_boot: int = 2000
    seed: int = 0

    def __post_init__(self):
        if self.alternative not in ALTERNATIVES:
            raise MaxbenchError(f"--alternative must be one of {', '.join(ALTERNATIVES)}")
        if self.design not in DESIGNS:
            raise MaxbenchError(f"--design must be one of {', '.join(DESIGNS)}")
        if not 0 < self.alpha < 1:
            raise MaxbenchError(f"--alpha {self.alpha} is not a significance level in (0, 1); POSG used 0.1")
        if self.n_boot < 100:
            raise MaxbenchError(f"--n-boot {self.n_boot} is too few for a {CONFIDENCE:.0%} interval; use >= 100")
        if self.min_seconds is not None and self.min_seconds < 0:
            raise MaxbenchError("--min-seconds must be >= 0")
        if self.scale is not None and not self.scale[0] < self.scale[1]:
            raise MaxbenchError(f"--scale {self.scale[0]:g}:{self.scale[1]:g} is empty; give MIN:MAX with MIN < MAX")


def parse_scale(text: str) -> tuple[float, float]:
    """``"1:5"`` -> (1.0, 5.0)."""
    parts = text.split(":")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise MaxbenchError(f"--scale {text!r} is not MIN:MAX (for example 1:5 or 0:2)") from None
    if not low < high:
        raise MaxbenchError(f"--scale {text!r} is empty; give MIN:MAX with MIN < MAX")
    return (low, high)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Scale:
    low: float
    high: float
    domain: tuple[float, ...]  # the ordered values krippendorff's ordinal metric uses
    source: str  # "--scale", "scale columns" or "observed values"


@dataclass(frozen=True)
class Exclusions:
    rows_in: int
    rows_kept: int
    by_rule: tuple[tuple[str, int], ...]  # (rule, rows it matched); a row may match several
    by_annotator: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Descriptive:
    aspect: str
    system: str
    n: int
    n_items: int
    n_annotators: int
    mean: float | None
    sd: float | None  # sample standard deviation (ddof 1); None for n < 2
    median: float | None
    distribution: tuple[tuple[float, int], ...]  # (scale value, count) over the whole domain


@dataclass(frozen=True)
class Design:
    kind: str  # "paired" or "unpaired"
    n_common_items: int
    n_reference_items: int
    n_other_items: int
    statement: str


@dataclass(frozen=True)
class TestResult:
    """One test in scipy's style: statistic and p-value, plus what was assumed."""

    test: str  # "mannwhitneyu" or "wilcoxon"
    statistic: float | None  # U of the reference sample, or W (scipy's min(T+, T-)/T+ convention)
    pvalue: float | None
    alternative: str
    method: str  # "exact", "asymptotic" or "permutation": what scipy's method="auto" picks
    n_reference: int
    n_other: int
    effect_size: float | None  # rank-biserial r, positive: reference rated higher
    effect_ci: tuple[float, float] | None
    assumes: str
    pvalue_holm: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    aspect: str
    reference: str
    other: str
    design: Design
    primary: str  # which test gives the stars
    mannwhitney: TestResult | None
    wilcoxon: TestResult | None

    @property
    def primary_result(self) -> TestResult | None:
        return self.wilcoxon if self.primary == "wilcoxon" else self.mannwhitney


@dataclass(frozen=True)
class AgreementResult:
    aspect: str
    ordinal: float | None
    ordinal_ci: tuple[float, float] | None
    interval: float | None
    n_units: int
    n_pairable_units: int  # units with two or more ratings
    n_annotators: int
    n_boot_valid: int
    value_domain: tuple[float, ...]
    undefined_reason: str = ""


@dataclass(frozen=True)
class AnnotatorSummary:
    annotator: str
    n: int
    n_items: int
    mean: float | None
    sd: float | None
    offset: float | None  # mean of (own rating - mean of the others on the same unit and aspect)
    drift: float | None  # second-half minus first-half mean, by presentation position
    median_seconds: float | None
    check_failures: int  # texts carrying one of the excluded flags
    excluded: int
    flags: tuple[str, ...]  # every flag on this annotator's rows


@dataclass(frozen=True)
class Analysis:
    source: str
    sha256: str
    sha256_of: str
    study: str
    options: ReportOptions
    reference: str | None
    systems: tuple[str, ...]
    aspects: tuple[str, ...]
    scales: dict[str, Scale]
    exclusions: Exclusions
    descriptives: tuple[Descriptive, ...]
    comparisons: tuple[Comparison, ...]
    agreement: tuple[AgreementResult, ...]
    annotators: tuple[AnnotatorSummary, ...]
    annotator_units: str  # "rating points" or "fraction of the scale"
    warnings: tuple[str, ...]

    def descriptive(self, aspect: str, system: str) -> Descriptive:
        return next(d for d in self.descriptives if d.aspect == aspect and d.system == system)

    def comparison(self, aspect: str, other: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.aspect == aspect and c.other == other), None)

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))


def _plain(obj: Any) -> Any:
    """JSON-ready: NaN/inf become None, tuples lists, numpy scalars Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


# --------------------------------------------------------------------------- hand-written statistics


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (plain Holm, not statsmodels' default Holm-Sidak).

    The i-th smallest of m p-values becomes max over j <= i of min(1, (m - j + 1) p_(j)).
    None entries (tests that could not be run) are not counted in m and stay None.
    """
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(present)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


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


def _percentile_ci(values: np.ndarray) -> tuple[float, float] | None:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return (float(low), float(high))


def _rng(seed: int, *names: str) -> np.random.Generator:
    # One stream per (aspect, system, purpose): a result does not change when other
    # systems or aspects are added to the study.
    return np.random.default_rng([seed, *(zlib.crc32(n.encode("utf-8")) for n in names)])


def bootstrap_rank_biserial_unpaired(
    ref_counts: np.ndarray, other_counts: np.ndarray, domain: Sequence[float], n_boot: int, rng: np.random.Generator
) -> tuple[float, float] | None:
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
    return _percentile_ci(r)


def _resampled_totals(counts: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    n = counts.shape[0]
    picks = rng.integers(0, n, size=(n_boot, n))
    weights = np.bincount((picks + np.arange(n_boot)[:, None] * n).ravel(), minlength=n_boot * n).reshape(n_boot, n)
    return weights @ counts


def bootstrap_rank_biserial_paired(
    differences: np.ndarray, n_boot: int, rng: np.random.Generator
) -> tuple[float, float] | None:
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
    return _percentile_ci(r)


# --------------------------------------------------------------------------- scipy tests


def mann_whitney(reference: Sequence[float], other: Sequence[float], alternative: str) -> TestResult:
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
    return TestResult(
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


def wilcoxon_paired(reference_means: Sequence[float], other_means: Sequence[float], alternative: str) -> TestResult:
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
        return TestResult(
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
    return TestResult(
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
    rng = _rng(seed, "alpha", aspect)
    replicates = np.empty(n_boot)
    for b in range(n_boot):
        picked = rng.integers(0, len(items), size=len(items))
        columns = [j for i in picked for j in by_item[items[i]]]
        value = krippendorff_alpha(counts[columns], domain, "ordinal")
        replicates[b] = np.nan if value is None else value
    valid = int(np.isfinite(replicates).sum())
    return AgreementResult(
        ordinal=ordinal, ordinal_ci=_percentile_ci(replicates), interval=interval, n_boot_valid=valid, **base
    )


# --------------------------------------------------------------------------- the analysis


def analyse(ratings: Ratings, options: ReportOptions) -> Analysis:
    warnings: list[str] = []
    rows = list(ratings.rows)
    if not rows:
        raise MaxbenchError(f"{ratings.source} holds no ratings; nothing to report")
    rows, study = _select_study(rows, ratings.source, options.study)
    aspects = tuple(dict.fromkeys(r.criterion for r in rows))
    scales = _scales(rows, aspects, options.scale, ratings.source, warnings)
    _check_values(rows, scales, ratings.source)
    _check_duplicates(rows, ratings.source)

    kept, exclusions = _exclude(rows, options)
    other_flags = Counter(f for r in rows for f in r.flags if f not in options.exclude_flags)
    for flag, n in sorted(other_flags.items()):
        warnings.append(
            f"{n} kept row(s) carry the flag {flag!r}, which is not excluded (exclude them with --exclude-flag {flag})"
        )
    if not kept:
        raise MaxbenchError(
            f"no ratings are left after the exclusions ({_exclusion_text(exclusions)}); "
            "relax --min-seconds or --exclude-flag"
        )

    all_systems = sorted({r.system for r in rows})
    reference = options.reference
    if reference is not None and reference not in all_systems:
        raise MaxbenchError(
            f"reference system {reference!r} has no ratings in {ratings.source}; "
            f"systems present: {', '.join(all_systems)}"
        )
    if reference is None and len(all_systems) > 1:
        reference = all_systems[0]
        warnings.append(f"no --reference given: comparing against {reference!r}, the first system by name")
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
            comparisons.extend(_compare_aspect(aspect, aspect_rows, reference, systems[1:], scale, options, warnings))
        agreements.append(agreement(aspect, aspect_rows, scale, options.n_boot, options.seed))
    for a in agreements:
        if a.undefined_reason:
            warnings.append(f"Krippendorff's alpha for {a.aspect!r} is {a.undefined_reason}")

    annotators, units_label = _annotator_summaries(rows, kept, scales, options.exclude_flags)
    return Analysis(
        source=ratings.source,
        sha256=ratings.sha256,
        sha256_of=ratings.sha256_of,
        study=study,
        options=options,
        reference=reference,
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


def _exclude(rows: list[Rating], options: ReportOptions) -> tuple[list[Rating], Exclusions]:
    rules: list[tuple[str, Any]] = [("empty value (no rating given)", lambda r: r.value is None)]
    for flag in options.exclude_flags:
        rules.append((f"flag {flag}", lambda r, f=flag: f in r.flags))
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
            ref_hist, other_hist, scale.domain, options.n_boot, _rng(options.seed, "mannwhitneyu", aspect, other)
        )
        mwu = _replace(mwu, effect_ci=ci)
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
                    wil = _replace(
                        wil,
                        effect_ci=bootstrap_rank_biserial_paired(
                            d, options.n_boot, _rng(options.seed, "wilcoxon", aspect, other)
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
                results[k] = _replace(c, **{test: _replace(t, pvalue_holm=p)})
    return results


def _replace(obj, **changes):
    from dataclasses import replace

    return replace(obj, **changes)


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
