"""``kind = "difference"``: a method against one or more competitors on some scores of the same
texts. Per run (fold), each score's paired difference (method - baseline) and its interval, from
the run's ``scores.json`` against the run's baseline, else from ``pairs.json``; and its relative
effect method / baseline - 1 on the log-ratio scale from the per-prompt data (``evidence.log_ratio``);
folds combined by ``verdicts.combine_folds`` (the log-ratios, then back to ratio - 1: an interval in
(-100%, +inf)); a comparison's correlated scores summarised on the log scale by ``verdicts.summarise``; one cell per base model x corpus x method, with one
comparison per competitor. The paper's metric comes first; maxbench's variant of it (``also``) is a
row beside it, outside the verdict."""

from __future__ import annotations

import math
from dataclasses import replace

from maxbench.benchmark.reproduce.cells import CellVerdict, Comparison, Row
from maxbench.benchmark.reproduce.claims import ClaimKind
from maxbench.benchmark.reproduce.evidence import (
    Evidence,
    fold_value,
    log_ratio,
    metric_of,
    n_prompts,
    paired_binary,
    paired_difference,
    runs_of,
    signature,
)
from maxbench.benchmark.reproduce.papers import Claim, Paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import Estimate, combine_folds, mcnemar_p, relative, summarise

#: how a row's note says how many of its seed pairs it rests on
SEEDS_NOTE = "seeds: "


def _estimate(got: list | None, how: str) -> Estimate:
    """A seed-averaged (estimate, low, high, se, df) as an ``Estimate`` of one run (df None: normal)."""
    if not got:
        return Estimate(None, None, None, None, None, 1, how)
    est, lo, hi, se, df = got
    return Estimate(est, lo, hi, se, df if df is not None and math.isfinite(df) else None, 1, how)


def mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sd over folds (None if a fold has no value; no sd for one fold)."""
    vals = [v for v in values if v is not None]
    if not vals or len(vals) < len(values):
        return None, None
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return m, sd


def paper_effect(values: list[float | None]) -> float | None:
    """The paper's effect of a summarised comparison: the mean of its scores' relative effects."""
    return sum(values) / len(values) if values and None not in values else None


class Difference(ClaimKind):
    name = "difference"

    def cells(self, claim: Claim, paper: Paper, evidence: Evidence) -> tuple[list[Row], list[CellVerdict]]:
        rows, cells = [], []
        runs = evidence.runs
        for model in claim.models or list(dict.fromkeys(r.model for r in runs)):
            for corpus in claim.corpora:
                for method in claim.methods:
                    diagnostic = claim.diagnostic or method in paper.diagnostic_roles
                    parts = []
                    for baseline in claim.baselines:
                        found = runs_of(runs, model, corpus, (method, baseline))
                        seeds = paper.seed_pairs(corpus, method, baseline)
                        mine, also = [], []
                        where = {"model": model, "corpus": corpus, "method": method, "baseline": baseline}
                        for variant, scores, into in (("paper", claim.scores, mine), ("maxbench", claim.also, also)):
                            for i, score in enumerate(scores):
                                row = self.row(claim, i, score, variant, where, found, evidence, seeds)
                                row.diagnostic = diagnostic
                                into.append(row)
                        rows += mine + also  # the paper's variants first, then maxbench's (the order shown)
                        parts.append((baseline, mine))
                    cells.append(self.cell(claim, model, corpus, method, parts, diagnostic))
        return rows, cells

    def row(
        self,
        claim: Claim,
        i: int,
        score: str,
        variant: str,
        where: dict,
        found: list[RunSpec],
        evidence: Evidence,
        seeds: list[tuple[str, str]] = (),
    ) -> Row:
        """Row ``i`` of the claim (score ``score``, of the paper's or maxbench's ``variant``) for one
        comparison (``where``: model, corpus, method and baseline) over the runs ``found``; ``seeds``
        the comparison's seed-paired roles (``Paper.seed_pairs``), if any."""
        method, baseline, corpus = where["method"], where["baseline"], where["corpus"]
        docs = [(r, evidence.scores.doc(r)) for r in found]
        docs = [(r, d) for r, d in docs if d is not None]
        paper_b, paper_m = claim.numbers(i, method, baseline, corpus)
        row = Row(
            claim=claim.id,
            **where,
            score=score,
            variant=variant,
            kind=claim.kind,
            paper_baseline=paper_b,
            paper_method=paper_m,
            paper_relative=claim.relative_for(i, method, baseline, corpus),
            n_prompts=sum(n_prompts(r, d, (method, baseline)) for r, d in docs),
            peer=claim.scores[i] if variant == "maxbench" else "",
        )
        self.measure(row, claim, docs, evidence, seeds)
        missing = [role for role in (method, baseline) for r, d in docs if r.roles[role] not in d.get("systems", {})]
        if missing and (not row.note or row.note.startswith(SEEDS_NOTE)):  # before how many seeds it has
            row.note = "; ".join(x for x in (f"'{missing[0]}' is not generated in this run yet", row.note) if x)
        if not docs:
            row.note = "no scored run for this model and corpus yet"
        return row

    def measure(self, row: Row, claim: Claim, docs: list[tuple[RunSpec, dict]], evidence: Evidence, seeds=()) -> None:
        """Fill the row's means, difference and relative difference from its runs' scores: in a run
        where two or more of the comparison's seed pairs (``Paper.seed_pairs``) are generated, from
        their seed-averaged scores (``seeded``), each pair's own estimate kept in ``row.seeds``; the
        row says how many of its seed pairs it rests on."""
        method, baseline, score = row.method, row.baseline, row.score
        diffs, rels, averaged_est = [], [], None
        m_vals = [fold_value(r, d, method, score) for r, d in docs]
        b_vals = [fold_value(r, d, baseline, score) for r, d in docs]
        why, averaged, seed_notes = "", "", []
        for k, (r, d) in enumerate(docs):
            present = [p for p in seeds if all(x in r.roles and r.roles[x] in d.get("systems", {}) for x in p)]
            got = self.seeded(row, r, d, present, evidence) if len(present) > 1 else None
            zero = bool(seeds) and seeds[0] in present  # the seed-0 pair, the one a fallback rests on
            rests = "" if got is not None else (": rests on seed 0" if zero else "")
            if seeds and 0 < len(present) < len(seeds):  # none at all: the row says what is missing
                seed_notes.append(f"{len(present)} of {len(seeds)} seed pairs generated in {r.run_dir.name}{rests}")
            elif seeds and present and got is None:
                seed_notes.append(f"no seed-averaged interval for this score{rests}")
            if got is not None:
                diffs.append(tuple(got["difference"][:3]))
                rels.append(tuple(got["log_ratio"][:3]) if got["log_ratio"] else (None, None, None))
                averaged_est = (got["difference"], got["log_ratio"])
                m_vals[k], b_vals[k] = got["a"], got["b"]
                if len(docs) == 1:
                    row.n_prompts = got["n_prompts"]  # the prompts every seed's systems were scored on
                averaged = (
                    f"seed-averaged over {got['n_seeds']} seed pairs ("
                    + ", ".join(f"{a} vs {b}" for a, b in present)
                    + "): "
                    + got["method"]
                )
                why = why or ("" if got["log_ratio"] else "a value is not positive: no ratio scale")
                continue
            got = paired_difference(r, d, method, baseline, score, evidence.pairs)
            diffs.append(got if got is not None else (None, None, None))
            lr, how = (
                (None, "")
                if got is None or None in got
                else log_ratio(r, d, method, baseline, score, got, evidence.pairs.n_resamples)
            )
            rels.append(lr if lr is not None else (None, None, None))
            why = why or (how if lr is None else "")
        row.diff = combine_folds(diffs)
        row.rel = relative(combine_folds(rels))
        if averaged and len(docs) == 1:  # one run: the seed-averaged t interval itself, its se and df
            row.diff = _estimate(averaged_est[0], averaged)
            row.rel = relative(_estimate(averaged_est[1], averaged))
        elif averaged:  # with folds, each fold's where its seeds are generated
            how = f"{row.rel.method}; where a fold has seeds: {averaged}"
            row.diff, row.rel = replace(row.diff, method=how), replace(row.rel, method=how)
        pairs = paired_binary(docs[0][0], docs[0][1], method, baseline, score) if len(docs) == 1 else None
        pairs = None if averaged else pairs
        if pairs is not None and row.rel.defined:  # one fold of a 0/1 rate: the exact test (verdicts.RULES)
            p = mcnemar_p(*pairs)
            row.rel = replace(
                row.rel, exact_p=p, method=f"{row.rel.method}; p: exact McNemar test of the paired 0/1 values"
            )
        row.method_mean, row.method_sd = mean_sd(m_vals)
        row.baseline_mean, row.baseline_sd = mean_sd(b_vals)
        if averaged and len(docs) == 1:  # one run: the sd is the seeds' (none for a side with one seed)
            for side, attr in (("method", "method_sd"), ("baseline", "baseline_sd")):
                own = {x[side]: x[f"{side}_value"] for x in row.seeds}
                setattr(row, attr, mean_sd(list(own.values()))[1])
        if docs and not any(metric_of(d, score) for _, d in docs):
            row.note = f"score '{score}' is not in the runs' scores.json"
        elif docs and any(b == 0 for b in b_vals if b is not None):
            row.note = "the baseline's value is 0: no relative scale"
        elif why and row.diff.defined:
            row.note = why
        if seed_notes and docs:
            row.note = "; ".join(x for x in (row.note, SEEDS_NOTE + "; ".join(seed_notes)) if x)

    def seeded(self, row: Row, run: RunSpec, doc: dict, present: list, evidence: Evidence) -> dict | None:
        """The seed-averaged comparison of ``row``'s score in one run over the seed pairs ``present``
        (``Pairs.seeded``), or None (a score without a seed-averaged interval: the seed-0 comparison is
        used); each pair's own difference and relative effect go to ``row.seeds``."""
        metric = metric_of(doc, row.score)
        if metric is None:
            return None
        systems = [(run.roles[a], run.roles[b]) for a, b in present]
        got = evidence.pairs.seeded(run.run_dir, systems, metric, row.score, signature(doc, metric))
        if got is None:
            return None
        for a, b in present:
            diff = paired_difference(run, doc, a, b, row.score, evidence.pairs)
            lr = None
            if diff is not None and None not in diff:
                lr, _ = log_ratio(run, doc, a, b, row.score, diff, evidence.pairs.n_resamples)
            rel = relative(combine_folds([lr or (None, None, None)]))
            row.seeds.append(
                {
                    "method": a,
                    "baseline": b,
                    "method_value": fold_value(run, doc, a, row.score),
                    "baseline_value": fold_value(run, doc, b, row.score),
                    "difference": None if diff is None else list(diff),
                    "relative": rel.estimate,
                    "rel_low": rel.low,
                    "rel_high": rel.high,
                }
            )
        return got

    def cell(self, claim: Claim, model: str, corpus: str, method: str, parts, diagnostic: bool) -> CellVerdict:
        """The cell of one method on one base model and corpus against each of its competitors."""
        details = []
        for baseline, mine in parts:
            est = summarise([r.rel for r in mine])
            reason = next((r.note for r in mine if r.note), "") if not est.defined else ""
            details.append(
                Comparison(
                    baseline=baseline, est=est, paper=paper_effect([r.paper_relative for r in mine]), reason=reason
                )
            )
        one = details[0] if len(details) == 1 else None
        return CellVerdict(
            claim=claim.id,
            where=claim.where,
            model=model,
            corpus=corpus,
            method=method,
            baselines=", ".join(b for b, _ in parts),
            scores=", ".join(claim.scores),
            kind=claim.kind,
            paper_relative=one.paper if one else None,
            est=one.est if one else Estimate(None, None, None),
            n_folds=min((r.n_folds for _, mine in parts for r in mine), default=0),
            n_prompts=min((r.n_prompts for _, mine in parts for r in mine), default=0),
            counted=not diagnostic,
            diagnostic=diagnostic,
            details=details,
        )
