"""The frontier report of a scored run with sweeps (``maxbench frontier RUN``): each sweep drawn as a
curve in a plane of two scores, matched comparisons, dominance and tuning-budget curves
(``maxbench.benchmark.metrics.frontiers`` has the statistics; docs/frontiers.md the reading).

A plane is (quality score, matching score). By default there are up to two: MAUVE against the
diversity score, and the first reference-based quality score against it, the diversity score being
the first of ``DIVERSITY`` that the sweeps scored. The matched value is the human row's value of the
matching score, else the value given (``--match``); without either, no matched comparison is made and
the report says so. Each sweep is compared with one: the sweep holding the run's baseline, else the
first (``--against``).

Writes ``frontier.md``, ``frontier.html``, ``frontier.json`` (the explorer's frontier data) and the
plots ``plots/frontier-<plane>.png`` and ``plots/budget-<plane>.png`` under the output folder.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maxbench.benchmark.metrics import frontiers as fr
from maxbench.document import Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_open, atomic_write, ensure_dir
from maxbench.rundir import ScoresFile, read_manifest, read_scores

#: the human row's system name in scores.json
HUMAN = "human (references)"
#: quality scores for the default planes: MAUVE, then scores compared with the references
QUALITY = ("mauve",)
REFERENCE_QUALITY = ("bleu-4", "rouge-l-f", "meteor", "sacrebleu", "bleu-2", "bleu-3", "bleu-5")
#: the matching (diversity) score of the default planes, the first the sweeps scored
DIVERSITY = (
    "self-bleu-4",
    "distinct-2-corpus",
    "distinct-2-per-text",
    "distinct-1-corpus",
    "self-bleu-3",
    "distinct-3-corpus",
)


def goal_of(scores: ScoresFile, score: str, entry: dict) -> str:
    """A score's goal (``frontiers.GOALS``) as its metric declared it when the run was scored (the
    metric's ``display`` info in scores.json: higher, lower, or closest to the human value); a file
    scored before goals were declared, or a score without one, ranks by ``higher_is_better``."""
    display = (((scores.metrics or {}).get(entry.get("metric")) or {}).get("display") or {}).get(score) or {}
    goal = {"higher": "higher", "lower": "lower", "human": "closest"}.get(display.get("goal"))
    if goal is not None:
        return goal
    return "higher" if entry.get("higher_is_better", True) else "lower"


def human_entry(scores: ScoresFile) -> dict | None:
    """The human row's entry (``{"scores": {...}}``, scores.json's ``human``) when the run has one."""
    return scores.human if isinstance(scores.human, dict) else None


def _value(entry: dict | None) -> float:
    v = (entry or {}).get("value")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def _score(scores: ScoresFile, system: str, name: str) -> dict | None:
    return ((scores.systems.get(system) or {}).get("scores") or {}).get(name)


@dataclass(frozen=True)
class Sweep:
    name: str
    knob: str
    values: tuple
    systems: tuple


def sweeps_of(manifest: dict, scores: ScoresFile, run_dir: Path) -> list[Sweep]:
    """The run's sweeps as its manifest records them, each point a scored system."""
    record = manifest.get("sweeps")
    if not isinstance(record, dict) or not record:
        record = derived_sweeps([x for x in scores.systems if x != HUMAN])
    if not record:
        raise MaxbenchError(
            f"{run_dir}: its manifest records no sweeps and no systems differ in one option alone; run a "
            "lineup with a sweep (docs/frontiers.md), then `maxbench frontier` on its run"
        )
    out = []
    for name, s in record.items():
        systems = tuple(s.get("systems") or ())
        missing = [x for x in systems if x not in scores.systems]
        if missing:
            raise MaxbenchError(
                f"{run_dir}: sweep {name!r} has points that are not scored ({missing[0]}); "
                f"run `maxbench score {run_dir}`"
            )
        out.append(Sweep(name, str(s.get("knob")), tuple(s.get("values") or ()), systems))
    return out


