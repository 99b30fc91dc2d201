"""The reproduction report: one table per claim (the paper's numbers beside maxbench's, the
paired difference with its 95% interval, and a verdict), rendered through the document model
(``core/document.py``) to ``report.md`` and ``report.html``, with ``report.csv``, ``report.json``
and a plot of every difference. It reads runs and scores; it never generates.

Differences against the protocol's baseline come from each run's ``scores.json`` (paired
bootstrap over prompts); against another system of the run (a lambda, sparsemax, KerBS) they are
computed here by the same paired test (``maxbench.benchmark.metrics.stats.paired_test``) from the run's
generations. Folds are combined by ``verdicts.combine_folds``; a time ratio (Table 3 of graphmax)
comes from the runs' ``timings.jsonl`` and the tokens generated. A correlation claim (Table 3 of
POSG) is Pearson's r over the text sources: every system of every run of a corpus, and the human
references, scored here with the same metric; its interval is Fisher's z interval (scipy).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from maxbench.benchmark.reproduce.papers import Claim, Paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE, combine_folds, decide, ratio_interval
from maxbench.document import Cell, Code, Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.fileio import atomic_open, atomic_write

TIME_RATIO = "time-per-token-ratio"


@dataclass
class Row:
    claim: str
    model: str
    corpus: str
    method: str
    baseline: str
    score: str
    variant: str  # "paper" (the paper's metric) or "maxbench" (maxbench's default beside it)
    paper_baseline: float | None
    paper_method: float | None
    paper_difference: float | None
    method_mean: float | None
    method_sd: float | None
    baseline_mean: float | None
    baseline_sd: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    n_folds: int
    interval: str
    verdict: str
    why: str
    # difference / maxbench's baseline (a level claim's effect in relative terms, comparable in size
    # with the paper's relative effect as absolute numbers are not); None for ratio claims
    relative_difference: float | None = None
    kind: str = "difference"  # the claim's kind: "difference", "ratio" or "correlation" (difference = r)

    @property
    def paper_relative(self) -> float | None:
        """The paper's (method - baseline) / baseline."""
        if self.paper_baseline is None or self.paper_method is None or self.paper_baseline == 0:
            return None
        return (self.paper_method - self.paper_baseline) / self.paper_baseline


def _scores(run_dir: Path) -> dict | None:
    path = run_dir / "scores.json"
    return json.loads(path.read_text()) if path.exists() else None


def _metric_of(doc: dict, score: str) -> str | None:
    return next((m for m, e in doc.get("metrics", {}).items() if score in e.get("scores", [])), None)


class PairCache:
    """Paired tests between two systems of a run that is not its baseline, computed once."""

    def __init__(self, n_resamples: int = 1000):
        self.n_resamples, self.done = n_resamples, {}

    def compare(self, run_dir: Path, a: str, b: str, metric: str, score: str):
        from maxbench.benchmark.metrics.base import get_metric
        from maxbench.benchmark.metrics.scoring import load_run
        from maxbench.benchmark.metrics.stats import paired_test

        key = (str(run_dir), a, b, metric)
        if key not in self.done:
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
                out[name] = (c.difference, lo, hi)
            self.done[key] = out
        return self.done[key].get(score)


class ReferenceScores:
    """Metrics of the human text: each suite's references scored as if a system had written them,
    computed once per (suite, metric)."""

    def __init__(self):
        self.done: dict = {}

    def value(self, run: RunSpec, doc: dict, score: str) -> float | None:
        from maxbench.benchmark.metrics.base import TextBatch, get_metric
        from maxbench.benchmark.metrics.scoring import load_run

        metric = _metric_of(doc, score)
        if metric is None:
            return None
        key = (run.plan.suite.name, metric)
        if key not in self.done:
            _, batches = load_run(run.run_dir)
            first = next(iter(batches.values()))
            # a reference metric holds each human text against the references, itself among them
            humans = TextBatch(first.reference_list, first.prompt_order, first.references)
            self.done[key] = get_metric(metric).compute(humans)
        found = self.done[key].scores.get(score)
        return None if found is None else found.value


HUMAN = "human"


