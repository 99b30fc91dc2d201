"""The leaderboard rendered from scored runs (the lineups of systems they ran are
``benchmark/run/lineup.py``'s).

The leaderboard reads ``scores.json`` (and the generations, for per-step statistics) of one or
more run directories and writes ``leaderboard.md``, ``.csv``, ``.html`` and PNG plots; it
never generates, so ``maxbench leaderboard RUN_DIR...`` re-renders without a model. Output is a
pure function of its inputs (no timestamps), so the same runs give byte-identical files. The md
and the HTML page are rendered from sections of the document model (``core/document.py``), as
the significance report is: the md leads with a compact table of the design card's metrics
(those whose ``ScoreInfo.compact`` places them there; the explorer's compact view too), led by the
scores the runs' metrics declare for it (``Metric.compact_scores``: attr-acc and its ceiling on a
conditional suite; ``compact_columns``), and gives every score in the full table after it; the HTML
page and the csv hold the full table.

How a score is shown and what "best" means for it are the metric's declaration (``ScoreInfo``:
goal, display name, scale, column), which ``scores.json`` keeps beside the scores (a file scored
before it: the registered metric's, else none: as computed, ranked by ``higher_is_better``). The
first row is the human row, the suite's references as ``score`` scored them
(``maxbench.benchmark.metrics.human``): for a score whose goal is the human value, the row closest
to it is bold, and its test against the baseline is of the distance to it.

Only numbers of the same prompts are ranked together: runs on different suites, prompt counts,
seeds or sample counts, and runs that share a system string, are refused unless ``mixed`` is
asked for; then each row names its run and suite and the best value is marked per suite. A row
whose scores cover only part of its suite says how many prompts it covers.

Runs over several base models (the ``base-lms`` lineup) are shown in the papers' table shape: rows
grouped by base model under a first "base model" column, each model's softmax first, then its
layers, and the best value marked within each base model, since each layer is tested against its
own model's softmax and the question the table answers is which layer is best on a given model.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.document import Cell, Code, Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.errors import MaxbenchError
from maxbench.fileio import Inputs, atomic_write, check_not_input, ensure_dir
from maxbench.rundir import run_inputs


# ---------------------------------------------------------------- reading runs
@dataclass(eq=False)
class ScoredRun:
    """One scored run directory as the leaderboard reads it: its ``scores.json``, what its
    manifest says about the prompts (suite, seed, samples) and its per-step statistics."""

    path: Path
    run_id: str
    lineup: str | None
    suite: dict  # name, version, sha256, n_items
    seed: int | None
    samples: int | None
    systems: dict  # system -> the scores.json entry (n_prompts, partial, scores, ...)
    comparisons: dict  # {"baseline": str | None, "systems": {system: {score: {"p_value": ...}}}}
    steps: dict  # system -> {"entropy": [...], "support": [...]}
    prompts: dict  # system -> prompts its generations cover (for scores.json files that do not say)
    plugins: list = field(default_factory=list)  # "what name: where from" of each plugin it used
    metrics: list = field(default_factory=list)  # the names of the metrics that scored it
    display: dict = field(default_factory=dict)  # score -> its ScoreInfo, as scores.json keeps it
    human: dict | None = None  # the human row (scores.json's ``human``), None when it has none

    def setting(self) -> dict:
        """What must agree for two runs' numbers to be comparable."""
        return {
            "suite": f"{self.suite.get('name')} v{self.suite.get('version')} ({str(self.suite.get('sha256'))[:12]})",
            "prompts": self.suite.get("n_items"),
            "seed": self.seed,
            "samples": self.samples,
        }


@dataclass
class Row:
    run: ScoredRun
    system: str
    label: str  # what the row is called: the system, or the system and its run when it appears twice

    @property
    def model(self) -> str:
        from maxbench.systems.system_strings import parse_system

        return parse_system(self.system).model

    @property
    def layer(self) -> str:
        from maxbench.systems.system_strings import parse_system

        return parse_system(self.system).layer

    @property
    def entry(self) -> dict:
        return self.run.systems[self.system]

    @property
    def scores(self) -> dict:
        return self.entry.get("scores") or {}

    @property
    def p_values(self) -> dict:
        return self.run.comparisons.get("systems", {}).get(self.system, {})

    @property
    def coverage(self) -> tuple[int | None, int | None]:
        """(prompts this row's scores cover, prompts of its suite)."""
        e = self.entry
        return e.get("n_prompts", self.run.prompts.get(self.system)), e.get(
            "suite_prompts", self.run.suite.get("n_items")
        )

    @property
    def partial(self) -> bool:
        covered, of = self.coverage
        return bool(self.entry.get("partial", covered is not None and of is not None and covered < of))


