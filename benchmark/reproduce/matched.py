"""Matched operating points: a paper's ``[[matched]]`` entries, for claims that trade quality for
diversity (a method more diverse and worse on quality than softmax at one setting each). Each entry
asks whether the method is better than the baseline at the same diversity: both are swept over one
option (``papers.MatchedSpec.sweeps``), each sweep is a curve in the plane of the ``quality`` score
against the ``match`` score, and the two curves are compared where they share a value of the matching
score, by the frontier statistics (``maxbench.benchmark.metrics.frontiers.matched``): each curve
interpolated linearly between adjacent points in the option's order, never extrapolated, the
interval a percentile bootstrap over prompts resampled jointly for every point of both curves.

The value matched (``at``) is the matching score of the method's own operating point (the protocol's
system of its role) by default: "had the baseline been tuned to the method's diversity, which would be
better?"; or the baseline's operating point, the human row's value, or a number.

A row is a sensitivity reading, never a verdict: it is outside the counts and Holm's step. Its
reading is one of: the method better, the baseline better (the interval of the difference, method
minus baseline, excludes 0 on that side by the quality score's goal), no difference shown (the
interval holds 0), no overlap (a curve does not reach the value: never extrapolated), or not
comparable, with one reason (most often: the runs lack the sweep points, and the row names the sweep
needed and the command that generates it). Each run holding every point of both sweeps gives a row
(the sweeps are planned in the first fold only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from maxbench.benchmark.metrics import frontiers as fr
from maxbench.benchmark.present.frontiers import Sweep, curves, goal_of, human_entry
from maxbench.benchmark.reproduce import fmt
from maxbench.benchmark.reproduce.evidence import Evidence
from maxbench.benchmark.reproduce.papers import MatchedSpec, Paper
from maxbench.benchmark.reproduce.protocol import RunSpec, system_string
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE
from maxbench.document import Cell, Para, Section, Table, num
from maxbench.errors import MaxbenchError
from maxbench.rundir import ScoresFile

METHOD_BETTER = "method better"
BASELINE_BETTER = "baseline better"
NO_DIFFERENCE = "no difference shown"
NO_OVERLAP = "no overlap"
AT_TEXT = {
    "method": "the method's operating point",
    "baseline": "the baseline's operating point",
    "human": "the human row's value",
}


@dataclass(kw_only=True)
class MatchedRow:
    """One matched comparison of an entry on one run (or why there is none)."""

    id: str
    claims: tuple[str, ...]
    model: str
    corpus: str
    run: str = ""
    method: str
    baseline: str
    quality: str
    match: str
    goal: str = ""
    target: float | None = None
    target_source: str = ""
    method_value: float | None = None  # the method's quality at the matched value (first segment)
    baseline_value: float | None = None
    difference: float | None = None  # method - baseline (first pair of segments)
    low: float | None = None
    high: float | None = None
    segments: str = ""  # each pair of bracketing segments, with its difference and interval
    method_text: str = ""  # how the interval was drawn
    reading: str = NOT_COMPARABLE
    why: str = ""

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def point_systems(spec: MatchedSpec, role: str, model: str, layer: str) -> Sweep:
    """``role``'s sweep on ``model`` (its ``layer``: the protocol's LAYER/DECODING of the role): the
    points' system names in the option's increasing order."""
    from maxbench.benchmark.run.lineup import sweep_point

    knob, values = spec.sweep(role)
    base = system_string(model, layer)
    try:
        names = tuple(sweep_point(base, knob, v).name for v in values)
    except MaxbenchError as exc:
        raise MaxbenchError(f"matched '{spec.id}': the sweep of {role} over {knob} on {model}: {exc}") from None
    return Sweep(f"{role} {knob}", knob, tuple(values), names)


def sweep_text(spec: MatchedSpec) -> str:
    return " and ".join(f"{r} over {k} ({', '.join(f'{v:g}' for v in vals)})" for r, k, vals in spec.sweeps)


def _target(spec: MatchedSpec, scores: ScoresFile, run: RunSpec) -> tuple[float | None, str]:
    """The matched value and where it comes from (None and why where it is undefined)."""
    if isinstance(spec.at, float):
        return spec.at, "the value given (at)"
    if spec.at == "human":
        entry = ((human_entry(scores) or {}).get("scores") or {}).get(spec.match) or {}
        v = entry.get("value")
        ok = isinstance(v, (int, float)) and math.isfinite(v)
        return (float(v), f"the human row's {spec.match}") if ok else (None, f"the run has no human row's {spec.match}")
    role = spec.method if spec.at == "method" else spec.baseline
    system = run.roles.get(role)
    entry = (((scores.systems.get(system) or {}).get("scores") or {}).get(spec.match)) or {}
    v = entry.get("value")
    if not (isinstance(v, (int, float)) and math.isfinite(v)):
        return None, f"{role}'s operating point has no {spec.match}"
    return float(v), f"{role}'s operating point ({spec.match} of {system})"


def _reading(goal: str, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return NO_DIFFERENCE
    if low <= 0 <= high:
        return NO_DIFFERENCE
    above = low > 0
    return METHOD_BETTER if above == (goal != "lower") else BASELINE_BETTER


def compare(spec: MatchedSpec, paper: Paper, evidence: Evidence) -> list[MatchedRow]:
    """The rows of one entry: one per run of its base models and corpora that holds every point of
    both sweeps, scored; a base model and corpus without such a run is one row, not comparable,
    saying which sweep is needed and how to generate it."""
    roles = paper.roles()
    out = []
    for model in spec.models:
        for corpus in spec.corpora:
            base = dict(
                id=spec.id, claims=spec.claims, model=model, corpus=corpus, method=spec.method,
                baseline=spec.baseline, quality=spec.quality, match=spec.match,
            )  # fmt: skip
            runs = [r for r in evidence.runs if r.model == model and r.corpus == corpus and spec.method in r.roles]
            sweeps = [point_systems(spec, role, model, roles[role]) for role in (spec.method, spec.baseline)]
            need = {x for s in sweeps for x in s.systems}
            holding, shortest = [], None
            for r in runs:
                doc = evidence.scores.doc(r) or {}
                systems = doc.get("systems") or {}
                missing = sorted(
                    x
                    for x in need
                    if not all(
                        isinstance(((systems.get(x) or {}).get("scores") or {}).get(s, {}).get("value"), (int, float))
                        for s in (spec.quality, spec.match)
                    )
                )
                if missing:
                    if shortest is None or len(missing) < len(shortest[1]):
                        shortest = (r, missing)
                else:
                    holding.append((r, ScoresFile.from_dict(r.run_dir, doc)))
            if not holding:
                where = (
                    f" ({len(shortest[1])} of {len(need)} points not scored in {shortest[0].run_dir.name})"
                    if shortest
                    else " (no run)"
                )
                out.append(
                    MatchedRow(
                        **base,
                        why=f"needs a sweep of {sweep_text(spec)}, scored with {spec.quality} and {spec.match}"
                        f"{where}: generate it with `maxbench reproduce {paper.name} --models {model} "
                        f"--corpora {corpus} --roles {spec.id}`",
                    )
                )
                continue
            for r, scores in holding:
                out.append(_row(spec, base, r, scores, sweeps))
    return out


def _row(spec: MatchedSpec, base: dict, run: RunSpec, scores: ScoresFile, sweeps: list[Sweep]) -> MatchedRow:
    boot = scores.bootstrap or {}
    n_resamples, seed, level = (
        int(boot.get("n_resamples", 1000)),
        int(boot.get("seed", 0)),
        float(boot.get("level", 0.95)),
    )
    first = ((scores.systems.get(sweeps[0].systems[0]) or {}).get("scores") or {}).get(spec.quality) or {}
    goal = goal_of(scores, spec.quality, first)
    if goal == "closest":
        # a distance to the human value is not a difference of the two systems' values: read the
        # difference by the score's own direction
        goal = "higher" if first.get("higher_is_better", True) else "lower"
    target, source = _target(spec, scores, run)
    row = MatchedRow(**base, run=run.run_dir.name, goal=goal, target=target, target_source=source)
    if target is None:
        row.why = f"no matched value: {source}"
        return row
    a, b = curves(scores, sweeps, spec.quality, spec.match, level)
    m = fr.matched(a, b, target, n_resamples, seed, level)
    row.method_text = m.method
    if not m.overlap:
        short = [s.name for s, segs in zip(sweeps, (m.a_segments, m.b_segments)) if not segs]
        row.reading, row.why = (
            NO_OVERLAP,
            f"{' and '.join(short)} do(es) not reach {spec.match} = {fmt.value(target)}: never extrapolated",
        )
        return row
    row.method_value, row.baseline_value = m.a_segments[0].estimate, m.b_segments[0].estimate
    d = m.differences[0]
    row.difference = d.estimate
    row.low, row.high = (d.interval.low, d.interval.high) if d.interval else (None, None)
    readings = [
        _reading(goal, *((x.interval.low, x.interval.high) if x.interval else (None, None))) for x in m.differences
    ]
    row.reading = readings[0] if len(set(readings)) == 1 else NO_DIFFERENCE
    if len(set(readings)) > 1:
        row.why = "the curves bracket the value on several segments, whose readings disagree"
    row.segments = "; ".join(
        f"{spec.method} {_seg(m.a_segments, x.a)} vs {spec.baseline} {_seg(m.b_segments, x.b)}: "
        f"{fmt.value(x.estimate)}"
        + (f" [{fmt.value(x.interval.low)}, {fmt.value(x.interval.high)}]" if x.interval else "")
        for x in m.differences
    )
    return row


def _seg(segs, k: int) -> str:
    s = next(x for x in segs if x.segment == k)
    return f"{s.knob_values[0]:g}-{s.knob_values[1]:g}"


def rows(paper: Paper, evidence: Evidence) -> list[MatchedRow]:
    """Every ``[[matched]]`` entry's rows."""
    return [r for spec in paper.matched for r in compare(spec, paper, evidence)]