def correlation_points(
    claim: Claim, runs: list[RunSpec], corpus: str, i: int, humans: ReferenceScores
) -> list[tuple[str, float, float]]:
    """(text source, x, y) for score ``i`` of a correlation claim: x = ``against[i]``, y = ``scores[i]``
    of every system of every scored run of ``corpus``, then the human references of each suite."""
    x_score, y_score = claim.against[i], claim.scores[i]
    points, suites = [], []
    for run in runs:
        doc = _scores(run.run_dir) if run.corpus == corpus else None
        if doc is None:
            continue
        where = run.model + ("" if run.fold is None else f" fold {run.fold}")
        for role, system in run.roles.items():
            entry = doc["systems"].get(system, {}).get("scores", {})
            x, y = (entry.get(x_score) or {}).get("value"), (entry.get(y_score) or {}).get("value")
            if x is not None and y is not None:
                points.append((f"{where} {role}", x, y))
        if run.plan.suite.name not in [s for s, _, _ in suites]:
            suites.append((run.plan.suite.name, run, doc))
    for name, run, doc in suites:
        x, y = humans.value(run, doc, x_score), humans.value(run, doc, y_score)
        if x is not None and y is not None:
            points.append((HUMAN + ("" if len(suites) == 1 else f" ({name})"), x, y))
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


def _correlation_rows(claim: Claim, runs: list[RunSpec], humans: ReferenceScores) -> list[Row]:
    rows = []
    for corpus in claim.corpora:
        for i, (y_score, x_score) in enumerate(zip(claim.scores, claim.against)):
            points = correlation_points(claim, runs, corpus, i, humans)
            r, low, high, why = pearson(points)
            v = decide(claim.direction, r, low, high, paper_effect=claim.paper_difference(i), reason=why)
            models = list(dict.fromkeys(run.model for run in runs if run.corpus == corpus))
            rows.append(
                Row(
                    claim.id,
                    "+".join(models),
                    corpus,
                    y_score,
                    x_score,
                    y_score,
                    "paper",
                    None,
                    claim.paper_difference(i),
                    claim.paper_difference(i),
                    None,
                    None,
                    None,
                    None,
                    r,
                    low,
                    high,
                    len(points),
                    "Pearson r, Fisher z interval over the text sources",
                    v.verdict,
                    v.why,
                    kind="correlation",
                )
            )
    return rows


def _fold_value(run: RunSpec, doc: dict, role: str, score: str):
    entry = doc["systems"].get(run.roles[role], {}).get("scores", {}).get(score) or {}
    return entry.get("value")


def _difference(run: RunSpec, doc: dict, method: str, baseline: str, score: str, pairs: PairCache):
    a, b = run.roles[method], run.roles[baseline]
    if b == run.baseline:
        c = (doc.get("comparisons", {}).get("systems", {}).get(a) or {}).get(score)
        return None if c is None else (c["difference"], c["ci_low"], c["ci_high"])
    metric = _metric_of(doc, score)
    return None if metric is None else pairs.compare(run.run_dir, a, b, metric, score)


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


def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals or len(vals) < len(values):
        return None, None
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return m, sd


def claim_rows(claim: Claim, runs: list[RunSpec], pairs: PairCache, humans: ReferenceScores | None = None) -> list[Row]:
    """Every (model, corpus, method, baseline, score) row of a claim, with its verdict (a correlation
    claim: one row per corpus and score, over every model)."""
    if not claim.runnable:
        return [
            Row(
                claim.id,
                "",
                "",
                "",
                "",
                "",
                "paper",
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                0,
                "",
                NOT_COMPARABLE,
                claim.reason,
            )
        ]
    if claim.kind == "correlation":
        return _correlation_rows(claim, runs, humans or ReferenceScores())
    rows = []
    models = list(dict.fromkeys(r.model for r in runs))
    for model in models:
        for corpus in claim.corpora:
            for method in claim.methods:
                for baseline in claim.baselines:
                    cells = [r for r in runs if r.model == model and r.corpus == corpus]
                    cells = [r for r in cells if method in r.roles and baseline in r.roles]
                    variants = [(s, "paper", i) for i, s in enumerate(claim.scores)]
                    variants += [(s, "maxbench", i) for i, s in enumerate(claim.also)]
                    for score, variant, i in variants:
                        rows.append(_row(claim, model, corpus, method, baseline, score, variant, i, cells, pairs))
    return rows