class HumanRow(Row):
    """The human row of a run (scores.json's ``human``): no model, no test, never bold."""

    @property
    def model(self) -> str:
        return ""

    @property
    def layer(self) -> str:
        return ""

    @property
    def entry(self) -> dict:
        return self.run.human or {}

    @property
    def p_values(self) -> dict:
        return {}

    @property
    def coverage(self) -> tuple[int | None, int | None]:
        return self.entry.get("n_prompts"), self.run.suite.get("n_items")

    @property
    def partial(self) -> bool:
        return False


def human_rows(runs: list[ScoredRun]) -> list[HumanRow]:
    """One human row per setting of the runs (the first run's of each that has one): the references
    are the suite's, the same for every run of a setting."""
    from maxbench.benchmark.metrics.human import HUMAN_ROW

    settings = {json.dumps(r.setting(), sort_keys=True) for r in runs}
    out: dict[str, HumanRow] = {}
    for run in runs:
        key = json.dumps(run.setting(), sort_keys=True)
        if run.human is not None and key not in out:
            label = HUMAN_ROW if len(settings) == 1 else f"{HUMAN_ROW} [{run.run_id}]"
            out[key] = HumanRow(run, HUMAN_ROW, label)
    return list(out.values())


def load_scored_run(run_dir: Path) -> ScoredRun:
    """A scored run as the leaderboard reads it, through the run folder's owner (``maxbench.rundir``):
    its fresh scores file, its manifest and its rows."""
    from maxbench.rundir import json_type, read_run

    run = read_run(run_dir, scored=True, rows_missing_ok=True)
    run_dir, scores, manifest = run.path, run.scores_file, run.manifest
    doc = run.scores
    systems = scores.systems
    ident = manifest.get("identity") or {}
    suite = ident.get("suite") or manifest.get("suite") or scores.suite or {}
    if not isinstance(suite, dict):
        raise MaxbenchError(
            f"{run_dir}: the run's 'suite' is {json_type(suite)}, expected an object with the suite's name; "
            f"rescore the run (maxbench score {run_dir}) or restore its manifest.json"
        )
    steps, prompts = _from_generations(run.generations)
    return ScoredRun(
        path=run_dir,
        run_id=manifest.get("run_id") or scores.run_id or run_dir.name,
        lineup=ident.get("registry"),  # a manifest records its lineup under the old key
        suite=suite,
        seed=ident.get("seed", manifest.get("seed")),
        samples=ident.get("samples", manifest.get("samples")),
        systems=systems,
        comparisons=scores.comparisons or {},
        steps=steps,
        prompts=prompts,
        plugins=_plugins_of(manifest, doc),
        metrics=_metrics_of(doc),
        display=_display_of(doc),
        human=doc["human"] if isinstance(doc.get("human"), dict) else None,
    )


def _display_of(doc: dict) -> dict:
    """Each score's ``ScoreInfo`` as scores.json keeps it (``metrics.<metric>.display``)."""
    from maxbench.benchmark.metrics.base import ScoreInfo

    out = {}
    for entry in (doc.get("metrics") or {}).values():
        display = entry.get("display") if isinstance(entry, dict) else None
        for name, d in display.items() if isinstance(display, dict) else ():
            out[name] = ScoreInfo.from_dict(name, d)
    return out


def _metrics_of(doc: dict) -> list[str]:
    """The metrics that scored a run: scores.json's ``metrics`` table, else each score's ``metric``."""
    table = doc.get("metrics")
    if isinstance(table, dict):
        return [m for m in table if isinstance(m, str)]
    entries = (e for entry in doc["systems"].values() for e in (entry.get("scores") or {}).values())
    return list(dict.fromkeys(e["metric"] for e in entries if isinstance(e.get("metric"), str)))