def derived_sweeps(systems: list[str]) -> dict:
    """Sweeps read from the system strings of a run whose manifest predates the ``sweeps`` record: the
    systems that differ in one numeric option alone (a layer parameter or a decoding option), at least
    two of them, in the option's increasing order; named ``MODEL/LAYER OPTION``."""
    from dataclasses import asdict

    from maxbench.systems.system_strings import parse_system

    fields = {}
    for x in systems:
        try:
            spec = parse_system(x)
        except Exception:  # a system string this maxbench cannot read joins no sweep
            continue
        f = {("param", k): v for k, v in spec.params} | {("decoding", k): v for k, v in asdict(spec.decoding).items()}
        fields[x] = (spec.model, spec.layer, spec.adapter, tuple(sorted(spec.adapter_params)), f)
    out = {}
    for knob in sorted({k for v in fields.values() for k in v[4]}):
        groups: dict = {}
        for x, (model, layer, adapter, adapter_params, f) in fields.items():
            if not isinstance(f.get(knob), (int, float)) or isinstance(f.get(knob), bool):
                continue
            rest = tuple(sorted((str(k), repr(v)) for k, v in f.items() if k != knob))
            groups.setdefault((model, layer, adapter, adapter_params, rest), []).append((f[knob], x))
        for (model, layer, *_), points in groups.items():
            if len(points) >= 2 and len({v for v, _ in points}) == len(points):
                points.sort()
                out[f"{model}/{layer} {knob[1]}"] = {
                    "knob": knob[1], "values": [v for v, _ in points], "systems": [x for _, x in points]
                }  # fmt: skip
    return out


def _scored_anywhere(scores: ScoresFile, sweeps: list[Sweep], name: str) -> bool:
    return any(math.isfinite(_value(_score(scores, x, name))) for s in sweeps for x in s.systems)


def default_planes(scores: ScoresFile, sweeps: list[Sweep]) -> list[tuple[str, str]]:
    """(quality, matching) planes: MAUVE and the first reference-based score, against the diversity score."""
    match = next((d for d in DIVERSITY if _scored_anywhere(scores, sweeps, d)), None)
    if match is None:
        raise MaxbenchError(
            f"{scores.run_dir}: no sweep point has a diversity score ({', '.join(DIVERSITY)}); "
            "score the run with self-bleu or distinct, or give a plane with --plane QUALITY,MATCH"
        )
    planes = [(q, match) for q in QUALITY if _scored_anywhere(scores, sweeps, q)]
    ref = next((q for q in REFERENCE_QUALITY if _scored_anywhere(scores, sweeps, q)), None)
    planes += [(ref, match)] if ref else []
    if not planes:
        raise MaxbenchError(
            f"{scores.run_dir}: no sweep point has a quality score ({', '.join(QUALITY + REFERENCE_QUALITY)}); "
            "give a plane with --plane QUALITY,MATCH"
        )
    return planes


def _prompt_order(scores: ScoresFile, sweeps: list[Sweep]) -> list[str]:
    seen: dict = {}
    for s in sweeps:
        for system in s.systems:
            for entry in ((scores.systems.get(system) or {}).get("scores") or {}).values():
                seen.update(dict.fromkeys((entry or {}).get("per_prompt") or {}))
    return list(seen)


def _samples(scores: ScoresFile, systems: tuple, name: str, prompts: list[str], level: float) -> fr.Samples:
    """The score at each point: per-prompt values where every point's add up to its value, else its
    value and the standard error its interval implies (``frontiers``' module docstring)."""
    entries = [_score(scores, x, name) or {} for x in systems]
    values = np.array([_value(e) for e in entries])
    columns = []
    for e, v in zip(entries, values):
        pp = e.get("per_prompt") or {}
        col = np.array([pp.get(p) if isinstance(pp.get(p), (int, float)) else np.nan for p in prompts], dtype=float)
        defined = np.isfinite(col)
        if (
            not math.isfinite(v)
            or not defined.any()
            or not math.isclose(col[defined].mean(), v, rel_tol=1e-9, abs_tol=1e-12)
        ):
            columns = None
            break
        columns.append(col)
    if columns is not None and prompts:
        return fr.Samples(values, np.column_stack(columns))
    se = np.array([fr.se_from_interval(e.get("ci_low"), e.get("ci_high"), level) for e in entries])
    metric = next((e.get("metric") for e in entries if e.get("metric")), None)
    return fr.Samples(values, None, se, score_range(scores, metric, name))