def _row(claim, model, corpus, method, baseline, score, variant, i, cells, pairs) -> Row:
    docs = [(r, _scores(r.run_dir)) for r in cells]
    docs = [(r, d) for r, d in docs if d is not None]
    null = 0.0
    if claim.kind == "ratio":
        ratios = []
        for r, _ in docs:
            tpt = time_per_token(r.run_dir)
            a, b = tpt.get(r.roles[method]), tpt.get(r.roles[baseline])
            ratios.append(a / b if a and b else None)
        comb = ratio_interval(ratios)
        m_vals, b_vals, null = [None], [None], 1.0
    else:
        diffs = [_difference(r, d, method, baseline, score, pairs) for r, d in docs]
        comb = combine_folds([d if d is not None else (None, None, None) for d in diffs])
        m_vals = [_fold_value(r, d, method, score) for r, d in docs]
        b_vals = [_fold_value(r, d, baseline, score) for r, d in docs]
    m_mean, m_sd = _mean_sd(m_vals)
    b_mean, b_sd = _mean_sd(b_vals)
    paper_b = claim.paper_baseline[i] if i < len(claim.paper_baseline) else None
    paper_m = claim.paper_method[i] if i < len(claim.paper_method) else None
    if not docs:
        reason = "no scored run for this model and corpus yet"
    elif claim.kind != "ratio" and not any(_metric_of(d, score) for _, d in docs):
        reason = f"score '{score}' is not in the runs' scores.json (is its metric in the protocol?)"
    else:
        reason = ""
    v = decide(
        claim.direction,
        comb.estimate,
        comb.low,
        comb.high,
        null=null,
        paper_effect=claim.paper_difference(i),
        comparable=claim.comparable,
        reason=reason,
    )
    return Row(
        claim.id,
        model,
        corpus,
        method,
        baseline,
        score,
        variant,
        paper_b,
        paper_m,
        claim.paper_difference(i),
        m_mean,
        m_sd,
        b_mean,
        b_sd,
        comb.estimate,
        comb.low,
        comb.high,
        comb.n_folds,
        comb.method,
        v.verdict,
        v.why,
        comb.estimate / b_mean if comb.estimate is not None and b_mean and claim.kind != "ratio" else None,
        claim.kind,
    )


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


def _ci(r: Row) -> str:
    if r.difference is None:
        return "n/a"
    if r.ci_low is None:
        return f"{r.difference:+.4g}"
    return f"{r.difference:+.4g} [{r.ci_low:+.4g}, {r.ci_high:+.4g}]"


FILES = (("manifest", "manifest.json"), ("generations", "generations.jsonl"), ("scores", "scores.json"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def run_table(runs: list[RunSpec]) -> list[dict]:
    """Every run the report used: its folder, suite, fitting corpus and the sha256 of its manifest,
    generations and scores (absent files are empty)."""
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
                **{f"{n}_sha256": _sha(r.run_dir / f) for n, f in FILES},
            }
        )
    return out


def total_wall_seconds(runs: list[RunSpec]) -> float:
    """The wall time every invocation spent on these runs (all phases of their timings.jsonl)."""
    total = 0.0
    for r in runs:
        path = r.run_dir / "timings.jsonl"
        if path.exists():
            total += sum(json.loads(line)["seconds"] for line in path.read_text().splitlines() if line.strip())
    return total


def _correlation_tables(s: Section, claim: Claim, runs: list[RunSpec], crows: list[Row], humans: ReferenceScores):
    """A correlation claim: r per corpus and score with its verdict, then the points behind it."""
    s.tables.append(
        Table(
            ("models", "corpus", "score vs score", "paper r", "maxbench r [95% CI]", "text sources", "verdict"),
            tuple(
                (
                    Cell(r.model, code=True),
                    Cell(r.corpus),
                    Cell(f"{r.method} vs {r.baseline}"),
                    num(_f(r.paper_method)),
                    num(_ci(r)),
                    num(str(r.n_folds)),
                    Cell(r.verdict, detail=f"({r.why})" if r.why else ""),
                )
                for r in crows
            ),
            align="lllrrrl",
        )
    )
    for corpus in claim.corpora:
        by_source: dict[str, list[str]] = {}
        for i in range(len(claim.scores)):
            for source, x, y in correlation_points(claim, runs, corpus, i, humans):
                by_source.setdefault(source, ["n/a"] * (2 * len(claim.scores)))[2 * i : 2 * i + 2] = [_f(x), _f(y)]
        if by_source:
            cols = ("text source",) + tuple(n for pair in zip(claim.against, claim.scores) for n in pair)
            s.tables.append(
                Table(
                    cols,
                    tuple((Cell(k), *map(num, v)) for k, v in by_source.items()),
                    align="l" + "r" * (len(cols) - 1),
                )
            )
    if claim.paper_model:
        s.paragraphs.append(Para("Paper's numbers: {}.", (claim.paper_model,)))