def _plugins_of(manifest: dict, doc: dict) -> list[str]:
    """The plugins a run used (docs/plugins.md): its systems' layers and models, and its metrics."""
    from maxbench.registry import describe_origin, is_plugin_origin

    found = []
    systems = manifest.get("systems") if isinstance(manifest.get("systems"), dict) else {}
    for entry in systems.values():
        code = entry.get("code") if isinstance(entry, dict) else None
        for part in ("layer", "model"):
            origin = code.get(part) if isinstance(code, dict) else None
            if is_plugin_origin(origin):
                found.append(f"{part} {entry.get(part)}: {describe_origin(origin)}")
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {}
    for name, entry in metrics.items():
        origin = entry.get("origin") if isinstance(entry, dict) else None
        if is_plugin_origin(origin):
            found.append(f"metric {name}: {describe_origin(origin)}")
    return list(dict.fromkeys(found))


def comparable_rows(runs: list[ScoredRun], mixed: bool) -> list[Row]:
    """One row per (run, system). Numbers of different prompts, seeds or sample counts do not
    belong in one ranking, nor does one system string twice: both are refused unless ``mixed``."""
    seen: dict[str, ScoredRun] = {}
    for run in runs:
        if run.path.resolve() in {r.path.resolve() for r in runs[: runs.index(run)]}:
            raise MaxbenchError(f"run directory {run.path} is given twice; name each run once")
        for system in run.systems:
            if system in seen and not mixed:
                raise MaxbenchError(
                    f"system '{system}' is in both {seen[system].path} and {run.path}; pass --mixed for one "
                    f"row per run, or leave one run out"
                )
            seen.setdefault(system, run)
    first = runs[0].setting()
    for run in runs[1:]:
        differ = [k for k, v in run.setting().items() if v != first[k]]
        if differ and not mixed:
            what = "; ".join(f"{k} {first[k]} in {runs[0].path} but {run.setting()[k]} in {run.path}" for k in differ)
            raise MaxbenchError(
                f"these runs are not comparable ({what}); pass --mixed to show them in one table with a "
                f"suite column and the best value marked per suite"
            )
    counts: dict[str, int] = {}
    for run in runs:
        for system in run.systems:
            counts[system] = counts.get(system, 0) + 1
    rows = [
        Row(run, system, system if counts[system] == 1 else f"{system} [{run.run_id}]")
        for run in runs
        for system in run.systems
    ]
    return _by_base_model(rows) if len({row.model for row in rows}) > 1 else rows


def _by_base_model(rows: list[Row]) -> list[Row]:
    """Rows grouped by base model in order of first appearance, each group's softmax rows first and
    the rest in their given order (the papers' shape: base model, then base model + method)."""
    order = {model: i for i, model in enumerate(dict.fromkeys(row.model for row in rows))}
    return sorted(rows, key=lambda row: (order[row.model], row.layer != "softmax"))


def _from_generations(rows: list[dict], max_steps: int = 64) -> tuple[dict, dict]:
    """Per system: the mean entropy and support size at each decoding step, and the prompts covered."""
    acc: dict = {}
    prompts: dict = {}
    for row in rows:
        prompts.setdefault(row["system"], set()).add(row.get("prompt_id"))
        st = row.get("stats") or {}
        a = acc.setdefault(row["system"], {})
        for key in ("entropy", "support"):
            vals = st.get(key) or []
            sums = a.setdefault(key, [[0.0, 0] for _ in range(max_steps)])
            for i, v in enumerate(vals[:max_steps]):
                if v is not None:
                    sums[i][0] += v
                    sums[i][1] += 1
    steps = {s: {k: [t / n for t, n in v if n] for k, v in a.items()} for s, a in acc.items()}
    return steps, {s: len(ids) for s, ids in prompts.items()}


# ---------------------------------------------------------------- rendering
def score_info(runs: list[ScoredRun], col: str, rows: list[Row] = ()):
    """How the score ``col`` is shown (``ScoreInfo``): as the runs' scores.json keeps it, else as its
    registered metric declares it (a file scored before scores.json kept it), else as computed with
    no goal (a plugin metric not installed here)."""
    from maxbench.benchmark.metrics.base import METRICS, ScoreInfo, builtin_score_info, get_metric

    for run in runs:
        if col in run.display:
            return run.display[col]
    metric = next((row.scores[col].get("metric") for row in rows if isinstance(row.scores.get(col), dict)), None)
    try:
        if isinstance(metric, str) and metric in METRICS and not METRICS.is_builtin(metric):
            declared = get_metric(metric).score_info
            if col in declared:
                return declared[col]
    except Exception:  # noqa: BLE001 - a plugin metric that cannot be built here: shown as computed
        pass
    if metric is None or (isinstance(metric, str) and metric in METRICS and METRICS.is_builtin(metric)):
        found = builtin_score_info().get(col)
        if found is not None:
            return found
    return ScoreInfo(col)