def score_range(scores: ScoresFile, metric: str | None, score: str) -> tuple[float, float]:
    """The range the score's metric declared when the run was scored (scores.json's ``ranges``); a
    file scored before ranges were recorded, or an end not given, is unbounded."""
    r = (((scores.metrics or {}).get(metric) or {}).get("ranges") or {}).get(score)
    ends = list(r) if isinstance(r, (list, tuple)) and len(r) == 2 else [None, None]
    lo, hi = (float(v) if isinstance(v, (int, float)) else default for v, default in zip(ends, (-math.inf, math.inf)))
    return lo, hi


def curves(scores: ScoresFile, sweeps: list[Sweep], quality: str, match: str, level: float) -> list[fr.Curve]:
    """Each sweep as a curve in the plane of ``quality`` against ``match``, every curve's per-prompt
    values in the one prompt order of these sweeps (so that one resample moves every point at once)."""
    prompts = _prompt_order(scores, sweeps)
    return [
        fr.Curve(
            s.name, s.knob, s.values, s.systems,
            _samples(scores, s.systems, match, prompts, level),
            _samples(scores, s.systems, quality, prompts, level),
        )
        for s in sweeps
    ]  # fmt: skip


def _check_plane(scores: ScoresFile, sweeps: list[Sweep], plane: tuple[str, str]) -> None:
    for name in plane:
        if not _scored_anywhere(scores, sweeps, name):
            known = sorted({n for s in sweeps for x in s.systems for n in (scores.systems[x].get("scores") or {})})
            raise MaxbenchError(
                f"plane {plane[0]},{plane[1]}: {name} is n/a for every point of every sweep in {scores.run_dir}; "
                f"choose scores the sweeps have (--plane QUALITY,MATCH; scored: {', '.join(known)})"
            )


def parse_plane(text: str) -> tuple[str, str]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise MaxbenchError(f"--plane {text!r}: give two score names, QUALITY,MATCH (e.g. mauve,self-bleu-4)")
    return parts[0], parts[1]


@dataclass
class Plane:
    quality: str
    match: str
    goal: str
    human: tuple[float, float] | None
    target: float | None
    target_source: str
    curves: list[fr.Curve]
    sweeps: list[Sweep]
    entries: dict  # system -> (x entry, y entry)
    matched: list[fr.Matched]
    dominance: list[fr.Dominance]
    budget: dict  # sweep -> fr.Budget (E best of N with intervals)
    against: str