def sections(
    paper: Paper,
    runs: list[RunSpec],
    rows: list[Row],
    command: str,
    wall: float,
    humans: ReferenceScores | None = None,
) -> list[Section]:
    counts = {}
    for r in rows:
        if r.variant == "paper":
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
    head = Section(f"Reproduction: {paper.name}", level=1)
    head.paragraphs += [
        Para("{} ({}).", (paper.title, paper.source)),
        Para("Command: {}", (Code(command),)),
        Para(
            f"Total wall time of its runs: {wall / 60:.1f} min (every phase of every invocation, from each run's timings.jsonl)."
        ),
        Para(
            "Verdicts on the paper's own metric variants: "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            + "."
        ),
        Para(
            "Verdict rules: reproduced when maxbench's paired difference (method - baseline; a ratio for times) has "
            "the paper's sign and its 95% interval excludes the null; not reproduced when the interval lies on the "
            "other side (or, where the paper's effect size is comparable, excludes it); not comparable when the "
            "interval contains the null (too wide to decide) or the protocol cannot run. Absolute numbers of the "
            "paper's models are shown for reference only."
        ),
    ]
    diff = Section("Protocol differences that remain", level=2, bullets=[Para("{}", (d,)) for d in paper.differences])
    out = [head, diff]
    by_claim: dict[str, list[Row]] = {}
    for r in rows:
        by_claim.setdefault(r.claim, []).append(r)
    for claim in paper.claims:
        s = Section(f"{claim.where}: {claim.id}", level=2)
        s.paragraphs.append(Para("Claim: {}", (claim.statement,)))
        crows = by_claim.get(claim.id, [])
        if not claim.runnable:
            s.paragraphs.append(Para("Verdict: not comparable. {}", (claim.reason,)))
        elif claim.kind == "correlation":
            _correlation_tables(s, claim, runs, crows, humans or ReferenceScores())
        else:
            cols = (
                "model",
                "corpus",
                "method vs baseline",
                "score",
                "paper (baseline -> method)",
                "maxbench baseline",
                "maxbench method",
                "difference [95% CI]",
                "relative",
                "folds",
                "verdict",
            )
            table_rows = []
            for r in crows:
                paper_txt = (
                    f"{_f(r.paper_baseline)} -> {_f(r.paper_method)}"
                    + (f" ({_pct(r.paper_relative)})" if r.paper_relative is not None else "")
                    if r.paper_method is not None
                    else (f"x{r.paper_difference:g}" if claim.kind == "ratio" and r.paper_difference else "(figure)")
                )
                table_rows.append(
                    (
                        Cell(r.model, code=True),
                        Cell(r.corpus),
                        Cell(f"{r.method} vs {r.baseline}"),
                        Cell(r.score + ("" if r.variant == "paper" else " (maxbench)")),
                        num(paper_txt),
                        num(_f(r.baseline_mean, r.baseline_sd)),
                        num(_f(r.method_mean, r.method_sd)),
                        num(_ci(r)),
                        num(_pct(r.relative_difference) or "n/a"),
                        num(str(r.n_folds)),
                        Cell(r.verdict, detail=f"({r.why})" if r.why else ""),
                    )
                )
            s.tables.append(Table(cols, tuple(table_rows), align="lllllrrrrrl"))
            if claim.paper_model:
                s.paragraphs.append(Para("Paper's numbers: base model {}.", (claim.paper_model,)))
        for d in claim.differences:
            s.bullets.append(Para("Protocol difference: {}", (d,)))
        out.append(s)
    runs_s = Section("Runs used", level=2)
    rt = run_table(runs)
    runs_s.tables.append(
        Table(
            ("run", "fitting corpus", "prompts", "systems", "manifest sha256", "generations sha256"),
            tuple(
                (
                    Cell(x["run"], code=True),
                    Cell(x["corpus"], code=True),
                    num(str(x["prompts"])),
                    num(str(x["systems"])),
                    num(x["manifest_sha256"][:16] or "(not run)"),
                    num(x["generations_sha256"][:16] or "(not run)"),
                )
                for x in rt
            ),
            align="llrrll",
        )
    )
    out.append(runs_s)
    return out