def score_columns(rows: list[Row], runs: list[ScoredRun] | None = None) -> list[str]:
    """The score columns of ``rows`` in display order: those whose ``ScoreInfo.column`` places them, in
    that order, then the rest as they appear."""
    runs = runs if runs is not None else list(dict.fromkeys(row.run for row in rows))
    present = list(dict.fromkeys(k for row in rows for k in row.scores))
    place = {c: score_info(runs, c, rows).column for c in present}
    placed = sorted((c for c in present if place[c] is not None), key=lambda c: place[c])
    return placed + [c for c in present if place[c] is None]


def compact_columns(runs: list[ScoredRun], cols: list[str], rows: list[Row] = ()) -> list[str]:
    """The columns of the compact table (and the explorer's compact view) among ``cols``, the score
    columns present: the scores the runs' metrics declare for it (``Metric.compact_scores``), in
    ``cols``' order, then those whose ``ScoreInfo.compact`` places them there, in that order."""
    declared = {s for m in dict.fromkeys(m for r in runs for m in r.metrics) for s in declared_compact(m)}
    place = {c: score_info(runs, c, rows).compact for c in cols if c not in declared}
    return [c for c in cols if c in declared] + sorted((c for c, k in place.items() if k is not None), key=place.get)


def declared_compact(metric: str) -> tuple[str, ...]:
    """The scores ``metric`` declares for the compact table (``Metric.compact_scores``); none for a
    metric not registered where the leaderboard renders (a plugin not installed or included here)."""
    from maxbench.benchmark.metrics.base import METRICS

    try:
        if metric not in METRICS:
            return ()
        names = getattr(METRICS.get(metric), "compact_scores", ())
    except (MaxbenchError, ImportError):
        return ()
    return (names,) if isinstance(names, str) else tuple(n for n in names or () if isinstance(n, str))


def best_rows(rows: list[Row], col: str, per_model: bool = False, info=None, humans: list[Row] = ()) -> set[int]:
    """Indices of the rows holding the best value of a column among rows of the same setting
    (all of them on a tie): a best value is only meaningful among numbers of the same prompts.
    ``per_model``: among rows of the same base model too. Best is by the score's goal (``info``, a
    ``ScoreInfo``): the highest, the lowest, or the closest to the human row of the same setting
    (none without one); with no goal declared, by the score's ``higher_is_better``."""
    goal = getattr(info, "goal", None)
    human = {
        json.dumps(h.run.setting(), sort_keys=True): h.scores[col].get("value")
        for h in humans
        if isinstance(h.scores.get(col), dict)
    }
    best: set[int] = set()
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        key = row.run.setting() | ({"model": row.model} if per_model else {})
        groups.setdefault(json.dumps(key, sort_keys=True), []).append(i)
    for members in groups.values():
        vals = [
            (i, rows[i].scores[col]["value"]) for i in members if rows[i].scores.get(col, {}).get("value") is not None
        ]
        if not vals:
            continue
        if goal == "human":
            h = human.get(json.dumps(rows[members[0]].run.setting(), sort_keys=True))
            if h is None:
                continue
            vals = [(i, -abs(v - h)) for i, v in vals]
            hib = True
        elif goal is not None:
            hib = goal == "higher"
        else:
            hib = next(rows[i].scores[col].get("higher_is_better", True) for i, _ in vals)
        top = (max if hib else min)(v for _, v in vals)
        best |= {i for i, v in vals if v == top}
    return best


def significance_mark(row: Row, col: str) -> str:
    """The mark of a row's test against the baseline: its stars, and, where the test was of the
    distance to the human row (``closeness_test``), which way a significant one goes."""
    c = row.p_values.get(col, {})
    mark = stars(c.get("p_value"))
    if mark and c.get("test") == "closeness" and c.get("difference") is not None:
        mark += " closer" if c["difference"] < 0 else " farther"
    return mark


