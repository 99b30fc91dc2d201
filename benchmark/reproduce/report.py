"""The reproduction report: one verdict per claim x base model x corpus ("cell"), decided by the
rules of ``verdicts.py`` on the relative scale, with the rows behind each cell (the paper's numbers
beside maxbench's, each score's paired difference with its 95% interval), the deviations from the
paper, the diagnostics kept out of the counts, and the runs used; rendered through the document
model (``core/document.py``) to ``report.md`` and ``report.html``, with ``report.csv`` (the
cells), ``report.json`` (cells, rows, claims) and a plot of every cell. It reads runs and scores; it
never generates and never rescores.

Differences against the protocol's baseline come from each run's ``scores.json`` (paired bootstrap
over prompts); against another system of the run (a lambda, sparsemax, KerBS) they are computed
from the run's generations by the same paired test (``maxbench.benchmark.metrics.stats.paired_test``)
and kept in ``pairs.json`` beside the report, keyed by the run, its generations' sha256, the two
systems, the metric's signature as the run's ``scores.json`` records it and the resamples: a
report re-rendered from the same scored runs computes nothing again. A time ratio (Table 3 of
graphmax) comes from the runs' ``timings.jsonl`` and the tokens generated; a convergence claim
(Figure 2 of graphmax) from the iterations each decoding step took, which the generations record.
A correlation claim (Table 3 of POSG) is Pearson's r over the text sources: every protocol system
(not a sensitivity setting's) of every run of a corpus, and the human references, scored here with
the same metric (and kept in ``pairs.json`` too); its interval is Fisher's z interval (scipy).

A cell resting on a run that is not scored, whose ``scores.json`` scores other generations, that
covers part of its suite, or on fewer folds than the protocol plans, is labelled partial, and the
report says which cells are partial before anything else.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from maxbench.benchmark.reproduce.controls import check as check_controls
from maxbench.benchmark.reproduce.controls import sections as control_sections
from maxbench.benchmark.reproduce.controls import summary as control_summary
from maxbench.benchmark.reproduce.papers import SCORES_KEY, SETTING_SEP, Claim, Paper, sensitivity_claims
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import (
    ALPHA,
    FEW_PROMPTS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NEGLIGIBLE_R,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    RULES,
    SMALLER,
    VERDICTS,
    Estimate,
    Verdict,
    aggregate,
    best_epoch,
    combine_folds,
    decide,
    deciding_p,
    holm_step,
    ratio_interval,
    step_ratio_interval,
    summarise,
)
from maxbench.document import Cell, Code, Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.fileio import atomic_open, atomic_write

TIME_RATIO = "time-per-token-ratio"
PAIRS = "pairs.json"
PAIRS_FORMAT = "maxbench-reproduce-pairs/1"
#: a KerBS cell whose relative interval lies within +-UNTRAINED_LIKE is indistinguishable from the
#: untrained head (exactly the base softmax) when the head's training history is not recorded
UNTRAINED_LIKE = 1e-4
FLAG_FEW = "few prompts"
FLAG_PARTIAL = "partial"
FLAG_UNTRAINED = "untrained head"
MIXED = "mixed"


# ---------------------------------------------------------------- data classes


@dataclass
class Row:
    """One score of one comparison (method vs baseline) on one base model and corpus, over its folds."""

    claim: str
    model: str
    corpus: str
    method: str
    baseline: str
    score: str
    variant: str  # "paper" (the paper's metric) or "maxbench" (maxbench's default beside it)
    kind: str
    paper_baseline: float | None
    paper_method: float | None
    paper_relative: float | None  # the paper's effect on the verdict's scale
    method_mean: float | None
    method_sd: float | None
    baseline_mean: float | None
    baseline_sd: float | None
    difference: float | None  # method - baseline (ratio for a ratio claim, r for a correlation)
    ci_low: float | None
    ci_high: float | None
    relative: float | None  # on the verdict's scale: difference / baseline (ratio - 1; r)
    rel_low: float | None
    rel_high: float | None
    rel_se: float | None
    rel_df: float | None
    n_folds: int
    n_prompts: int
    interval: str
    note: str = ""  # why a number is missing
    diagnostic: bool = False
    identical_to: str = ""  # a maxbench-variant row with the paper variant's numbers: that score's name
    same_as: str = ""  # a row an earlier claim already shows: that claim's id
    peer: str = ""  # a maxbench-variant row: the paper's score it stands beside

    @property
    def rel(self) -> Estimate:
        return Estimate(self.relative, self.rel_low, self.rel_high, self.rel_se, self.rel_df, self.n_folds)

    @property
    def numbers(self) -> tuple:
        return (self.difference, self.ci_low, self.ci_high, self.method_mean, self.baseline_mean, self.n_folds)


@dataclass
class Comparison:
    """One comparison of a cell (its method against one competitor), its scores summarised."""

    baseline: str
    est: Estimate
    paper: float | None  # the paper's effect on the same scale
    reason: str = ""  # why there is no interval
    verdict: Verdict | None = None


@dataclass
class CellVerdict:
    """One claim x base model x corpus (x method): one verdict."""

    claim: str
    where: str
    model: str
    corpus: str
    method: str
    baselines: str
    scores: str
    kind: str
    paper_relative: float | None
    relative: float | None
    rel_low: float | None
    rel_high: float | None
    se: float | None
    df: float | None
    p_value: float | None
    p_holm: float | None
    n_folds: int
    n_prompts: int
    verdict: str
    why: str
    flags: list[str] = field(default_factory=list)
    counted: bool = True
    diagnostic: bool = False
    same_as: str = ""
    details: list[Comparison] = field(default_factory=list)  # one per competitor (serialised as comparisons)


# ---------------------------------------------------------------- reading runs


def _scores(run_dir: Path) -> dict | None:
    path = run_dir / "scores.json"
    return json.loads(path.read_text()) if path.exists() else None


def _metric_of(doc: dict, score: str) -> str | None:
    return next((m for m, e in doc.get("metrics", {}).items() if score in e.get("scores", [])), None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


class Runs:
    """What the report reads of each run, read once: scores.json, the generations' sha256, and why
    the run is partial (not scored, scored on other generations, part of its suite)."""

    def __init__(self, runs: list[RunSpec]):
        self.runs = runs
        self._docs: dict[Path, dict | None] = {}
        self._partial: dict[Path, str] = {}
        self._whole: dict[Path, str] = {}  # why no system of the run is complete (not scored, stale)
        self._short: dict[Path, set] = {}  # the systems that cover part of the suite or none
        for r in runs:
            doc = _scores(r.run_dir)
            why = ""
            if doc is None:
                why = "not scored" if (r.run_dir / "generations.jsonl").exists() else "not run"
                self._whole[r.run_dir] = why
            elif doc.get("generations_sha256") != _sha(r.run_dir / "generations.jsonl"):
                why = "its scores.json scores other generations (rescore it)"
                self._whole[r.run_dir] = why
            else:
                systems = doc.get("systems", {})
                planned = set(r.roles.values())
                short = {s for s in planned if s not in systems or (systems.get(s) or {}).get("partial")}
                self._short[r.run_dir] = short
                if short:
                    why = f"{len(short)} of its {len(planned)} systems cover part of the suite or none"
            self._docs[r.run_dir] = doc  # a partial run's scores are used, and its cells say so
            if why:
                self._partial[r.run_dir] = why

    def partial_for(self, run: RunSpec, roles: tuple[str, ...]) -> str:
        """Why the cell of these roles in ``run`` is partial ('' when its own systems are complete):
        another system of the run still to generate does not make it partial."""
        if run.run_dir in self._whole:
            return self._whole[run.run_dir]
        short = [run.roles[x] for x in roles if run.roles.get(x) in self._short.get(run.run_dir, set())]
        return f"{len(short)} of its systems cover part of the suite or none" if short else ""

    def doc(self, run: RunSpec) -> dict | None:
        return self._docs.get(run.run_dir)

    def partial(self, run: RunSpec) -> str:
        return self._partial.get(run.run_dir, "")


class PairCache:
    """Paired tests between two systems of a run when neither is its baseline, and metrics of the
    human references, computed once and kept in ``pairs.json`` beside the report (see the module
    docstring for the key): entries the report did not use are dropped when it is written."""

    def __init__(self, n_resamples: int = 1000, path: Path | None = None):
        self.n_resamples, self.path = n_resamples, path
        self.stored: dict = {}
        self.used: dict = {}
        self.computed = 0
        if path is not None and path.exists():
            try:
                doc = json.loads(path.read_text())
                if doc.get("format") == PAIRS_FORMAT:
                    self.stored = dict(doc.get("entries", {}))
            except (OSError, ValueError):
                self.stored = {}

    @staticmethod
    def _key(*parts) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]

    def _get(self, key: str, compute):
        if key not in self.used:
            if key in self.stored:
                self.used[key] = self.stored[key]
            else:
                self.used[key] = compute()
                self.computed += 1
        return self.used[key]

    def compare(self, run_dir: Path, a: str, b: str, metric: str, score: str, signature: str = ""):
        """(difference, ci_low, ci_high) of ``score`` between systems a and b of the run, or None."""

        def compute():
            from maxbench.benchmark.metrics.base import get_metric
            from maxbench.benchmark.metrics.scoring import load_run
            from maxbench.benchmark.metrics.stats import paired_test

            _, batches = load_run(run_dir)
            m = get_metric(metric)
            ra, rb = m.compute(batches[a]), m.compute(batches[b])
            out = {}
            for name, sa in ra.scores.items():
                sb = rb.scores[name]
                if sa.value is None or sb.value is None:
                    out[name] = None
                    continue
                c = paired_test(sa.stats, sb.stats, self.n_resamples)
                lo, hi = c.confidence_interval or (None, None)
                out[name] = [c.difference, lo, hi]
            return {"run": run_dir.name, "systems": [a, b], "metric": metric, "scores": out}

        gen = _sha(run_dir / "generations.jsonl")
        key = self._key("pair", run_dir.name, gen, a, b, metric, signature, self.n_resamples)
        found = self._get(key, compute)["scores"].get(score)
        return None if found is None else tuple(found)

    def humans(self, run: RunSpec, metric: str, signature: str = "") -> dict:
        """Every score of ``metric`` on the human references of the run's suite (each reference
        scored as if a system had written it, itself among the references)."""

        def compute():
            from maxbench.benchmark.metrics.base import TextBatch, get_metric
            from maxbench.benchmark.metrics.scoring import load_run

            _, batches = load_run(run.run_dir)
            first = next(iter(batches.values()))
            humans = TextBatch(first.reference_list, first.prompt_order, first.references)
            res = get_metric(metric).compute(humans)
            return {
                "suite": run.plan.suite.name,
                "metric": metric,
                "scores": {k: s.value for k, s in res.scores.items()},
            }

        suite = run.plan.suite
        key = self._key("human", suite.name, getattr(suite, "sha256", ""), metric, signature)
        return self._get(key, compute)["scores"]

    def save(self) -> None:
        if self.path is None:
            return
        body = {"format": PAIRS_FORMAT, "n_resamples": self.n_resamples, "entries": dict(sorted(self.used.items()))}
        text = json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        if not self.path.exists() or self.path.read_text() != text:
            atomic_write(self.path, text)


def _signature(doc: dict, metric: str | None) -> str:
    return ((doc.get("metrics") or {}).get(metric) or {}).get("signature", "") if metric else ""


# ---------------------------------------------------------------- KerBS heads


def _head_meta(layer: str, sha256: str) -> dict | None:
    """The meta.json of the cached ``layer`` head with these weights (as the manifest records them)."""
    from maxbench.fileio import maxbench_home

    if not sha256:
        return None
    for meta_file in sorted((maxbench_home() / "heads" / layer).glob("*/meta.json")):
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("sha256") == sha256:
            return meta
    return None


def head_training(run: RunSpec, system: str) -> dict:
    """What is known of a trained head's training in this run: ``best_epoch`` (None: not recorded),
    ``untrained`` (best epoch 0), ``history`` ([] when not recorded) and ``source``."""
    try:
        manifest = json.loads((run.run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    res = (manifest.get("resources") or {}).get(system) or {}
    sha = next((v for k, v in res.items() if k.endswith("_head") and isinstance(v, str)), "")
    layer = next((k[: -len("_head")].replace("_", "-") for k in res if k.endswith("_head")), "")
    meta = _head_meta(layer, sha) if layer else None
    history = ((meta or {}).get("training") or {}).get("history") or []
    epoch = best_epoch(history)
    if epoch is None and isinstance(res.get("best_epoch"), int):
        epoch = res["best_epoch"]
    untrained = bool(res.get("untrained_best")) or epoch == 0
    source = (
        "the cached head's meta.json" if history else ("the run's manifest" if epoch is not None or untrained else "")
    )
    return {
        "best_epoch": 0 if untrained and epoch is None else epoch,
        "untrained": untrained,
        "history": history,
        "source": source,
    }


# ---------------------------------------------------------------- rows


def _fold_value(run: RunSpec, doc: dict, role: str, score: str):
    entry = doc["systems"].get(run.roles[role], {}).get("scores", {}).get(score) or {}
    return entry.get("value")


def _n_prompts(run: RunSpec, doc: dict, roles: tuple[str, ...]) -> int:
    ns = [(doc["systems"].get(run.roles[r]) or {}).get("n_prompts") for r in roles]
    ns = [n for n in ns if isinstance(n, int)]
    return min(ns) if ns else len(run.plan.suite.items)


def _difference(run: RunSpec, doc: dict, method: str, baseline: str, score: str, pairs: PairCache):
    a, b = run.roles[method], run.roles[baseline]
    if a not in doc.get("systems", {}) or b not in doc.get("systems", {}):
        return None  # a system the run has not generated yet (a partial run)
    if b == run.baseline:
        c = (doc.get("comparisons", {}).get("systems", {}).get(a) or {}).get(score)
        return None if c is None else (c["difference"], c["ci_low"], c["ci_high"])
    metric = _metric_of(doc, score)
    return None if metric is None else pairs.compare(run.run_dir, a, b, metric, score, _signature(doc, metric))


def time_per_token(run_dir: Path) -> dict[str, float]:
    """CPU seconds per generated token of each system, from the run's timings and generations.

    CPU time of the generating process (wall time where a timing row has none): on a shared
    machine other processes stretch wall time by whatever else runs at that moment, so two
    systems generated at different times compare fairly only by the CPU time they used."""
    from maxbench.benchmark.rundir import GENERATIONS, TIMINGS, read_rows

    seconds: dict[str, float] = {}
    for line in (run_dir / TIMINGS).read_text().splitlines() if (run_dir / TIMINGS).exists() else []:
        row = json.loads(line)
        if row["phase"].startswith("generate "):
            name = row["phase"][len("generate ") :]
            seconds[name] = seconds.get(name, 0.0) + row.get("cpu_seconds", row["seconds"])
    tokens: dict[str, int] = {}
    for row in read_rows(run_dir / GENERATIONS):
        tokens[row["system"]] = tokens.get(row["system"], 0) + int(row.get("n_tokens", 0))
    return {s: seconds[s] / tokens[s] for s in seconds if tokens.get(s)}


def training_seconds(run: RunSpec) -> dict[str, float]:
    """Training seconds of each adapted system's adapter, from the run's ``train <model>`` timing rows
    (``runner.record_training``): CPU seconds where every adapter of the run has them, else wall
    seconds for all (never one kind against the other)."""
    from maxbench.benchmark.rundir import TIMINGS, read_rows

    path = run.run_dir / TIMINGS
    rows = [r for r in read_rows(path) if r.get("phase", "").startswith("train ")] if path.exists() else []
    cpu = bool(rows) and all(r.get("cpu_seconds") is not None for r in rows)
    per_model = {r["phase"][len("train ") :]: r["cpu_seconds" if cpu else "seconds"] for r in rows}
    out = {}
    for system in run.plan.systems:
        if system.model_key in per_model:
            out[system.name] = float(per_model[system.model_key])
    return out


def training_steps(run: RunSpec) -> dict[str, list[float]]:
    """CPU seconds of each training step of each adapted system's adapter, where its ``train MODEL``
    row records them (adapters trained since issue 40's reproduction)."""
    from maxbench.benchmark.rundir import TIMINGS, read_rows

    path = run.run_dir / TIMINGS
    rows = [r for r in read_rows(path) if r.get("phase", "").startswith("train ")] if path.exists() else []
    per_model = {r["phase"][len("train ") :]: r["step_cpu_seconds"] for r in rows if r.get("step_cpu_seconds")}
    return {s.name: list(per_model[s.model_key]) for s in run.plan.systems if s.model_key in per_model}


def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals or len(vals) < len(values):
        return None, None
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return m, sd


def _cells_runs(runs: list[RunSpec], model: str, corpus: str, roles: tuple[str, ...]) -> list[RunSpec]:
    return [r for r in runs if r.model == model and r.corpus == corpus and all(x in r.roles for x in roles)]


def _row(claim: Claim, model, corpus, method, baseline, score, variant, i, cells, data: Runs, pairs, diagnostic):
    docs = [(r, data.doc(r)) for r in cells]
    docs = [(r, d) for r, d in docs if d is not None]
    n_prompts = sum(_n_prompts(r, d, (method, baseline)) for r, d in docs)
    paper_b, paper_m = claim.numbers(i, method, baseline, corpus)
    note = ""
    if claim.kind == "ratio":
        ratios, steps = [], []
        for r, _ in docs:
            per = training_seconds(r) if claim.measure == "training" else time_per_token(r.run_dir)
            a, b = per.get(r.roles[method]), per.get(r.roles[baseline])
            ratios.append(a / b if a and b else None)
            if claim.measure == "training":
                got = training_steps(r)
                steps.append((got.get(r.roles[method]), got.get(r.roles[baseline])))
        if claim.measure == "training" and docs and None in ratios:
            note = "an adapter's training time is not in the run's timings.jsonl"
        if len(docs) == 1 and steps and None not in steps[0]:  # one run: the steps are the replicates
            ab = step_ratio_interval(*steps[0])
        else:
            ab = ratio_interval(ratios)
            if claim.measure == "training" and len(docs) == 1 and ab.estimate is not None:
                note = "an adapter's step times are not recorded (trained before they were): no interval"
        rel = Estimate(
            None if ab.estimate is None else ab.estimate - 1,
            None if ab.low is None else ab.low - 1,
            None if ab.high is None else ab.high - 1,
            None,
            ab.df,
            ab.n_folds,
            ab.method,
        )
        m_vals, b_vals = [None], [None]
    else:
        diffs, rels = [], []
        m_vals = [_fold_value(r, d, method, score) for r, d in docs]
        b_vals = [_fold_value(r, d, baseline, score) for r, d in docs]
        for (r, d), b in zip(docs, b_vals):
            got = _difference(r, d, method, baseline, score, pairs)
            diffs.append(got if got is not None else (None, None, None))
            if got is None or b is None or not b or None in got:
                rels.append((None, None, None))
            else:
                rels.append(tuple(x / abs(b) for x in got))
        ab = combine_folds(diffs)
        rel = combine_folds(rels)
        if docs and not any(_metric_of(d, score) for _, d in docs):
            note = f"score '{score}' is not in the runs' scores.json"
        elif docs and any(b == 0 for b in b_vals if b is not None):
            note = "the baseline's value is 0: no relative scale"
    missing = [role for role in (method, baseline) for r, d in docs if r.roles[role] not in d.get("systems", {})]
    if missing and not note:
        note = f"'{missing[0]}' is not generated in this run yet"
    if not docs:
        note = "no scored run for this model and corpus yet"
    m_mean, m_sd = _mean_sd(m_vals)
    b_mean, b_sd = _mean_sd(b_vals)
    return Row(
        claim.id,
        model,
        corpus,
        method,
        baseline,
        score,
        variant,
        claim.kind,
        paper_b,
        paper_m,
        claim.relative_for(i, method, baseline, corpus),
        m_mean,
        m_sd,
        b_mean,
        b_sd,
        ab.estimate,
        ab.low,
        ab.high,
        rel.estimate,
        rel.low,
        rel.high,
        rel.se,
        rel.df,
        ab.n_folds,
        n_prompts,
        ab.method,
        note,
        diagnostic,
        peer=claim.scores[i] if variant == "maxbench" else "",
    )


# ---------------------------------------------------------------- correlation claims


HUMAN = "human"


def correlation_points(
    claim: Claim, runs: list[RunSpec], corpus: str, i: int, pairs: PairCache, data: Runs | None = None
) -> list[tuple[str, float, float]]:
    """(text source, x, y) for score ``i`` of a correlation claim: x = ``against[i]``, y = ``scores[i]``
    of every protocol system of every scored run of ``corpus`` (not the sensitivity settings'
    ``ROLE@SETTING`` systems, which would change a counted claim's evidence), then the human
    references of each suite."""
    data = data or Runs(runs)
    x_score, y_score = claim.against[i], claim.scores[i]
    points, suites = [], []
    for run in runs:
        doc = data.doc(run) if run.corpus == corpus else None
        if doc is None:
            continue
        where = run.model + ("" if run.fold is None else f" fold {run.fold}")
        for role, system in run.roles.items():
            if SETTING_SEP in role:  # a sensitivity setting's system: outside the counted claims' evidence
                continue
            entry = doc["systems"].get(system, {}).get("scores", {})
            x, y = (entry.get(x_score) or {}).get("value"), (entry.get(y_score) or {}).get("value")
            if x is not None and y is not None:
                points.append((f"{where} {role}", x, y))
        if run.plan.suite.name not in [s for s, _, _ in suites]:
            suites.append((run.plan.suite.name, run, doc))
    for name, run, doc in suites:
        vals = []
        for score in (x_score, y_score):
            metric = _metric_of(doc, score)
            vals.append(None if metric is None else pairs.humans(run, metric, _signature(doc, metric)).get(score))
        if None not in vals:
            points.append((HUMAN + ("" if len(suites) == 1 else f" ({name})"), *vals))
    return points


def pearson(points: list[tuple[str, float, float]], level: float = 0.95):
    """Pearson's r of the points with Fisher's z interval, or (None, None, None, why not)."""
    from scipy.stats import pearsonr

    if len(points) < 4:
        return None, None, None, f"only {len(points)} text sources scored; an interval for r needs at least 4"
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        return None, None, None, "a score is the same for every text source: r is undefined"
    res = pearsonr(xs, ys)
    ci = res.confidence_interval(level)
    return float(res.statistic), float(ci.low), float(ci.high), ""


def _fisher(r: float | None, n: int) -> Estimate:
    """r on Fisher's z scale, se 1 / sqrt(n - 3)."""
    if r is None or n < 4 or abs(r) >= 1:
        return Estimate(None, None, None)
    z, se = math.atanh(r), 1 / math.sqrt(n - 3)
    return Estimate(z, z - 1.959963984540054 * se, z + 1.959963984540054 * se, se, None, 1)


def _correlation(
    claim: Claim, runs: list[RunSpec], data: Runs, pairs: PairCache
) -> tuple[list[Row], list[CellVerdict]]:
    rows, cells = [], []
    for corpus in claim.corpora:
        models = "+".join(dict.fromkeys(run.model for run in runs if run.corpus == corpus))
        zs, crow = [], []
        for i, (y_score, x_score) in enumerate(zip(claim.scores, claim.against)):
            points = correlation_points(claim, runs, corpus, i, pairs, data)
            r, low, high, why = pearson(points)
            zs.append(_fisher(r, len(points)))
            row = Row(
                claim.id, models, corpus, y_score, x_score, y_score, "paper", "correlation",
                None, claim.paper_relative(i), claim.paper_relative(i),
                None, None, None, None, r, low, high, r, low, high,
                zs[-1].se, None, len(points), len(points),
                "Pearson r, Fisher z interval over the text sources", why,
            )  # fmt: skip
            crow.append(row)
        rows += crow
        summary = summarise(zs)
        paper = [claim.paper_relative(i) for i in range(len(claim.scores))]
        paper_r = math.tanh(sum(math.atanh(p) for p in paper) / len(paper)) if paper and None not in paper else None
        lo = None if summary.low is None else math.tanh(summary.low)
        hi = None if summary.high is None else math.tanh(summary.high)
        est = None if summary.estimate is None else math.tanh(summary.estimate)
        reason = next((r.note for r in crow if r.note), "") if summary.estimate is None else ""
        cells.append(
            CellVerdict(
                claim.id,
                claim.where,
                models,
                corpus,
                "",
                "",
                ", ".join(claim.scores),
                "correlation",
                paper_r,
                est,
                lo,
                hi,
                summary.se,
                None,
                summary.p_value,
                None,
                max((r.n_folds for r in crow), default=0),
                max((len(r.plan.suite.items) for r in runs if r.corpus == corpus), default=0),
                "",
                reason,
                details=[Comparison("", summary, paper_r, reason)],
            )  # fmt: skip
        )
    return rows, cells


# ---------------------------------------------------------------- convergence claims (graphmax's Figure 2)


def convergence(run: RunSpec, system: str, T: int) -> dict:
    """The iterations the solver took at each decoding step of ``system`` in the run (the
    generations' ``stats.iterations``), against T - 1 updates: how many steps its stopping rule
    ended early, and the mean certified duality gap."""
    from maxbench.benchmark.rundir import GENERATIONS, read_rows

    steps, early, gaps = 0, 0, []
    for row in read_rows(run.run_dir / GENERATIONS):
        if row.get("system") != system:
            continue
        stats = row.get("stats") or {}
        its = stats.get("iterations") or []
        steps += len(its)
        early += sum(1 for it in its if it < T - 1)
        gaps += [g for g in stats.get("gap") or [] if g is not None]
    return {"steps": steps, "early": early, "mean_gap": sum(gaps) / len(gaps) if gaps else None}


def _convergence(claim: Claim, runs: list[RunSpec], data: Runs) -> tuple[list[Row], list[CellVerdict]]:
    T = int(claim.paper_method[0])
    rows, cells = [], []
    method = claim.methods[0]
    for model in claim.models or list(dict.fromkeys(r.model for r in runs)):
        for corpus in claim.corpora:
            found = [
                r for r in _cells_runs(runs, model, corpus, (method,)) if (r.run_dir / "generations.jsonl").exists()
            ]
            got = [convergence(r, r.roles[method], T) for r in found]
            steps, early = sum(g["steps"] for g in got), sum(g["early"] for g in got)
            gaps = [g["mean_gap"] for g in got if g["mean_gap"] is not None]
            share = early / steps if steps else None
            gap = sum(gaps) / len(gaps) if gaps else None
            how = (
                f"{early} of {steps} decoding steps ended by the stopping rule before T = {T} (the others ran all "
                f"{T - 1} updates)" + (f"; mean certified duality gap {gap:.3g} nats" if gap is not None else "")
                if steps
                else "no generations"
            )
            rows.append(
                Row(
                    claim.id,
                    model,
                    corpus,
                    method,
                    "",
                    "iterations",
                    "paper",
                    "convergence",
                    None,
                    float(T),
                    None,
                    None,
                    None,
                    float(T - 1),
                    None,
                    share,
                    None,
                    None,
                    share,
                    None,
                    None,
                    None,
                    None,
                    len(found),
                    sum(len(r.plan.suite.items) for r in found),
                    how,
                    "",
                    True,
                )  # fmt: skip
            )
            if not steps:
                v = Verdict(NOT_COMPARABLE, "no generations of the paper solver")
            elif early == steps:
                v = Verdict(REPRODUCED, f"every decoding step met the stopping rule within T = {T}")
            elif early == 0:
                v = Verdict(NOT_REPRODUCED, how)
            else:
                v = Verdict(INCONCLUSIVE, how)
            cells.append(
                CellVerdict(
                    claim.id,
                    claim.where,
                    model,
                    corpus,
                    method,
                    "",
                    "iterations",
                    "convergence",
                    None,
                    share,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    len(found),
                    rows[-1].n_prompts,
                    v.verdict,
                    v.why,
                    counted=False,
                    diagnostic=True,
                )  # fmt: skip
            )
    return rows, cells


# ---------------------------------------------------------------- cells


def claim_cells(
    claim: Claim, paper: Paper, runs: list[RunSpec], data: Runs, pairs: PairCache
) -> tuple[list[Row], list[CellVerdict]]:
    """Every row of a claim and its cells (one per base model x corpus x method), before Holm's step."""
    if not claim.runnable:
        cell = CellVerdict(
            claim.id, claim.where, "", "", "", "", "", claim.kind, None, None, None, None, None, None, None, None,
            0, 0, NOT_COMPARABLE, claim.reason, counted=not claim.diagnostic, diagnostic=claim.diagnostic,
        )  # fmt: skip
        return [], [cell]
    if claim.kind == "correlation":
        return _correlation(claim, runs, data, pairs)
    if claim.kind == "convergence":
        return _convergence(claim, runs, data)
    rows, cells = [], []
    for model in claim.models or list(dict.fromkeys(r.model for r in runs)):
        for corpus in claim.corpora:
            for method in claim.methods:
                diagnostic = claim.diagnostic or method in paper.diagnostic_roles
                parts = []
                for baseline in claim.baselines:
                    found = _cells_runs(runs, model, corpus, (method, baseline))
                    args = (model, corpus, method, baseline)
                    mine = [
                        _row(claim, *args, sc, "paper", i, found, data, pairs, diagnostic)
                        for i, sc in enumerate(claim.scores)
                    ]
                    also = [
                        _row(claim, *args, sc, "maxbench", i, found, data, pairs, diagnostic)
                        for i, sc in enumerate(claim.also)
                    ]
                    rows += mine + also  # the paper's variants first, then maxbench's (the order shown)
                    parts.append((baseline, mine))
                cells.append(_cell(claim, model, corpus, method, parts, diagnostic))
    return rows, cells


def _cell(claim: Claim, model, corpus, method, parts, diagnostic) -> CellVerdict:
    """The cell of one method on one base model and corpus against each of its competitors."""
    details = []
    for baseline, mine in parts:
        est = summarise([r.rel for r in mine])
        reason = next((r.note for r in mine if r.note), "") if not est.defined else ""
        details.append(Comparison(baseline, est, _paper_effect([r.paper_relative for r in mine]), reason))
    n_prompts = min((r.n_prompts for _, mine in parts for r in mine), default=0)
    n_folds = min((r.n_folds for _, mine in parts for r in mine), default=0)
    one = details[0] if len(details) == 1 else None
    return CellVerdict(
        claim.id, claim.where, model, corpus, method, ", ".join(b for b, _ in parts), ", ".join(claim.scores), claim.kind,
        one and one.paper, one and one.est.estimate, one and one.est.low, one and one.est.high,
        one and one.est.se, one and one.est.df,
        None, None, n_folds, n_prompts, "", "",
        counted=not diagnostic, diagnostic=diagnostic, details=details,
    )  # fmt: skip


def _paper_effect(values: list[float | None]) -> float | None:
    """The paper's effect of a summarised comparison: the mean of its scores' relative effects."""
    return sum(values) / len(values) if values and None not in values else None


def _judge(claim: Claim, c: CellVerdict, comp: Comparison, significant: bool = True) -> Verdict:
    """One comparison of a cell on its interval (a correlation's back on the r scale)."""
    est = comp.est
    if c.kind == "correlation":
        lo, hi = (None, None) if est.low is None else (math.tanh(est.low), math.tanh(est.high))
        band, scale = NEGLIGIBLE_R, "r"
    else:
        lo, hi, band, scale = est.low, est.high, NEGLIGIBLE, "%"
    return decide(
        claim.direction, lo, hi, comp.paper, band=band, significant=significant, hardware=claim.hardware,
        reason=comp.reason, scale=scale,
    )  # fmt: skip


def decide_cells(paper: Paper, cells: list[CellVerdict]) -> None:
    """The verdict of every cell: each comparison's verdict on its interval, the cell's from its
    comparisons (``aggregate``), then Holm's step over the paper's counted cells, which judges a
    cell it does not reject as if its interval contained 0. Diagnostics are decided on their own
    intervals, outside the family."""
    family = []
    for c in cells:
        if not c.details:
            continue  # decided where built (a convergence diagnostic, a claim that cannot run)
        claim = next(x for x in paper.claims if x.id == c.claim)
        for comp in c.details:
            comp.verdict = _judge(claim, c, comp)
        c.p_value = deciding_p([(comp.verdict, comp.est.p_value) for comp in c.details])
        v = aggregate([(comp.baseline, comp.verdict) for comp in c.details])
        c.verdict, c.why = v.verdict, v.why
        if c.counted and c.verdict != NOT_COMPARABLE and c.p_value is not None:
            family.append((c, claim))
    adjusted, rejects = holm_step([c.p_value for c, _ in family])
    for (c, claim), p_adj, significant in zip(family, adjusted, rejects):
        c.p_holm = p_adj
        for comp in c.details:
            comp.verdict = _judge(claim, c, comp, significant)
        v = aggregate([(comp.baseline, comp.verdict) for comp in c.details])
        c.verdict, c.why = v.verdict, v.why


def trained_heads(runs: list[RunSpec]) -> dict[tuple[str, str], dict]:
    """(run, system) -> the training record (``head_training``) of every system with a trained head."""
    heads = {}
    for r in runs:
        try:
            manifest = json.loads((r.run_dir / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        for system, res in (manifest.get("resources") or {}).items():
            if any(k.endswith("_head") for k in res or {}):
                heads[(r.run_dir.name, system)] = head_training(r, system)
    return heads


def flag_cells(paper: Paper, runs: list[RunSpec], data: Runs, cells: list[CellVerdict], heads: dict) -> None:
    """Labels: few prompts, partial (with why), an untrained trained head (never counted as
    reproduced), a cell repeating an earlier cell's evidence (counted once)."""
    seen: dict[tuple, str] = {}
    for c in cells:
        if not c.corpus:
            continue  # a claim that cannot run
        claim = next(x for x in paper.claims if x.id == c.claim)
        c.flags.extend(claim.flags)  # the paper file's own labels (e.g. hardware-dependent)
        if c.n_prompts and c.n_prompts < FEW_PROMPTS:
            c.flags.append(f"{FLAG_FEW} ({c.n_prompts})")
        # partial: a run of the cell is partial (every planned fold of the cell is a run here)
        roles = tuple(x for x in (c.method, *c.baselines.split(", ")) if x)
        models = c.model.split("+")
        planned = [r for r in runs if r.model in models and r.corpus == c.corpus and all(x in r.roles for x in roles)]
        why = sorted({f"{r.run_dir.name}: {data.partial_for(r, roles)}" for r in planned if data.partial_for(r, roles)})
        # a --roles piece: the cell's roles the protocol plans for the run but this piece left out
        pieces = [r for r in runs if r.model in models and r.corpus == c.corpus and r.planned and r not in planned]
        why += sorted(
            {
                f"{r.run_dir.name}: " + ", ".join(x for x in roles if x not in r.roles) + " not generated in this piece"
                for r in pieces
                if all(x in r.planned for x in roles)
            }
        )
        if why:
            c.flags.append(f"{FLAG_PARTIAL}: " + "; ".join(why))
        # the method's trained head: its best epoch the untrained one
        recs = [
            heads[(r.run_dir.name, r.roles[c.method])]
            for r in planned
            if (r.run_dir.name, r.roles.get(c.method)) in heads
        ]
        if recs:
            untrained = any(x["untrained"] for x in recs)
            unknown = all(x["best_epoch"] is None for x in recs)
            tiny = c.rel_low is not None and -UNTRAINED_LIKE <= c.rel_low and c.rel_high <= UNTRAINED_LIKE
            if untrained or (unknown and tiny):
                what = (
                    "the head's best validation epoch is 0: the untrained head, exactly the base softmax"
                    if untrained
                    else "the head's training history is not recorded, and its difference from the base softmax lies "
                    f"within +-{100 * UNTRAINED_LIKE:g}%: indistinguishable from the untrained head, which is exactly "
                    "the base softmax"
                )
                c.flags.append(f"{FLAG_UNTRAINED}: {what}")
                if c.verdict in (REPRODUCED, SMALLER):
                    c.why = f"never counted as reproduced: {what} (on its interval alone: {c.verdict}, {c.why})"
                    c.verdict = INCONCLUSIVE
        # the same evidence as an earlier cell (the same comparisons of the same scores)
        key = (c.model, c.corpus, c.method, c.baselines, c.scores, claim.direction, c.kind, c.diagnostic)
        if key in seen and c.counted:
            c.same_as, c.counted = seen[key], False
            c.flags.append(f"the same evidence as {seen[key]}: counted once")
        else:
            seen.setdefault(key, c.claim)


def claim_verdict(cells: list[CellVerdict]) -> tuple[str, str]:
    """One claim from its cells: their verdict when they agree, else 'mixed' with the counts."""
    vs = [c.verdict for c in cells]
    if not vs:
        return NOT_COMPARABLE, "no cell"
    if len(set(vs)) == 1:
        return vs[0], f"{len(vs)} cell{'s' if len(vs) > 1 else ''}"
    counts = ", ".join(f"{k} {vs.count(k)}" for k in VERDICTS if k in vs)
    return MIXED, counts


def with_settings(paper: Paper) -> Paper:
    """``paper`` with its sensitivity settings' claims (``CLAIM@SETTING``, diagnostic) among its claims."""
    from dataclasses import replace

    extra = tuple(c for _, c in sensitivity_claims(paper))
    return replace(paper, claims=paper.claims + extra) if extra else paper


def build(paper: Paper, runs: list[RunSpec], pairs: PairCache) -> tuple[list[Row], list[CellVerdict], dict]:
    data = Runs(runs)
    rows, cells = [], []
    judged = with_settings(paper)  # the sensitivity settings' claims are judged like any diagnostic
    for claim in judged.claims:
        r, c = claim_cells(claim, judged, runs, data, pairs)
        rows += r
        cells += c
    decide_cells(judged, cells)
    heads = trained_heads(runs)
    flag_cells(judged, runs, data, cells, heads)
    mark_identical(rows)
    return rows, cells, heads


def mark_identical(rows: list[Row]) -> None:
    """A maxbench-variant row with its paper variant's numbers is marked ``identical_to`` it; a row
    an earlier claim already has (same comparison, score and numbers) is marked ``same_as`` it."""
    shown: dict[tuple, str] = {}
    by_cmp: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        by_cmp.setdefault((r.claim, r.model, r.corpus, r.method, r.baseline), {})[r.score] = r
    for r in rows:
        if r.variant == "maxbench":
            peers = by_cmp[(r.claim, r.model, r.corpus, r.method, r.baseline)]
            twin = peers.get(r.peer)
            twin = twin if twin is not None and twin.variant == "paper" and twin.numbers == r.numbers else None
            if twin is not None and r.difference is not None:
                r.identical_to = twin.score
                continue
        key = (r.model, r.corpus, r.method, r.baseline, r.score, r.numbers)
        if key in shown and shown[key] != r.claim:
            r.same_as = shown[key]
        else:
            shown.setdefault(key, r.claim)


# ---------------------------------------------------------------- rendering


def _f(v: float | None, sd: float | None = None) -> str:
    if v is None:
        return "n/a"
    text = f"{v:.4g}"
    return text + (f" ± {sd:.2g}" if sd is not None else "")


def _pct(v: float | None) -> str:
    if v is None:
        return ""
    return f"{100 * v:+,.0f}%" if abs(v) >= 1 else f"{100 * v:+.3g}%"


def _rel(est: float | None, lo: float | None, hi: float | None, kind: str = "difference") -> str:
    if est is None:
        return "n/a"
    if kind == "correlation":
        return f"r {est:+.3f}" + ("" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]")
    if kind == "convergence":
        return f"{100 * est:.3g}% of steps"
    return _pct(est) + ("" if lo is None else f" [{_pct(lo)}, {_pct(hi)}]")


def _ci(r: Row) -> str:
    if r.difference is None:
        return "n/a"
    if r.ci_low is None:
        return f"{r.difference:+.4g}"
    return f"{r.difference:+.4g} [{r.ci_low:+.4g}, {r.ci_high:+.4g}]"


def _p(p: float | None) -> str:
    if p is None:
        return ""
    return "<0.0001" if p < 1e-4 else f"{p:.2g}"


FILES = (("manifest", "manifest.json"), ("generations", "generations.jsonl"), ("scores", "scores.json"))


def run_table(runs: list[RunSpec]) -> list[dict]:
    """Every run the report used: its folder, suite, fitting corpus, wall seconds (``run_wall_seconds``)
    and the sha256 of its manifest, generations and scores (absent files are empty)."""
    out = []
    for r in runs:
        out.append(
            {
                "run": r.run_dir.name,
                "model": r.model,
                "corpus": r.plan.corpus,
                "fold": r.fold,
                "suite": r.plan.suite.name,
                "prompts": len(r.plan.suite.items),
                "systems": len(r.plan.systems),
                "wall_seconds": round(run_wall_seconds(r), 1),
                **{f"{n}_sha256": _sha(r.run_dir / f) for n, f in FILES},
            }
        )
    return out


def run_wall_seconds(run: RunSpec) -> float:
    """The wall time every invocation spent on one run (all phases of its timings.jsonl; 0 if none)."""
    path = run.run_dir / "timings.jsonl"
    if not path.exists():
        return 0.0
    return sum(json.loads(line)["seconds"] for line in path.read_text().splitlines() if line.strip())


def total_wall_seconds(runs: list[RunSpec]) -> float:
    """The wall time every invocation spent on these runs (all phases of their timings.jsonl)."""
    return sum(run_wall_seconds(r) for r in runs)


def _paper_cell(c: CellVerdict) -> str:
    if c.kind == "correlation":
        return "n/a" if c.paper_relative is None else f"r {c.paper_relative:+.3f}"
    if c.kind == "convergence":
        return "converges within T"
    if len(c.details) > 1 and any(d.paper is not None for d in c.details):  # one effect per competitor
        one = (lambda v: f"x{v + 1:.3g}") if c.kind == "ratio" else _pct
        return "; ".join(f"vs {d.baseline}: {'n/a' if d.paper is None else one(d.paper)}" for d in c.details)
    if c.kind == "ratio":
        return "n/a" if c.paper_relative is None else f"x{c.paper_relative + 1:.4g}"
    if c.paper_relative is None:
        return "(figure: sign only)" if c.details else ""
    return _pct(c.paper_relative)


def _cell_estimate(c: CellVerdict) -> str:
    if c.kind == "ratio" and c.relative is not None:  # a time ratio r, judged as r - 1: shown as r
        lo = "" if c.rel_low is None else f" [x{c.rel_low + 1:.3g}, x{c.rel_high + 1:.3g}]"
        return f"x{c.relative + 1:.3g}{lo}"
    if c.relative is not None or c.kind == "convergence":
        return _rel(c.relative, c.rel_low, c.rel_high, c.kind)
    if len(c.details) > 1:

        def one(e):
            if c.kind != "ratio":
                return _rel(e.estimate, e.low, e.high)
            if e.estimate is None:
                return "n/a"
            return f"x{e.estimate + 1:.3g}" + ("" if e.low is None else f" [x{e.low + 1:.3g}, x{e.high + 1:.3g}]")

        return "; ".join(f"vs {d.baseline}: {one(d.est)}" for d in c.details)
    if c.kind == "ratio" and c.details:
        e = c.details[0].est
        return (
            "n/a"
            if e.estimate is None
            else f"x{e.estimate + 1:.3g}" + ("" if e.low is None else f" [x{e.low + 1:.3g}, x{e.high + 1:.3g}]")
        )
    return "n/a"


def _cells_table(cells: list[CellVerdict], with_claim: bool = True) -> Table:
    cols = (("claim",) if with_claim else ()) + (
        "model",
        "corpus",
        "method vs baseline",
        "paper's effect",
        "maxbench, % of its baseline [95% CI] (a ratio: x)",
        "prompts (folds)",
        "Holm p",
        "verdict",
    )
    body = []
    for c in cells:
        vs = f"{c.method} vs {c.baselines}" if c.method and c.baselines else (c.method or c.scores)
        flags = "; ".join(c.flags)
        body.append(
            ((Cell(c.claim),) if with_claim else ())
            + (
                Cell(c.model or "(all)", code=bool(c.model)),
                Cell(c.corpus or "-"),
                Cell(vs),
                num(_paper_cell(c)),
                num(_cell_estimate(c)),
                num(
                    "-"
                    if not c.n_prompts
                    else f"{c.n_prompts} ({c.n_folds} text sources)"
                    if c.kind == "correlation"
                    else f"{c.n_prompts} ({c.n_folds})"
                ),
                num(_p(c.p_holm)),
                Cell(c.verdict, detail=f"({c.why})" + (f" [{flags}]" if flags else "")),
            )
        )
    return Table(cols, tuple(body), align=("l" if with_claim else "") + "llllrrrl")


def _detail_table(claims: dict[str, Claim], rows: list[Row]) -> Table:
    cols = (
        "model",
        "corpus",
        "method vs baseline",
        "score",
        "paper (baseline -> method)",
        "maxbench baseline",
        "maxbench method",
        "difference [95% CI]",
        "relative [95% CI]",
        "prompts (folds)",
    )
    body = []
    for r in rows:
        claim = claims[r.claim]
        if r.paper_method is not None and r.kind not in ("ratio",):
            paper_txt = f"{_f(r.paper_baseline)} -> {_f(r.paper_method)}" + (
                f" ({_pct(r.paper_relative)})" if r.paper_relative is not None else ""
            )
        elif r.kind == "ratio" and claim.paper_effect:
            paper_txt = f"x{claim.paper_effect:g}"
        else:
            paper_txt = "(figure)"
        rel = (
            f"x{r.difference:.3g}" + ("" if r.ci_low is None else f" [x{r.ci_low:.3g}, x{r.ci_high:.3g}]")
            if r.kind == "ratio" and r.difference is not None
            else _rel(r.relative, r.rel_low, r.rel_high)
        )
        body.append(
            (
                Cell(r.model, code=True),
                Cell(r.corpus),
                Cell(f"{r.method} vs {r.baseline}"),
                Cell(r.score + ("" if r.variant == "paper" else " (maxbench)")),
                num(paper_txt),
                num(_f(r.baseline_mean, r.baseline_sd)),
                num(_f(r.method_mean, r.method_sd)),
                num(_ci(r) if r.kind != "ratio" else "-"),
                num(rel + (f" ({r.note})" if r.note else "")),
                num(f"{r.n_prompts} ({r.n_folds})"),
            )
        )
    return Table(cols, tuple(body), align="llllrrrrrr")


def _correlation_points_table(
    claim: Claim, runs: list[RunSpec], corpus: str, pairs: PairCache, data: Runs
) -> Table | None:
    by_source: dict[str, list[str]] = {}
    for i in range(len(claim.scores)):
        for source, x, y in correlation_points(claim, runs, corpus, i, pairs, data):
            by_source.setdefault(source, ["n/a"] * (2 * len(claim.scores)))[2 * i : 2 * i + 2] = [_f(x), _f(y)]
    if not by_source:
        return None
    cols = ("text source",) + tuple(n for pair in zip(claim.against, claim.scores) for n in pair)
    return Table(cols, tuple((Cell(k), *map(num, v)) for k, v in by_source.items()), align="l" + "r" * (len(cols) - 1))


def _counts(cells: list[CellVerdict]) -> str:
    vs = [c.verdict for c in cells]
    return ", ".join(f"{k} {vs.count(k)}" for k in (*VERDICTS, MIXED) if k in vs) or "none"


def headline(paper: Paper, cells: list[CellVerdict]) -> dict:
    """The counts a report leads with: claims (one verdict each, 'mixed' where its cells differ)
    and cells (claim x base model x corpus), the diagnostics and repeated evidence left out."""
    counted = [c for c in cells if c.counted]
    claims = {}
    for claim in paper.claims:
        mine = [c for c in cells if c.claim == claim.id and not c.diagnostic]
        if claim.diagnostic or not mine:
            continue
        claims[claim.id] = claim_verdict(mine)
    by_claim = {}
    for v, _ in claims.values():
        by_claim[v] = by_claim.get(v, 0) + 1
    by_cell = {}
    for c in counted:
        by_cell[c.verdict] = by_cell.get(c.verdict, 0) + 1
    return {
        "claims": len(claims),
        "claims_by_verdict": {k: by_claim[k] for k in (*VERDICTS, MIXED) if k in by_claim},
        "claim_verdicts": {k: {"verdict": v, "cells": w} for k, (v, w) in claims.items()},
        "cells": len(counted),
        "cells_by_verdict": {k: by_cell[k] for k in VERDICTS if k in by_cell},
        "diagnostic_cells": sum(1 for c in cells if c.diagnostic and SETTING_SEP not in c.claim),
        "sensitivity_cells": sum(1 for c in cells if SETTING_SEP in c.claim),
        "repeated_cells": sum(1 for c in cells if c.same_as),
    }


def _fmt_counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def deviations(paper: Paper) -> list[Para]:
    """Every difference from the paper and what maxbench chose: the protocol's, then each claim's."""
    out = [Para("{}", (d,)) for d in paper.differences]
    for claim in paper.claims:
        for d in claim.differences:
            out.append(Para("{} ({}): {}", (claim.id, claim.where, d)))
        if not claim.runnable:
            out.append(Para("{} ({}): not run here: {}.", (claim.id, claim.where, claim.reason)))
        if claim.hardware:
            out.append(
                Para(
                    "{} ({}): the quantity depends on hardware and implementation, not on the method: shown, "
                    "judged not comparable.",
                    (claim.id, claim.where),
                )
            )
    if paper.diagnostic_roles:
        out.append(
            Para(
                "Diagnostics ({}): {}",
                (", ".join(paper.diagnostic_roles), paper.diagnostics or "kept out of the counts"),
            )
        )
    return out


def sections(
    paper: Paper,
    runs: list[RunSpec],
    rows: list[Row],
    cells: list[CellVerdict],
    command: str,
    wall: float,
    pairs: PairCache,
    heads: dict | None = None,
    warnings: list[str] | None = None,
    trace: dict | None = None,
    controls: list | None = None,
) -> list[Section]:
    data = Runs(runs)
    by_id = {c.id: c for c in with_settings(paper).claims}
    head = Section(f"Reproduction: {paper.name}", level=1)
    counts = headline(paper, cells)
    head.paragraphs += [
        Para("{} ({}).", (paper.title, paper.source)),
        Para("Command: {}", (Code(command),)),
        Para(
            f"Total wall time of its runs: {wall / 60:.1f} min (every phase of every invocation, from each run's timings.jsonl)."
        ),
        Para(
            f"Claims: {counts['claims']} ({_fmt_counts(counts['claims_by_verdict'])}). Verdicts per claim x base model "
            f"x corpus: {counts['cells']} ({_fmt_counts(counts['cells_by_verdict'])})"
            + (
                f"; left out of the counts: {counts['diagnostic_cells']} diagnostic cells"
                if counts["diagnostic_cells"]
                else ""
            )
            + (
                f" and {counts['repeated_cells']} cells repeating another's evidence"
                if counts["repeated_cells"]
                else ""
            )
            + "."
        ),
    ]
    partial = [c for c in cells if any(f.startswith(FLAG_PARTIAL) for f in c.flags) and SETTING_SEP not in c.claim]
    if partial:
        head.paragraphs.append(
            Para(
                "Partial: {} of {} cells rest on runs that are not complete: {}.",
                (
                    str(len(partial)),
                    str(len(cells)),
                    "; ".join(
                        f"{c.claim} {c.model} {c.corpus}"
                        + (f" {c.method}" if c.method else "")
                        + f" ({next(f for f in c.flags if f.startswith(FLAG_PARTIAL))[len(FLAG_PARTIAL) + 2 :]})"
                        for c in partial
                    ),
                ),
            )
        )
    for ctrl in controls or []:
        if ctrl.partial:
            head.paragraphs.append(
                Para(
                    "Partial: the section '{}' rests on {} of {} planned seeds; missing {}.",
                    (
                        ctrl.spec.title,
                        str(ctrl.n),
                        str(len(ctrl.spec.seeds)),
                        "; ".join(f"seed {x} ({', '.join(fs)})" for x, fs in ctrl.missing),
                    ),
                )
            )
    for ctrl in controls or []:
        head.paragraphs.append(Para("{} (outside the counts): {}", (ctrl.spec.title, control_summary(ctrl))))
    for w in warnings or []:
        head.paragraphs.append(Para("Warning: {}", (w,)))
    rules = Section("Verdict rules", level=2, paragraphs=[Para("{}", (RULES,))])
    summary = Section("Verdicts", level=2)
    summary.paragraphs.append(
        Para(
            "One verdict per claim x base model x corpus (its method against its baseline, or against every "
            "competitor of a 'best among' claim); the rows behind each are in the claim's section. Holm p: the "
            "cell's p-value after Holm's step over the {} counted cells that have one.",
            (str(sum(1 for c in cells if c.p_holm is not None)),),
        )
    )
    claim_rows_t = []
    for cid, v in counts["claim_verdicts"].items():
        claim = by_id[cid]
        claim_rows_t.append((Cell(cid), Cell(claim.where), Cell(v["verdict"], detail=f"({v['cells']})")))
    summary.tables.append(Table(("claim", "where", "verdict (its cells)"), tuple(claim_rows_t), align="lll"))
    summary.tables.append(_cells_table([c for c in cells if not c.diagnostic]))
    dev = Section("Deviations and reading choices", level=2, bullets=deviations(paper))
    out = [head, rules, summary, dev]
    shown_same: dict[str, list[str]] = {}
    for claim in paper.claims:
        if claim.diagnostic:
            continue
        s = Section(f"{claim.where}: {claim.id}", level=2)
        s.paragraphs.append(Para("Claim: {}", (claim.statement,)))
        if claim.paper_model:
            s.paragraphs.append(Para("Paper's numbers: {}.", (claim.paper_model,)))
        mine = [c for c in cells if c.claim == claim.id and not c.diagnostic]
        if not claim.runnable:
            s.paragraphs.append(Para("Verdict: not comparable. {}", (claim.reason,)))
            out.append(s)
            continue
        if mine:  # its cells are in the Verdicts table; here the rows behind them
            s.paragraphs.append(Para("Verdict: {} ({}); the cells are in the Verdicts table.", claim_verdict(mine)))
        crow = [r for r in rows if r.claim == claim.id and not r.diagnostic]
        visible = [r for r in crow if not r.identical_to and not r.same_as]
        if claim.kind == "correlation":
            s.tables.append(
                Table(
                    ("models", "corpus", "score vs score", "paper r", "maxbench r [95% CI]", "text sources"),
                    tuple(
                        (
                            Cell(r.model, code=True),
                            Cell(r.corpus),
                            Cell(f"{r.method} vs {r.baseline}"),
                            num(_f(r.paper_method)),
                            num(_ci(r) + (f" ({r.note})" if r.note else "")),
                            num(str(r.n_folds)),
                        )
                        for r in crow
                    ),
                    align="lllrrr",
                )
            )
            for corpus in claim.corpora:
                t = _correlation_points_table(claim, runs, corpus, pairs, data)
                if t is not None:
                    s.tables.append(t)
        elif visible:
            s.tables.append(_detail_table(by_id, visible))
        twins = sorted({f"{r.score} = {r.identical_to}" for r in crow if r.identical_to})
        if twins:
            s.bullets.append(
                Para(
                    "Not shown again: maxbench's variants that give the same numbers as the paper's here ({}).",
                    ("; ".join(twins),),
                )
            )
        same = sorted({(r.same_as, f"{r.method} vs {r.baseline} {r.score}") for r in crow if r.same_as})
        for other in sorted({a for a, _ in same}):
            what = ", ".join(sorted({b for a, b in same if a == other}))
            s.bullets.append(Para("Shown under {} (the same rows): {}.", (other, what)))
            shown_same.setdefault(claim.id, []).append(other)
        if claim.controls:
            s.tables.append(_controls_table(claim, runs[0].run_dir.parent if runs else Path(".")))
        out.append(s)
    for ctrl in controls or []:
        out += control_sections(ctrl)
    sens = sensitivity_section(paper, cells)
    if sens is not None:
        out.append(sens)
    diag = [c for c in cells if c.diagnostic and SETTING_SEP not in c.claim]
    if diag:
        d = Section("Diagnostic: " + (", ".join(paper.diagnostic_roles) or "kept out of the counts"), level=2)
        if paper.diagnostics:
            d.paragraphs.append(Para("{}", (paper.diagnostics,)))
        d.tables.append(_cells_table(diag))
        drows = [
            r
            for r in rows
            if r.diagnostic and r.kind != "convergence" and not r.identical_to and SETTING_SEP not in r.claim
        ]
        if drows:
            d.tables.append(_detail_table(by_id, drows))
        out.append(d)
        if trace:
            tr = Section("Figure 2: the trace of Algorithm 1 as printed", level=3)
            tr.paragraphs.append(Para("{}", (trace.get("description", ""),)))
            tr.paragraphs.append(Para("Written by {}.", (Code("scripts/graphmax_figure2_trace.py"),)))
            tr.tables.append(
                Table(
                    ("t", "||x^{t+1} - x^t||_2", "stopping rule (< 1e-4) met"),
                    tuple(
                        (num(str(p["t"])), num(f"{p['step_norm']:.3g}"), Cell("yes" if p["step_norm"] < 1e-4 else "no"))
                        for p in trace.get("steps", [])
                    ),
                    align="rrl",
                )
            )
            out.append(tr)
    if heads:
        h = Section("Trained heads", level=2)
        h.paragraphs.append(
            Para(
                "Each trained head's validation perplexity per epoch (epoch 0: the untrained head), where it is "
                "recorded (the run's manifest, or the head's meta.json in this machine's cache by the sha256 the "
                "manifest records)."
            )
        )
        h.tables.append(
            Table(
                ("run", "system", "best epoch", "validation perplexity by epoch", "source"),
                tuple(
                    (
                        Cell(run, code=True),
                        Cell(system, code=True),
                        num("n/a" if rec["best_epoch"] is None else str(rec["best_epoch"])),
                        num(", ".join(f"{x['epoch']}: {x['valid_ppl']:.4g}" for x in rec["history"]) or "not recorded"),
                        Cell(rec["source"] or "not recorded"),
                    )
                    for (run, system), rec in sorted(heads.items())
                ),
                align="llrll",
            )
        )
        out.append(h)
    runs_s = Section("Runs used", level=2)
    rt = run_table(runs)
    runs_s.tables.append(
        Table(
            (
                "run",
                "fitting corpus",
                "prompts",
                "systems",
                "wall time (min)",
                "manifest sha256",
                "generations sha256",
                "status",
            ),
            tuple(
                (
                    Cell(x["run"], code=True),
                    Cell(x["corpus"], code=True),
                    num(str(x["prompts"])),
                    num(str(x["systems"])),
                    num(f"{x['wall_seconds'] / 60:.1f}" if x["wall_seconds"] else "(not run)"),
                    num(x["manifest_sha256"][:16] or "(not run)"),
                    num(x["generations_sha256"][:16] or "(not run)"),
                    Cell(data.partial(r) or "complete"),
                )
                for x, r in zip(rt, runs)
            ),
            align="llrrrlll",
        )
    )
    out.append(runs_s)
    return out


def unadjusted(paper: Paper, c: CellVerdict) -> str:
    """A cell's verdict on its own interval, before Holm's step (the settings' cells, diagnostics, are
    judged that way: the sensitivity table compares like with like)."""
    claim = next((x for x in paper.claims if x.id == c.claim), None)
    if claim is None or not c.details or c.p_holm is None:
        return c.verdict
    return aggregate([(d.baseline, _judge(claim, c, d)) for d in c.details]).verdict


def sensitivity_section(paper: Paper, cells: list[CellVerdict]) -> Section | None:
    """The claims of ``[protocol.sensitivity]`` judged again under each setting (another decoding,
    another lambda), and which of their conclusions survive every setting."""
    settings = list((paper.protocol.get("sensitivity") or {}).get("settings") or {})
    mine = [c for c in cells if SETTING_SEP in c.claim]
    if not settings:
        return None
    sens = paper.protocol.get("sensitivity") or {}
    sec = Section(str(sens.get("title") or "Sensitivity"), level=2)
    sec.paragraphs.append(
        Para(
            "{} Each setting replaces some roles of the claims {} with other systems (the rest keep the protocol's), "
            "or some of their scores with others of the same texts, on {} x {}, over every fold; each cell is "
            "judged by the same rules on its own interval, outside the counts and Holm's step.",
            (
                str(sens.get("description", "")),
                ", ".join(sens.get("claims", [])),
                ", ".join(sens.get("models", [])),
                ", ".join(sens.get("corpora", [])),
            ),
        )
    )
    for name, subs in (sens.get("settings") or {}).items():
        parts = [f"{r} = {v}" for r, v in subs.items() if r != SCORES_KEY]
        parts += [f"{a} → {b}" for a, b in (subs.get(SCORES_KEY) or {}).items()]
        sec.bullets.append(Para("{}: {}", (name, "; ".join(parts))))
    survive = []
    for cid in sens.get("claims", []):
        main = {(c.model, c.corpus, c.method): c for c in cells if c.claim == cid}
        changed, missing = [], []
        judged = [x for x in mine if x.claim.split(SETTING_SEP)[0] == cid]
        for c in judged:
            setting = c.claim.split(SETTING_SEP, 1)[1]
            base = main.get((c.model, c.corpus, c.method.split(SETTING_SEP)[0]))
            if base is None or any(f.startswith(FLAG_PARTIAL) for f in c.flags) or c.verdict == NOT_COMPARABLE:
                missing.append(setting)
            elif c.verdict != unadjusted(paper, base):
                changed.append(f"{setting}: {c.verdict}")
        if not judged:
            text = "not yet judged (no run)"
        elif missing:
            text = f"not yet judged under {', '.join(dict.fromkeys(missing))} (partial or no run)"
        elif changed:
            text = "changes under " + "; ".join(changed)
        else:  # the settings that apply to this claim (a setting of scores only to the claims with them)
            text = f"survives every setting ({len({c.claim.split(SETTING_SEP, 1)[1] for c in judged})})"
        changed_roles = {c.method.split(SETTING_SEP)[0] for c in judged}
        shown = [
            c
            for (model, corpus, method), c in main.items()
            if model in sens.get("models", [model])
            and corpus in sens.get("corpora", [corpus])
            and method in changed_roles
        ]
        verdicts = ", ".join(sorted({unadjusted(paper, c) for c in shown})) or "no cell"
        survive.append((Cell(cid), Cell(verdicts), Cell(text)))
    sec.tables.append(Table(("claim", "its verdict", "under the settings"), tuple(survive), align="lll"))
    if mine:
        sec.tables.append(_cells_table(mine))
    return sec


def _controls_table(claim: Claim, runs_root: Path) -> Table:
    """The claim's scores for every system of each control run."""
    body = []
    for run in claim.controls:
        doc = _scores(runs_root / run) or {}
        for system, entry in (doc.get("systems") or {}).items():
            vals = [((entry.get("scores") or {}).get(s) or {}).get("value") for s in claim.scores]
            body.append((Cell(run, code=True), Cell(system, code=True), *(num(_f(v)) for v in vals)))
    return Table(("control run", "system", *claim.scores), tuple(body), align="ll" + "r" * len(claim.scores))


def _csv(cells: list[CellVerdict]) -> str:
    buf = io.StringIO()
    fields = [f for f in CellVerdict.__dataclass_fields__ if f != "details"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for c in cells:
        d = _cell_dict(c)
        w.writerow(
            [
                ""
                if d[k] is None
                else (
                    "; ".join(d[k]) if isinstance(d[k], list) else (f"{d[k]:.12g}" if isinstance(d[k], float) else d[k])
                )
                for k in fields
            ]
        )
    return buf.getvalue()


def _cell_dict(c: CellVerdict) -> dict:
    d = {k: v for k, v in c.__dict__.items() if k != "details"}
    d["comparisons"] = [
        {
            "baseline": x.baseline,
            "relative": x.est.estimate,
            "rel_low": x.est.low,
            "rel_high": x.est.high,
            "se": x.est.se,
            "df": x.est.df,
            "p_value": x.est.p_value,
            "paper": x.paper,
            "verdict": x.verdict.verdict if x.verdict else None,
            "why": x.verdict.why if x.verdict else None,
        }
        for x in c.details
    ]
    return d


#: the differences plot turns symmetric-logarithmic when some point lies further than this from 0
#: (in % of its baseline), linear within ±SYMLOG_LINEAR_PERCENT
SYMLOG_ABOVE_PERCENT = 1000
SYMLOG_LINEAR_PERCENT = 10


def _wide(pts: list[tuple]) -> bool:
    """Whether the differences span too much for a linear axis (see SYMLOG_ABOVE_PERCENT)."""
    return max(max(abs(d), abs(lo), abs(hi)) for _, d, lo, hi in pts) > SYMLOG_ABOVE_PERCENT


COLOURS = {REPRODUCED: "C2", SMALLER: "C8", NOT_REPRODUCED: "C3", INCONCLUSIVE: "C0", NOT_COMPARABLE: "C7"}


def _plot(cells: list[CellVerdict], path: Path) -> Figure | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One axis for every cell: its relative difference in per cent of maxbench's baseline (a time
    # ratio r as r - 1; each competitor of a 'best among' cell on its own line); r is not on it.
    pts = []
    for c in cells:
        if c.diagnostic or c.kind in ("correlation", "convergence") or SETTING_SEP in c.claim:
            continue
        for x in c.details:
            e = x.est
            if e.estimate is None or e.low is None:
                continue
            label = f"{c.claim} {c.model} {c.corpus} {c.method} vs {x.baseline}"
            pts.append((c, x, 100 * e.estimate, 100 * e.low, 100 * e.high, label))
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(pts) + 1.4))
    for y, (c, x, d, lo, hi, _) in enumerate(pts):
        ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", color=COLOURS[c.verdict], label=c.verdict)
        if x.paper is not None:
            ax.plot(100 * x.paper, y, "D", mfc="none", color="k", ms=5, label="paper's effect")
    ax.axvline(0, color="k", lw=0.8)
    ax.axvspan(-100 * NEGLIGIBLE, 100 * NEGLIGIBLE, color="0.85", lw=0)
    symlog = _wide([(None, d, lo, hi) for _, _, d, lo, hi, _ in pts])
    if symlog:  # one cell's +90,000% would flatten every other onto the null
        ax.set_xscale("symlog", linthresh=SYMLOG_LINEAR_PERCENT)
    ax.set_yticks(range(len(pts)))
    ax.set_yticklabels([label[:90] for *_, label in pts], fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    keys = [k for k in (*COLOURS, "paper's effect") if k in seen]
    ax.legend([seen[k] for k in keys], keys, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    scale = f"; linear within ±{SYMLOG_LINEAR_PERCENT}%, logarithmic beyond" if symlog else ""
    ax.set_xlabel(
        f"maxbench's difference, % of its baseline (a time ratio r: r - 1), 95% interval; "
        f"grey: the negligible band ±{100 * NEGLIGIBLE:g}%{scale}"
    )
    ax.grid(alpha=0.3)
    plt.rcParams.update({"svg.hashsalt": "maxbench"})
    with atomic_open(path) as f:
        fig.savefig(f, format="png", metadata={"Software": None}, bbox_inches="tight", dpi=100)
    plt.close(fig)
    return Figure(path.name, path.read_bytes(), "every cell's difference in % of the baseline, with its 95% interval")


def _same_metric(recorded: str, now: str) -> bool:
    """Whether a recorded signature is the installed metric's: equal, or the installed signature with
    the parts a metric appends for the data it scored (attr-acc: the suite, the attribute, the
    trained classifier, from ``|suite:`` on)."""
    return recorded == now or recorded.startswith(now + "|suite:")


def signature_warnings(paper: Paper, runs: list[RunSpec]) -> list[str]:
    """Where a run's scores.json was computed with another signature of a metric than the
    installed metric has (an evaluator's weights, which naming needs the model loaded, aside):
    the report uses the recorded numbers and says so."""
    from maxbench.benchmark.metrics.base import get_metric

    def norm(sig: str) -> str:
        return re.sub(r"\|weights:[^|]*", "", sig)

    out = []
    for m in paper.protocol.get("metrics", []):
        try:
            now = norm(get_metric(m).signature)
        except Exception:  # noqa: BLE001 - a metric that cannot name itself without loading: not checked
            continue
        stale = sorted(
            r.run_dir.name
            for r in runs
            if (doc := _scores(r.run_dir)) is not None
            and _signature(doc, m)
            and not _same_metric(norm(_signature(doc, m)), now)
        )
        if stale:
            out.append(
                f"metric '{m}' now has the signature {now}; {len(stale)} run(s) were scored with another "
                f"({', '.join(stale)}): their recorded numbers are used; `maxbench score RUN_DIR` rescores a run"
            )
    return out


def write_report(
    paper: Paper, runs: list[RunSpec], out: Path, command: str, n_resamples: int = 1000, flips: tuple = ()
) -> list[Path]:
    """Write report.md/.html/.csv/.json, differences.png and pairs.json for the runs in ``out`` (and
    the flipped-attribute check of ``flips``, ``flipped.plan_flipped``'s runs)."""
    from maxbench.benchmark.reproduce.flipped import flip_rows, flip_section

    pairs = PairCache(n_resamples, out / PAIRS)
    rows, cells, heads = build(paper, runs, pairs)
    controls = check_controls(paper, out)
    for ctrl in controls:  # the run cell each control controls says so
        for c in cells:
            if (c.claim, c.model, c.corpus, c.method) == (
                ctrl.spec.claim,
                ctrl.spec.model,
                ctrl.spec.corpus,
                ctrl.spec.method,
            ):
                c.flags.append(
                    f"control: {ctrl.spec.method} vs {ctrl.spec.control} over {ctrl.n} seed(s): {ctrl.verdict} "
                    f"(section '{ctrl.spec.title}')"
                )
    wall = total_wall_seconds(runs)
    trace_path = out / "figure2-trace.json"
    trace = json.loads(trace_path.read_text()) if trace_path.exists() else None
    warnings = signature_warnings(paper, runs)
    secs = sections(paper, runs, rows, cells, command, wall, pairs, heads, warnings, trace, controls)
    flipped = flip_rows(list(flips))
    flip = flip_section(list(flips), flipped)
    if flip is not None:
        secs.insert(len(secs) - 1, flip)  # before the runs used
    fig = _plot(cells, out / "differences.png")
    if fig is not None:
        secs[0].figures.append(fig)
    paths = [out / f"report.{ext}" for ext in ("md", "html", "csv", "json")]
    atomic_write(paths[0], render_markdown(secs))
    atomic_write(paths[1], render_html(secs, secs[0].title))
    atomic_write(paths[2], _csv(cells))
    doc = {
        "paper": paper.name,
        "command": command,
        "wall_seconds": round(wall, 1),
        "rules": RULES,
        "negligible_band": NEGLIGIBLE,
        "alpha": ALPHA,
        "headline": headline(paper, cells),
        "differences": [p.template.format(*p.args) for p in deviations(paper)],
        "warnings": warnings,
        "runs": run_table(runs),
        "cells": [_cell_dict(c) for c in cells],
        "rows": [asdict(r) for r in rows],
        "heads": [{"run": k[0], "system": k[1], **v} for k, v in sorted(heads.items())],
        "controls": [c.to_dict() for c in controls],
        "flipped": flipped,
    }
    atomic_write(paths[3], json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    pairs.save()
    return paths + ([out / "differences.png"] if fig is not None else []) + [out / PAIRS]
