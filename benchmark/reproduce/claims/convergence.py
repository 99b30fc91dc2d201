"""``kind = "convergence"`` (graphmax's Figure 2): the iterations the solver took at each decoding
step of the claim's one method, which the generations record (``stats.iterations``), against the
paper's step budget T (``paper_method``): reproduced when every step met the stopping rule within
T, not reproduced when none did, inconclusive in between. A diagnostic of maxbench's reading: shown
in the diagnostics section, never counted and outside Holm's step."""

from __future__ import annotations

from maxbench import rundir
from maxbench.benchmark.reproduce.cells import CellVerdict, Row
from maxbench.benchmark.reproduce.claims import ClaimKind
from maxbench.benchmark.reproduce.evidence import Evidence, runs_of
from maxbench.benchmark.reproduce.papers import Claim, Paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import (
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Estimate,
    Verdict,
)
from maxbench.document import Table


def convergence(run: RunSpec, system: str, T: int) -> dict:
    """The iterations the solver took at each decoding step of ``system`` in the run (the
    generations' ``stats.iterations``), against T - 1 updates: how many steps its stopping rule
    ended early, and the mean certified duality gap."""
    steps, early, gaps = 0, 0, []
    for row in rundir.read_generations(run.run_dir, missing_ok=True):
        if row.get("system") != system:
            continue
        stats = row.get("stats") or {}
        its = stats.get("iterations") or []
        steps += len(its)
        early += sum(1 for it in its if it < T - 1)
        gaps += [g for g in stats.get("gap") or [] if g is not None]
    return {"steps": steps, "early": early, "mean_gap": sum(gaps) / len(gaps) if gaps else None}


class Convergence(ClaimKind):
    name = "convergence"
    needs_baseline = False
    plotted = False
    in_rows_table = False
    reads_scores = False

    def check(self, claim: Claim) -> str:
        if len(claim.methods) != 1 or len(claim.paper_method) != 1:
            return "a convergence claim needs one method and the paper's T in 'paper_method'"
        return super().check(claim)

    def cells(self, claim: Claim, paper: Paper, evidence: Evidence) -> tuple[list[Row], list[CellVerdict]]:
        T = int(claim.paper_method[0])
        rows, cells = [], []
        method = claim.methods[0]
        runs = evidence.runs
        for model in claim.models or list(dict.fromkeys(r.model for r in runs)):
            for corpus in claim.corpora:
                found = [r for r in runs_of(runs, model, corpus, (method,)) if rundir.has_generations(r.run_dir)]
                got = [convergence(r, r.roles[method], T) for r in found]
                steps, early = sum(g["steps"] for g in got), sum(g["early"] for g in got)
                gaps = [g["mean_gap"] for g in got if g["mean_gap"] is not None]
                share = early / steps if steps else None
                gap = sum(gaps) / len(gaps) if gaps else None
                how = (
                    f"{early} of {steps} decoding steps ended by the stopping rule before T = {T} (the others ran "
                    f"all {T - 1} updates)"
                    + (f"; mean certified duality gap {gap:.3g} nats" if gap is not None else "")
                    if steps
                    else "no generations"
                )
                n_prompts = sum(len(r.plan.suite.items) for r in found)
                rows.append(
                    Row(
                        claim=claim.id,
                        model=model,
                        corpus=corpus,
                        method=method,
                        baseline="",
                        score="iterations",
                        kind=claim.kind,
                        paper_method=float(T),
                        baseline_mean=float(T - 1),
                        diff=Estimate(share, None, None, None, None, len(found), how),
                        rel=Estimate(share, None, None),
                        n_prompts=n_prompts,
                        diagnostic=True,
                    )
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
                        claim=claim.id,
                        where=claim.where,
                        model=model,
                        corpus=corpus,
                        method=method,
                        scores="iterations",
                        kind=claim.kind,
                        est=Estimate(share, None, None),
                        n_folds=len(found),
                        n_prompts=n_prompts,
                        verdict=v.verdict,
                        why=v.why,
                        counted=False,
                        diagnostic=True,
                    )
                )
        return rows, cells

    def paper_text(self, c: CellVerdict) -> str:
        return "converges within T"

    def estimate_text(self, c: CellVerdict) -> str:
        return "n/a" if c.est.estimate is None else f"{100 * c.est.estimate:.3g}% of steps"

    def tables(self, claim: Claim, rows: list[Row], evidence: Evidence) -> list[Table]:
        return []  # its rows are the diagnostics section's (the cell says how many steps)