def stars(p) -> str:
    """The significance mark of a p-value: ``**`` below 0.01, ``*`` below 0.05, else none."""
    if p is None:
        return ""
    return "**" if p < 0.01 else "*" if p < 0.05 else ""


@dataclass
class _Layout:
    """The extra columns a table needs: the base model first when the rows hold several, the run and
    suite of each row when the runs differ or share a system, and the prompts covered when not every
    row covers its whole suite."""

    run: bool
    suite: bool
    prompts: bool
    model: bool = False

    @classmethod
    def of(cls, runs: list[ScoredRun], rows: list[Row]) -> _Layout:
        several = (
            len({r.label for r in rows}) != len({r.system for r in rows})
            or len({json.dumps(r.setting(), sort_keys=True) for r in runs}) > 1
        )
        models = len({row.model for row in rows}) > 1
        return cls(run=several, suite=several, prompts=any(row.partial for row in rows), model=models)


def _coverage_text(row: Row) -> str:
    covered, of = row.coverage
    text = "?" if covered is None else str(covered) if of is None or covered == of else f"{covered} of {of}"
    return text + (" (partial)" if row.partial else "")


def _suite_text(run: ScoredRun) -> str:
    s = run.setting()
    return f"{run.suite.get('name')} ({s['prompts']} prompts, seed {s['seed']}, samples {s['samples']})"


def _title(runs: list[ScoredRun]) -> str:
    """Named after the first run's lineup and suite, so a re-render gives the same page."""
    suites = {r.suite.get("name") for r in runs}
    if len(suites) > 1:
        return "maxbench leaderboard: runs on several suites"
    first = runs[0]
    if not first.suite.get("name"):
        return "maxbench leaderboard"
    return f"maxbench leaderboard: {first.lineup or 'generate'} on {first.suite['name']}"


def _names(cols: list[str], infos: dict) -> str:
    return ", ".join(infos[c].display for c in cols)


def _note(
    runs: list[ScoredRun], cols: list[str], infos: dict, humans: list[Row], per_model: bool = False
) -> list[Para]:
    """The legend: scales, intervals, what bold means for each goal, the tests, and the human row."""
    from maxbench.benchmark.metrics.base import GOALS

    scaled = [c for c in cols if infos[c].scale == 100]
    as_is = [c for c in cols if infos[c].scale == 1]
    other = [c for c in cols if infos[c].scale not in (1, 100)]
    if scaled and not as_is and not other:
        scale = "Scores x100"
    elif scaled and not other:
        scale = f"Scores x100 except {_names(as_is, infos)} (as computed)"
    else:
        scale = "Scores as computed" + (f" except {_names(scaled, infos)} (x100)" if scaled else "")
        scale += "".join(f"; {infos[c].display} x{infos[c].scale:g}" for c in other)
    among = " among the rows of the same base model" if per_model else ""
    goals = {g: [c for c in cols if infos[c].goal == g] for g in GOALS}
    undeclared = [c for c in cols if infos[c].goal is None]
    best = []
    if goals["human"]:
        best.append(f"the row closest to the human row for {_names(goals['human'], infos)}")
    if goals["lower"]:
        best.append(f"the lowest for {_names(goals['lower'], infos)}")
    if goals["higher"]:
        best.append("the highest for " + ("every other score" if best else "every score"))
    if undeclared:
        best.append(f"no goal declared, so by the metric's direction ({_names(undeclared, infos)})")
    text = (
        f"{scale}; [95% bootstrap interval over prompts]; bold = best in column{among}: " + "; ".join(best) + ". "
        "* p < 0.05, ** p < 0.01: paired permutation test over prompts against "
    )
    if all(r.comparisons.get("baselines") for r in runs):  # runs over several base models
        first = Para(text + "the softmax of the row's own base model with the same decoding.")
    else:
        baselines = list(dict.fromkeys(r.comparisons.get("baseline") for r in runs))
        if len(baselines) == 1 and baselines[0] is not None:
            first = Para(text + "the baseline {}.", (Code(baselines[0]),))
        elif len(baselines) == 1:
            first = Para(text + "a baseline (these runs name none, so no row has a test).")
        else:
            each = [r for r in runs if r.comparisons.get("baseline")]
            first = Para(
                text + "each run's own baseline: " + ", ".join("{} in {}" for _ in each) + ".",
                tuple(x for r in each for x in (Code(r.comparisons["baseline"]), Code(r.run_id))),
            )
    if not humans:
        return [first]
    h = humans[0].entry
    reasons: dict[str, list[str]] = {}
    for c in cols:
        e = h.get("scores", {}).get(c)
        if isinstance(e, dict) and e.get("value") is None and e.get("reason"):
            reasons.setdefault(e["reason"], []).append(infos[c].display)
    words = h.get("cut_words")
    cut = f"each cut to its first {words} words" if words else "whole"
    row = (
        f"The row {humans[0].label} is the suite's references scored as a system's texts ({h.get('n_prompts')} prompts, "
        f"the same bootstrap), {cut}: {{}}."
    )
    if goals["human"]:
        row += (
            " For the scores closest to human is better, the test and its interval concern the distance to the "
            "human row: |system - human| - |baseline - human|, with the prompts resampled jointly for system, "
            "baseline and references; 'closer' or 'farther' says which way a significant difference goes."
        )
    row += "".join(f" n/a there: {', '.join(names)}: {why}." for why, names in reasons.items())
    return [first, Para(row, (Code(str(h.get("signature"))),))]


