"""``kind = "correlation"`` (POSG's Table 3): each of ``scores`` correlated with the score of
``against`` at the same position, Pearson's r over the text sources: every protocol system (not a
sensitivity setting's ``ROLE@SETTING`` system, which would change a counted claim's evidence) of
every scored run of a corpus, and each suite's human references scored with the same metric (kept
in ``pairs.json``). Its interval is Fisher's z interval (scipy); the scores of one claim are
summarised on Fisher's z scale and judged on r, with the negligible band ``verdicts.NEGLIGIBLE_R``.
One cell per corpus, over every base model."""

from __future__ import annotations

import math

from maxbench.benchmark.reproduce import fmt
from maxbench.benchmark.reproduce.cells import CellVerdict, Comparison, Row
from maxbench.benchmark.reproduce.claims import ClaimKind
from maxbench.benchmark.reproduce.evidence import Evidence, metric_of, signature
from maxbench.benchmark.reproduce.papers import SETTING_SEP, Claim, Paper
from maxbench.benchmark.reproduce.verdicts import LEVEL, NEGLIGIBLE_R, Estimate, summarise
from maxbench.document import Cell, Table, num

HUMAN = "human"


def correlation_points(claim: Claim, corpus: str, i: int, evidence: Evidence) -> list[tuple[str, float, float]]:
    """(text source, x, y) for score ``i`` of a correlation claim: x = ``against[i]``, y = ``scores[i]``
    of every protocol system of every scored run of ``corpus`` (not the sensitivity settings'
    ``ROLE@SETTING`` systems), then the human references of each suite."""
    x_score, y_score = claim.against[i], claim.scores[i]
    points, suites = [], []
    for run in evidence.runs:
        doc = evidence.scores.doc(run) if run.corpus == corpus else None
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
            metric = metric_of(doc, score)
            vals.append(
                None if metric is None else evidence.pairs.humans(run, metric, signature(doc, metric)).get(score)
            )
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


def fisher(r: float | None, n: int) -> Estimate:
    """r on Fisher's z scale, se 1 / sqrt(n - 3)."""
    if r is None or n < 4 or abs(r) >= 1:
        return Estimate(None, None, None)
    z, se = math.atanh(r), 1 / math.sqrt(n - 3)
    return Estimate(z, z - 1.959963984540054 * se, z + 1.959963984540054 * se, se, None, 1)


def _tanh(x: float | None) -> float | None:
    return None if x is None else math.tanh(x)


class Correlation(ClaimKind):
    name = "correlation"
    needs_baseline = False
    scale = "r"
    band = NEGLIGIBLE_R
    plotted = False

    def check(self, claim: Claim) -> str:
        if not claim.against or len(claim.against) != len(claim.scores):
            return "a correlation claim (and only one) needs 'against', one per score"
        return ""

    def paper_relative(self, claim: Claim, i: int) -> float | None:
        """The paper's r."""
        return claim.paper_method[i] if i < len(claim.paper_method) else None

    def paper_difference(self, claim: Claim, i: int) -> float | None:
        return self.paper_relative(claim, i)

    def cells(self, claim: Claim, paper: Paper, evidence: Evidence) -> tuple[list[Row], list[CellVerdict]]:
        rows, cells = [], []
        runs = evidence.runs
        for corpus in claim.corpora:
            models = "+".join(dict.fromkeys(run.model for run in runs if run.corpus == corpus))
            zs, crow = [], []
            for i, (y_score, x_score) in enumerate(zip(claim.scores, claim.against)):
                points = correlation_points(claim, corpus, i, evidence)
                r, low, high, why = pearson(points)
                zs.append(fisher(r, len(points)))
                paper_r = claim.paper_relative(i)
                how = "Pearson r, Fisher z interval over the text sources"
                crow.append(
                    Row(
                        claim=claim.id,
                        model=models,
                        corpus=corpus,
                        method=y_score,
                        baseline=x_score,
                        score=y_score,
                        kind=claim.kind,
                        paper_method=paper_r,
                        paper_relative=paper_r,
                        diff=Estimate(r, low, high, None, None, len(points), how),
                        rel=Estimate(r, low, high, zs[-1].se, None, len(points), how),
                        n_prompts=len(points),
                        note=why,
                    )
                )
            rows += crow
            summary = summarise(zs)
            paper = [claim.paper_relative(i) for i in range(len(claim.scores))]
            paper_r = math.tanh(sum(math.atanh(p) for p in paper) / len(paper)) if paper and None not in paper else None
            reason = next((r.note for r in crow if r.note), "") if summary.estimate is None else ""
            r_scale = Estimate(_tanh(summary.estimate), _tanh(summary.low), _tanh(summary.high), summary.se, None)
            cells.append(
                CellVerdict(
                    claim=claim.id,
                    where=claim.where,
                    model=models,
                    corpus=corpus,
                    scores=", ".join(claim.scores),
                    kind=claim.kind,
                    paper_relative=paper_r,
                    est=r_scale,
                    p_value=summary.p_value,
                    n_folds=max((r.n_folds for r in crow), default=0),
                    n_prompts=max((len(r.plan.suite.items) for r in runs if r.corpus == corpus), default=0),
                    why=reason,
                    details=[Comparison(baseline="", est=summary, paper=paper_r, reason=reason)],
                )
            )
        return rows, cells

    def interval(self, est: Estimate, level: float = LEVEL) -> tuple[float | None, float | None]:
        """Back from Fisher's z to r."""
        lo, hi = est.widened(level)
        return (None, None) if lo is None else (math.tanh(lo), math.tanh(hi))

    def paper_text(self, c: CellVerdict) -> str:
        return "n/a" if c.paper_relative is None else f"r {c.paper_relative:+.3f}"

    def estimate_text(self, c: CellVerdict) -> str:
        e = c.est
        if e.estimate is None:
            return "n/a"
        return f"r {e.estimate:+.3f}" + ("" if e.low is None else f" [{e.low:+.3f}, {e.high:+.3f}]")

    def prompts_text(self, c: CellVerdict) -> str:
        return f"{c.n_prompts} ({c.n_folds} text sources)"

    def tables(self, claim: Claim, rows: list[Row], evidence: Evidence) -> list[Table]:
        """r per score against the paper's, then each corpus's text sources with their two scores."""
        out = [
            Table(
                ("models", "corpus", "score vs score", "paper r", "maxbench r [95% CI]", "text sources"),
                tuple(
                    (
                        Cell(r.model, code=True),
                        Cell(r.corpus),
                        Cell(f"{r.method} vs {r.baseline}"),
                        num(fmt.value(r.paper_method)),
                        num(fmt.difference(r.diff) + (f" ({r.note})" if r.note else "")),
                        num(str(r.n_folds)),
                    )
                    for r in rows
                ),
                align="lllrrr",
            )
        ]
        for corpus in claim.corpora:
            by_source: dict[str, list[str]] = {}
            for i in range(len(claim.scores)):
                for source, x, y in correlation_points(claim, corpus, i, evidence):
                    by_source.setdefault(source, ["n/a"] * (2 * len(claim.scores)))[2 * i : 2 * i + 2] = [
                        fmt.value(x),
                        fmt.value(y),
                    ]
            if by_source:
                cols = ("text source",) + tuple(n for pair in zip(claim.against, claim.scores) for n in pair)
                body = tuple((Cell(k), *map(num, v)) for k, v in by_source.items())
                out.append(Table(cols, body, align="l" + "r" * (len(cols) - 1)))
        return out