def _csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    fields = list(Row.__dataclass_fields__)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for r in rows:
        w.writerow(["" if v is None else (f"{v:.12g}" if isinstance(v, float) else v) for v in asdict(r).values()])
    return buf.getvalue()


#: the differences plot turns symmetric-logarithmic when some point lies further than this from 0
#: (in % of its baseline), linear within ±SYMLOG_LINEAR_PERCENT
SYMLOG_ABOVE_PERCENT = 1000
SYMLOG_LINEAR_PERCENT = 10


def _wide(pts: list[tuple]) -> bool:
    """Whether the differences span too much for a linear axis (see SYMLOG_ABOVE_PERCENT)."""
    return max(max(abs(d), abs(lo), abs(hi)) for _, d, lo, hi in pts) > SYMLOG_ABOVE_PERCENT


def _plot(rows: list[Row], path: Path) -> Figure | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One axis for every claim: the difference in per cent of maxbench's baseline (a time ratio r
    # as r - 1), so BLEU fractions, perplexities and time ratios share a scale and the null is 0.
    pts = []
    for r in rows:
        if r.variant != "paper" or r.difference is None or r.ci_low is None or r.ci_high is None:
            continue
        if r.kind == "correlation":  # r is not on this scale
            continue
        if r.kind == "ratio":
            pts.append((r, 100 * (r.difference - 1), 100 * (r.ci_low - 1), 100 * (r.ci_high - 1)))
        elif r.baseline_mean:
            k = 100 / abs(r.baseline_mean)
            pts.append((r, k * r.difference, k * r.ci_low, k * r.ci_high))
    if not pts:
        return None
    colours = {"reproduced": "C2", "not reproduced": "C3", "not comparable": "C7"}
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(pts) + 1.4))
    for y, (r, d, lo, hi) in enumerate(pts):
        ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", color=colours[r.verdict], label=r.verdict)
        if r.paper_relative is not None:
            ax.plot(100 * r.paper_relative, y, "D", mfc="none", color="k", ms=5, label="paper's effect")
    ax.axvline(0, color="k", lw=0.8)
    symlog = _wide(pts)
    if symlog:  # one claim's +90,000% would flatten every other row onto the null
        ax.set_xscale("symlog", linthresh=SYMLOG_LINEAR_PERCENT)
    ax.set_yticks(range(len(pts)))
    ax.set_yticklabels(
        [f"{r.claim} {r.model} {r.corpus} {r.method}-{r.baseline} {r.score}"[:90] for r, *_ in pts], fontsize=7
    )
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    keys = [k for k in (*colours, "paper's effect") if k in seen]
    ax.legend([seen[k] for k in keys], keys, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    scale = f"; linear within ±{SYMLOG_LINEAR_PERCENT}%, logarithmic beyond" if symlog else ""
    ax.set_xlabel(f"maxbench's difference, % of its baseline (a time ratio r: r - 1), with 95% interval{scale}")
    ax.grid(alpha=0.3)
    plt.rcParams.update({"svg.hashsalt": "maxbench"})
    with atomic_open(path) as f:
        fig.savefig(f, format="png", metadata={"Software": None}, bbox_inches="tight", dpi=100)
    plt.close(fig)
    return Figure(
        path.name, path.read_bytes(), "every claim row's difference in % of the baseline, with its 95% interval"
    )


def write_report(paper: Paper, runs: list[RunSpec], out: Path, command: str, n_resamples: int = 1000) -> list[Path]:
    """Write report.md/.html/.csv/.json (and differences.png) for the runs in ``out``."""
    pairs, humans = PairCache(n_resamples), ReferenceScores()
    rows = [row for claim in paper.claims for row in claim_rows(claim, runs, pairs, humans)]
    wall = total_wall_seconds(runs)
    secs = sections(paper, runs, rows, command, wall, humans)
    fig = _plot(rows, out / "differences.png")
    if fig is not None:
        secs[0].figures.append(fig)
    paths = [out / f"report.{ext}" for ext in ("md", "html", "csv", "json")]
    atomic_write(paths[0], render_markdown(secs))
    atomic_write(paths[1], render_html(secs, secs[0].title))
    atomic_write(paths[2], _csv(rows))
    doc = {
        "paper": paper.name,
        "command": command,
        "wall_seconds": round(wall, 1),
        "differences": list(paper.differences),
        "runs": run_table(runs),
        "rows": [asdict(r) for r in rows],
    }
    atomic_write(paths[3], json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    return paths + ([out / "differences.png"] if fig is not None else [])