def build_sections(
    runs: list[ScoredRun], rows: list[Row], figures: list[Figure], compact: bool = False
) -> list[Section]:
    """The leaderboard page as document sections (``core/document.py``): one table of every score.
    With ``compact`` (the markdown file), a table of the compact columns (``compact_columns``) leads and
    the table of every score follows under its own heading; without (the HTML page), the one table.
    The human rows (``human_rows``) lead every table."""
    cols = score_columns(rows, runs)
    infos = {c: score_info(runs, c, rows) for c in cols}
    layout = _Layout.of(runs, rows)
    humans = human_rows(runs)
    best = {c: best_rows(rows, c, layout.model, infos[c], humans) for c in cols}
    full = _table(humans + rows, layout, cols, best, infos, len(humans))
    sources = Para("Sources: " + ", ".join("{}" for _ in runs), tuple(Code(r.path.as_posix()) for r in runs))
    plugins = list(dict.fromkeys(p for r in runs for p in r.plugins))
    if plugins:  # only then: a leaderboard without plugins keeps its bytes
        sources = Para(
            sources.template + "; plugins: " + ", ".join("{}" for _ in plugins),
            sources.args + tuple(Code(p) for p in plugins),
        )
    tail = Section("", paragraphs=[sources], figures=figures, figure_row=True)
    lead = compact_columns(runs, cols, rows)
    note = _note(runs, cols, infos, humans, layout.model)
    if not compact or not lead or len(lead) == len(cols):
        return [Section(_title(runs), level=1, paragraphs=note, tables=[full]), tail]
    return [
        Section(
            _title(runs),
            level=1,
            paragraphs=note,
            tables=[_table(humans + rows, layout, lead, best, infos, len(humans))],
        ),
        Section("All metrics", level=2, tables=[full]),
        tail,
    ]


def _table(
    rows: list[Row], layout: _Layout, cols: list[str], best: dict[str, set[int]], infos: dict, skip: int = 0
) -> Table:
    """The rows with the layout's extra columns and the score columns ``cols``; ``best``: per column,
    the rows holding its best value (marked among all rows, whichever columns a table shows), indexed
    from the row after the first ``skip`` (the human rows)."""
    header = (
        ["base model"] * layout.model
        + ["system"]
        + ["run"] * layout.run
        + ["suite"] * layout.suite
        + ["prompts"] * layout.prompts
        + cols
    )
    body = []
    for i, row in enumerate(rows):
        # the model names its group once, on the group's first row, as the papers' tables do
        first = i == 0 or rows[i - 1].model != row.model
        cells = [Cell(row.model if first else "", code=first and bool(row.model))] * layout.model + [
            Cell(row.label if i < skip else row.system, code=i >= skip)
        ]
        cells += [Cell(row.run.run_id, code=True)] * layout.run
        cells += [Cell(_suite_text(row.run))] * layout.suite
        cells += [num(_coverage_text(row))] * layout.prompts
        for c in cols:
            e = row.scores.get(c)
            if e is None:
                cells.append(Cell(""))
                continue
            f = infos[c].format
            ci = "" if e.get("ci_low") is None else f"[{f(e['ci_low'])}, {f(e.get('ci_high'))}]"
            mark = significance_mark(row, c)
            cells.append(num(f(e.get("value")), mark=mark, detail=ci, best=i - skip in best[c]))
        body.append(tuple(cells))
    extra = len(header) - len(cols)
    return Table(columns=tuple(header), rows=tuple(body), align="l" * extra + "r" * len(cols), md_align=False)