def build(
    run_dir: Path,
    planes: list[tuple[str, str]] | None = None,
    against: str | None = None,
    match: float | None = None,
) -> tuple[ScoresFile, list[Plane]]:
    """Every plane's curves and statistics for a scored run with sweeps; bad input is refused in one
    line before anything is computed."""
    run_dir = Path(run_dir)
    scores = read_scores(run_dir)
    manifest = read_manifest(run_dir)
    sweeps = sweeps_of(manifest, scores, run_dir)
    planes = planes or default_planes(scores, sweeps)
    for plane in planes:
        _check_plane(scores, sweeps, plane)
    names = [s.name for s in sweeps]
    if against is None:
        baseline = (scores.comparisons or {}).get("baseline")
        against = next((s.name for s in sweeps if baseline in s.systems), names[0])
    elif against not in names:
        raise MaxbenchError(f"--against {against!r}: no such sweep in {run_dir}; its sweeps: {', '.join(names)}")
    boot = scores.bootstrap or {}
    n_resamples, seed, level = (
        int(boot.get("n_resamples", 1000)),
        int(boot.get("seed", 0)),
        float(boot.get("level", 0.95)),
    )
    human = human_entry(scores)
    out = []
    for quality, match_name in planes:
        first = next(_score(scores, x, quality) for s in sweeps for x in s.systems if _score(scores, x, quality))
        goal = goal_of(scores, quality, first)
        hx, hy = (
            _value(((human or {}).get("scores") or {}).get(match_name)),
            _value(((human or {}).get("scores") or {}).get(quality)),
        )
        human_point = (hx, hy) if human is not None and (math.isfinite(hx) or math.isfinite(hy)) else None
        if match is not None:
            target, source = float(match), "the value given (--match)"
        elif math.isfinite(hx):
            target, source = hx, f"the human row's {match_name}"
        else:
            target, source = None, "none: no human row and no --match value"
        if goal == "closest" and not math.isfinite(hy):
            goal = "higher"  # no human value to be close to: the score's own direction
        drawn = curves(scores, sweeps, quality, match_name, level)
        ref = drawn[names.index(against)]
        matched, dominance = [], []
        for c in drawn:
            if c is ref:
                continue
            if not (np.isfinite(c.x.value).any() or np.isfinite(ref.x.value).any()):
                raise MaxbenchError(
                    f"matching score {match_name}: no system of {c.name!r} or {ref.name!r} scored it; "
                    "choose a matching score they have (--plane QUALITY,MATCH)"
                )
            if target is not None:
                matched.append(fr.matched(c, ref, target, n_resamples, seed, level))
            dominance.append(fr.dominance(c, ref, goal, hy, n_resamples, seed, level))
        matched = fr.adjust(matched)  # the plane's matched differences are one family (Holm)
        budget = {b.name: b for b in fr.budgets(drawn, goal, hy, n_resamples, seed, level)}
        entries = {
            x: (_score(scores, x, match_name) or {}, _score(scores, x, quality) or {})
            for s in sweeps
            for x in s.systems
        }
        out.append(
            Plane(
                quality,
                match_name,
                goal,
                human_point,
                target,
                source,
                drawn,
                sweeps,
                entries,
                matched,
                dominance,
                budget,
                against,
            )
        )
    return scores, out


# ---------------------------------------------------------------- rendering


def _f(v, digits=4) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def _p(v) -> str:
    return "" if v is None else f"{v:.3g}"


def _ci(ci) -> str:
    return "" if ci is None else f"[{_f(ci.low)}, {_f(ci.high)}]"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _goal_text(goal: str) -> str:
    return {"higher": "higher is better", "lower": "lower is better", "closest": "closest to the human row is best"}[
        goal
    ]


def _sections(scores: ScoresFile, planes: list[Plane], figures: dict) -> list[Section]:
    run_id = scores.run_id or scores.run_dir.name
    top = Section(f"Frontiers: {run_id}", level=1)
    top.paragraphs.append(
        Para(
            "Each sweep is a curve in a plane of a quality score against a matching (diversity) score, its "
            "points in the knob's order, each with its 95% interval. Matched comparisons interpolate each "
            "curve linearly between adjacent points at one value of the matching score and never "
            "extrapolate; dominance compares the best interpolated quality over the shared range; the "
            "tuning budget is the expected best quality of N points drawn at random from a sweep "
            "(docs/frontiers.md)."
        )
    )
    out = [top]
    for p in planes:
        sec = Section(f"{p.quality} against {p.match}", level=2)
        sec.paragraphs.append(
            Para(
                "Quality {} ({}); matching score {}; matched value {} ({}); each sweep compared with {}.",
                (p.quality, _goal_text(p.goal), p.match, _f(p.target), p.target_source, p.against),
            )
        )
        if p.human is not None:
            sec.paragraphs.append(
                Para("Human row: {} {}, {} {}.", (p.match, _f(p.human[0]), p.quality, _f(p.human[1])))
            )
        sec.figures.extend(figures.get((p.quality, p.match), []))
        sec.figure_row = True
        rows = []
        for s in p.sweeps:
            for v, x in zip(s.values, s.systems):
                ex, ey = p.entries[x]
                rows.append(
                    (
                        _cell(s.name),
                        num(f"{s.knob}={v:g}" if isinstance(v, (int, float)) else f"{s.knob}={v}"),
                        num(_f(_value(ex)), detail=_ci(_interval(ex))),
                        num(_f(_value(ey)), detail=_ci(_interval(ey))),
                    )
                )
        sec.tables.append(Table(("sweep", "point", p.match, p.quality), tuple(rows), Para("The points.")))
        out.append(sec)
        out.append(_matched_section(p))
        out.append(_dominance_section(p))
        out.append(_budget_section(p))
    return out


