"""How well the run's automatic metrics agree with a study's ratings: the rated texts joined to the
per-prompt scores of the run the study was made from (its ``scores.json``, read by ``maxbench.rundir``), then
Kendall's tau and Spearman's rho at item and system level with bootstrap intervals
(``core/rank_correlation.py``, which the explorer shows too), and the report section that shows them."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from maxbench.document import Cell, Para, Section, Table, num
from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis.ratings import Ratings
from maxbench.human_eval.report.render import fmt
from maxbench.human_eval.store.models import Item
from maxbench.human_eval.studies.create import find_study
from maxbench.rank_correlation import MetricAspect, mean_ratings, metric_rating_table, per_prompt_metrics
from maxbench.rundir import read_scores, scores_path


def study_correlations(
    session: Session, study_id: str | int, ratings: Ratings, exclude_flags: tuple[str, ...], n_resamples: int, seed: int
) -> tuple[list[MetricAspect], str]:
    """(the table, a sentence saying what it is computed from, or why there is none)."""
    study = find_study(session, study_id)
    try:  # read by the run folder's owner: stale or damaged scores are refused as every command refuses them
        scores = read_scores(Path(study.run_dir))
    except MaxbenchError as exc:
        return [], f"No metric correlations: {exc}."
    prompt_of = {
        code: pid for code, pid in session.execute(select(Item.code, Item.prompt_id).where(Item.study_id == study.id))
    }
    rows = [r for r in ratings.rows if not set(r.flags) & set(exclude_flags) and r.item in prompt_of]
    rated = mean_ratings((prompt_of[r.item], r.system, r.criterion, r.value) for r in rows)
    metrics, hib = per_prompt_metrics(scores.systems)
    if not metrics:
        return [], f"No metric correlations: {scores_path(study.run_dir)} holds no per-prompt scores."
    table = metric_rating_table(metrics, rated, hib, n_resamples, seed)
    return table, (
        f"Per-prompt scores of run {study.run_id} ({len(metrics)} scores) against the mean rating of each text; "
        f"{n_resamples} bootstrap resamples of prompts (seed {seed})."
    )


def correlation_section(table, note: str) -> Section:
    """Kendall's tau and Spearman's rho of each automatic metric with each rated aspect."""
    section = Section("Automatic metrics against human ratings")
    section.paragraphs.append(
        Para(
            note + " Item level: one point per rated text; system level: one point per system (its mean "
            "metric value and mean rating). [95% bootstrap interval]; a metric where lower is better (↓) agrees "
            "with the raters when its correlation is negative."
        )
    )
    if not table:
        return section

    def corr(v, ci):
        return num(fmt(v), detail="" if ci is None else f"[{fmt(ci[0])}, {fmt(ci[1])}]")

    rows = []
    for r in table:
        i, s = r.item, r.system
        rows.append(
            (
                Cell(r.metric + (" ↓" if r.higher_is_better is False else ""), code=True),
                Cell(r.aspect, escape=True),
                num(str(i.n)),
                corr(i.tau, i.tau_ci),
                corr(i.rho, i.rho_ci),
                num(str(s.n)),
                corr(s.tau, s.tau_ci),
                corr(s.rho, s.rho_ci),
            )
        )
    section.tables.append(
        Table(
            columns=("metric", "aspect", "texts", "item τ", "item ρ", "systems", "system τ", "system ρ"),
            rows=tuple(rows),
            align="llrrrrrr",
        )
    )
    return section