def section(paper: Paper, found: list[MatchedRow]) -> Section | None:
    """The report's section of matched operating points (None for a paper without entries)."""
    if not paper.matched:
        return None
    sec = Section("Matched operating points (sensitivity, outside the counts)", level=2)
    sec.paragraphs.append(
        Para(
            "Claims that trade quality for diversity compare two systems at one setting each. Here both are swept "
            "over one option and compared where their curves share a value of the matching score: each curve "
            "interpolated linearly between adjacent points in the option's order, never extrapolated; the 95% "
            "interval of the difference (method minus baseline) resamples prompts jointly for every point of both "
            "curves (a score without per-prompt values: each point drawn from its own interval, said in the "
            "method). Outside the counts and Holm's step: a reading, not a verdict."
        )
    )
    for spec in paper.matched:
        sec.paragraphs.append(
            Para(
                "{} ({}): {} against {} on {} at equal {}, matched at {}; sweeps: {}.",
                (
                    spec.title,
                    ", ".join(spec.claims) or "no claim",
                    spec.method,
                    spec.baseline,
                    spec.quality,
                    spec.match,
                    AT_TEXT.get(spec.at, spec.at) if isinstance(spec.at, str) else fmt.value(spec.at),
                    sweep_text(spec),
                ),
            )
        )
    body = []
    for r in found:
        diff = "n/a" if r.difference is None else fmt.value(r.difference)
        if r.low is not None:
            diff += f" [{fmt.value(r.low)}, {fmt.value(r.high)}]"
        body.append(
            (
                Cell(r.id),
                Cell(r.model, code=True),
                Cell(r.corpus),
                Cell(r.run or "none", code=bool(r.run)),
                num("n/a" if r.target is None else f"{r.match} = {fmt.value(r.target)}"),
                num(f"{fmt.value(r.method_value)} / {fmt.value(r.baseline_value)}"),
                num(diff),
                Cell(r.reading + (f": {r.why}" if r.why else "")),
            )
        )
    sec.tables.append(
        Table(
            ("entry", "model", "corpus", "run", "matched at", "method / baseline", "difference [95% CI]", "reading"),
            tuple(body),
            Para("Quality at the matched value of the matching score; the reading follows the quality score's goal."),
            align="llllrrrl",
        )
    )
    return sec