def _cell(text: str):
    from maxbench.document import Cell

    return Cell(text)


def _interval(entry: dict):
    lo, hi = entry.get("ci_low"), entry.get("ci_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return fr.ConfidenceInterval(lo, hi)
    return None


def _matched_section(p: Plane) -> Section:
    sec = Section(f"Matched comparisons: {p.quality} at {p.match} = {_f(p.target)}", level=3)
    if p.target is None:
        sec.paragraphs.append(Para("No matched value: the run has no human row; give one with --match VALUE."))
        return sec
    rows = []
    for m in p.matched:
        if not m.overlap:
            missing = [n for n, segs in ((m.a, m.a_segments), (m.b, m.b_segments)) if not segs]
            rows.append(
                (
                    _cell(m.a),
                    _cell(m.b),
                    num("no overlap"),
                    num(""),
                    num(""),
                    num(""),
                    _cell("does not reach the value: " + ", ".join(missing)),
                )
            )
            continue
        for d in m.differences:
            sa = next(s for s in m.a_segments if s.segment == d.a)
            sb = next(s for s in m.b_segments if s.segment == d.b)
            rows.append(
                (
                    _cell(m.a),
                    _cell(m.b),
                    num(_f(d.estimate), detail=_ci(d.interval) or "(no interval: a point has none)"),
                    num(_p(d.p_value)),
                    num(_p(d.holm_p)),
                    num(f"{_f(sa.estimate)} / {_f(sb.estimate)}"),
                    _cell(
                        f"between {sa.knob_values[0]:g} and {sa.knob_values[1]:g} / {sb.knob_values[0]:g} and {sb.knob_values[1]:g}"
                    ),
                )
            )
    method = p.matched[0].method if p.matched else fr.JOINT_METHOD
    family = sum(len(m.differences) for m in p.matched)
    sec.tables.append(
        Table(
            ("sweep", "against", "difference", "p", "Holm p", "values", "segments (knob)"),
            tuple(rows),
            Para(
                "A minus B in {} at the matched value, with its 95% interval ({}); one row per pair of bracketing "
                "segments. p: the two-sided bootstrap p-value of no difference, the test the interval inverts (twice "
                "the smaller share of resamples on either side of 0). Holm p: Holm's step-down adjustment over the {} "
                "differences of this table, one family, so that the chance of any false difference among them stays "
                "at 5%; the intervals are per comparison, not adjusted: a difference holds for the family where its "
                "Holm p is below 0.05.",
                (p.quality, method, str(family)),
            ),
            align="llrrrrl",
        )
    )
    return sec


def _dominance_section(p: Plane) -> Section:
    sec = Section(f"Dominance: {p.quality} over the shared range of {p.match}", level=3)
    rows = []
    for d in p.dominance:
        if d.shared is None:
            rows.append((_cell(d.a), _cell(d.b), _cell("no overlap"), num(""), num("")))
            continue
        names = {"a": d.a, "b": d.b, "neither": "neither"}
        stretches = "; ".join(f"{_f(s.low)}-{_f(s.high)}: {names[s.better]}" for s in d.stretches)
        crossings = "; ".join(f"{_f(c.x)} {_ci(c.interval)}" for c in d.crossings) or "none"
        rows.append((_cell(d.a), _cell(d.b), _cell(d.verdict), _cell(stretches), num(crossings)))
    sec.tables.append(
        Table(
            ("sweep", "against", "verdict", f"better by stretch of {p.match}", "crossings"),
            tuple(rows),
            Para(
                "Better: the 95% pointwise interval of the difference in {} excludes 0; a crossing's interval is the stretch around it where the interval holds 0.",
                (p.quality,),
            ),
            align="lllll",
        )
    )
    return sec


def _budget_section(p: Plane) -> Section:
    sec = Section(f"Tuning budget: expected best {p.quality} of N points", level=3)
    k = max((len(b.estimates) for b in p.budget.values()), default=0)
    rows = tuple(
        (
            _cell(name),
            *(
                num(_f(b.estimates[n]), detail=_ci(b.intervals[n])) if n < len(b.estimates) else num("")
                for n in range(k)
            ),
        )
        for name, b in p.budget.items()
    )
    methods = sorted({b.method for b in p.budget.values()})
    sec.tables.append(
        Table(
            ("sweep", *(f"N={n + 1}" for n in range(k))),
            rows,
            Para(
                "Expected best {} ({}) over N points drawn at random without replacement from the sweep: the closed form of the expectation of the best of N draws, with its 95% interval ({}; the points re-ranked in each resample).",
                (p.quality, _goal_text(p.goal), "; ".join(methods) or fr.JOINT_METHOD),
            ),
        )
    )
    return sec


def _plots(planes: list[Plane], plot_dir: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    plt.rcParams.update({"svg.hashsalt": "maxbench", "figure.dpi": 100})
    meta = {"Software": None}
    out: dict = {}
    for p in planes:
        slug = _slug(f"{p.quality}-{p.match}")
        fig, ax = plt.subplots(figsize=(7.5, 5.5))
        for c in p.curves:
            ex = [p.entries[x][0] for x in c.systems]
            ey = [p.entries[x][1] for x in c.systems]
            xs, ys = c.x.value, c.y.value
            xerr = _errs(xs, ex)
            yerr = _errs(ys, ey)
            line = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="o", ms=4, capsize=2, lw=1.2, label=c.name)
            for v, x0, y0 in zip(c.values, xs, ys):
                if math.isfinite(x0) and math.isfinite(y0):
                    ax.annotate(
                        f"{v:g}",
                        (x0, y0),
                        fontsize=6,
                        xytext=(3, 3),
                        textcoords="offset points",
                        color=line[0].get_color(),
                    )
        if p.human is not None and all(math.isfinite(v) for v in p.human):
            ax.plot(*p.human, marker="*", ms=14, color="black", ls="none", label=HUMAN)
        if p.target is not None:
            ax.axvline(p.target, color="grey", ls=":", lw=1, label=f"matched value ({p.target_source})")
        ax.set_xlabel(p.match)
        ax.set_ylabel(f"{p.quality} ({_goal_text(p.goal)})")
        ax.set_title(f"{p.quality} against {p.match}: each sweep in its knob's order")
        ax.legend(fontsize=7, loc="best")
        out.setdefault((p.quality, p.match), []).append(_save(fig, plot_dir / f"frontier-{slug}.png", meta, plt))
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for name, b in p.budget.items():
            ns = np.arange(1, len(b.estimates) + 1)
            line = ax.plot(ns, b.estimates, marker="o", ms=4, label=name)
            lo = [math.nan if ci is None else ci.low for ci in b.intervals]
            hi = [math.nan if ci is None else ci.high for ci in b.intervals]
            ax.fill_between(ns, lo, hi, color=line[0].get_color(), alpha=0.15, lw=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("N points tuned (drawn at random from the sweep)")
        ax.set_ylabel(f"expected best {p.quality}")
        ax.set_title(f"Tuning budget: {p.quality} (bands: 95% intervals)")
        ax.legend(fontsize=7, loc="best")
        out[(p.quality, p.match)].append(_save(fig, plot_dir / f"budget-{slug}.png", meta, plt))
    return out


def _errs(values, entries):
    lo = [v - e["ci_low"] if isinstance(e.get("ci_low"), (int, float)) else 0.0 for v, e in zip(values, entries)]
    hi = [e["ci_high"] - v if isinstance(e.get("ci_high"), (int, float)) else 0.0 for v, e in zip(values, entries)]
    return np.clip(np.nan_to_num(np.array([lo, hi])), 0, None)


def _save(fig, path: Path, meta, plt) -> tuple[Path, Figure]:
    with atomic_open(path) as f:
        fig.savefig(f, format="png", metadata=meta, bbox_inches="tight")
    plt.close(fig)
    return path, Figure(f"plots/{path.name}", path.read_bytes(), path.stem)


def _json_num(v):
    return None if v is None or not math.isfinite(v) else round(float(v), 6)


def _json_ci(ci):
    return None if ci is None else [_json_num(ci.low), _json_num(ci.high)]


def data(planes: list[Plane]) -> dict:
    """The frontier data the explorer reads (``frontier.json``)."""
    out = []
    for p in planes:
        out.append(
            {
                "quality": p.quality,
                "match": p.match,
                "goal": p.goal,
                "human": None if p.human is None else [_json_num(v) for v in p.human],
                "target": _json_num(p.target),
                "target_source": p.target_source,
                "against": p.against,
                "multiplicity": {
                    "method": "holm",
                    "family": "every matched difference of this plane",
                    "tests": sum(len(m.differences) for m in p.matched),
                },
                "curves": [
                    {
                        "name": c.name,
                        "knob": c.knob,
                        "points": [
                            {
                                "value": v,
                                "system": x,
                                "x": _json_num(c.x.value[i]),
                                "x_ci": _json_ci(_interval(p.entries[x][0])),
                                "y": _json_num(c.y.value[i]),
                                "y_ci": _json_ci(_interval(p.entries[x][1])),
                            }
                            for i, (v, x) in enumerate(zip(c.values, c.systems))
                        ],
                    }
                    for c in p.curves
                ],
                "matched": [
                    {
                        "a": m.a,
                        "b": m.b,
                        "overlap": m.overlap,
                        "method": m.method,
                        "differences": [
                            {
                                "a_segment": d.a,
                                "b_segment": d.b,
                                "estimate": _json_num(d.estimate),
                                "ci": _json_ci(d.interval),
                                "p": _json_num(d.p_value),
                                "holm_p": _json_num(d.holm_p),
                            }
                            for d in m.differences
                        ],
                    }
                    for m in p.matched
                ],
                "dominance": [
                    {
                        "a": d.a,
                        "b": d.b,
                        "verdict": d.verdict,
                        "shared": d.shared,
                        "stretches": [[s.low, s.high, s.better] for s in d.stretches],
                        "crossings": [{"x": c.x, "ci": _json_ci(c.interval)} for c in d.crossings],
                    }
                    for d in p.dominance
                ],
                "budget": {name: [_json_num(v) for v in b.estimates] for name, b in p.budget.items()},
                "budget_ci": {name: [_json_ci(ci) for ci in b.intervals] for name, b in p.budget.items()},
                "budget_method": {name: b.method for name, b in p.budget.items()},
            }
        )
    return {"format": "maxbench-frontier/1", "planes": out}


def render(
    run_dir: Path,
    out_dir: Path,
    planes: list[tuple[str, str]] | None = None,
    against: str | None = None,
    match: float | None = None,
) -> list[Path]:
    """Write the frontier report of ``run_dir`` under ``out_dir``; returns the files written."""
    scores, built = build(run_dir, planes, against, match)
    out_dir = Path(out_dir)
    plot_dir = out_dir / "plots"
    ensure_dir(plot_dir, "the frontier output folder")
    figures = _plots(built, plot_dir)
    written = [f[0] for fs in figures.values() for f in fs]
    figs = {k: [f[1] for f in v] for k, v in figures.items()}
    sections = _sections(scores, built, figs)
    for name, text in (
        ("frontier.md", render_markdown(sections)),
        ("frontier.html", render_html(sections)),
        ("frontier.json", json.dumps(data(built), indent=1, allow_nan=False) + "\n"),
    ):
        atomic_write(out_dir / name, text)
        written.append(out_dir / name)
    return written