def check_render_outputs(run_dirs: list[Path], out_dir: Path, inputs: Inputs = ()) -> None:
    """Refuse an ``out_dir`` where ``render`` would write over one of the runs' files or another input."""
    read = [*inputs, *(i for r in run_dirs for i in run_inputs(Path(r)))]
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "plots"):
        check_not_input(Path(out_dir) / name, f"--out {out_dir}: its", read)


def render(run_dirs: list[Path], out_dir: Path, mixed: bool = False, inputs: Inputs = ()) -> list[Path]:
    """Write leaderboard.md, .csv, .html and plots/ for ``run_dirs`` into ``out_dir``; returns the files.
    No file written is one of the runs' files or of the other ``inputs`` (a suite's)."""
    from maxbench.benchmark.present.plots import write_plots

    if not run_dirs:
        raise MaxbenchError("give at least one scored run directory")
    check_render_outputs(run_dirs, out_dir, inputs)
    runs = [load_scored_run(Path(r)) for r in run_dirs]
    rows = comparable_rows(runs, mixed)
    if not rows:
        raise MaxbenchError("the runs hold no scored systems; score them first (maxbench score RUN_DIR)")
    out_dir = Path(out_dir)
    ensure_dir(out_dir / "plots", "--out")
    plots = write_plots(rows, out_dir / "plots")
    figures = [Figure(f"plots/{p.name}", p.read_bytes(), p.stem) for p in plots]
    sections = build_sections(runs, rows, figures)
    written = [out_dir / "leaderboard.md", out_dir / "leaderboard.csv", out_dir / "leaderboard.html"]
    atomic_write(written[0], render_markdown(build_sections(runs, rows, figures, compact=True)))
    atomic_write(written[1], _csv(runs, rows, _Layout.of(runs, rows)))
    atomic_write(written[2], render_html(sections, sections[0].title))
    return written + plots


def leaderboard_csv(run_dirs: list[Path], mixed: bool = False) -> str:
    """The ``leaderboard.csv`` that ``render`` would write for ``run_dirs``, without writing anything
    (``maxbench leaderboard --check``: maxbench.benchmark.present.check)."""
    if not run_dirs:
        raise MaxbenchError("give at least one scored run directory")
    runs = [load_scored_run(Path(r)) for r in run_dirs]
    rows = comparable_rows(runs, mixed)
    if not rows:
        raise MaxbenchError("the runs hold no scored systems; score them first (maxbench score RUN_DIR)")
    return _csv(runs, rows, _Layout.of(runs, rows))


def _csv(runs: list[ScoredRun], rows: list[Row], layout: _Layout) -> str:
    """The full table as CSV, values as computed (no scale): the human rows first, named by their label."""
    cols = score_columns(rows, runs)
    humans = human_rows(runs)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = ["run"] * layout.run + ["suite", "suite_prompts"] * layout.suite + ["prompts", "partial"] * layout.prompts
    w.writerow(
        ["base_model"] * layout.model
        + ["system", *extra]
        + [f"{c}{suffix}" for c in cols for suffix in ("", "_ci_low", "_ci_high", "_p_vs_baseline")]
    )
    for row in humans + rows:
        covered, of = row.coverage
        line = [row.model] * layout.model + [row.label if isinstance(row, HumanRow) else row.system]
        line += [row.run.run_id] * layout.run
        line += [row.run.suite.get("name"), row.run.suite.get("n_items")] * layout.suite
        line += [covered, str(row.partial).lower()] * layout.prompts
        for c in cols:
            e = row.scores.get(c) or {}
            p = row.p_values.get(c, {}).get("p_value")
            line += [_num(e.get("value")), _num(e.get("ci_low")), _num(e.get("ci_high")), _num(p)]
        w.writerow(line)
    return buf.getvalue()


def _num(v) -> str:
    # 12 significant digits: corpus-level n-gram scores sum floats in hash order, so their last
    # bits can differ between processes; 12 digits are far below any interval's width.
    return "" if v is None else f"{float(v):.12g}"
