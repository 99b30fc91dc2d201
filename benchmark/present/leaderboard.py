"""The leaderboard rendered from scored runs (the lineups of systems they ran are
``benchmark/run/lineup.py``'s).

The leaderboard reads ``scores.json`` (and the generations, for per-step statistics) of one or
more run directories and writes ``leaderboard.md``, ``.csv``, ``.html`` and PNG plots; it
never generates, so ``maxbench leaderboard RUN_DIR...`` re-renders without a model. Output is a
pure function of its inputs (no timestamps), so the same runs give byte-identical files. The md
and the HTML page are rendered from sections of the document model (``core/document.py``), as
the significance report is: the md leads with a compact table of the design card's metrics
(``COMPACT``, the explorer's compact view too), led by the scores the runs' metrics declare for it
(``Metric.compact_scores``: attr-acc and its ceiling on a conditional suite; ``compact_columns``),
and gives every score in the full table after it; the HTML page and the csv hold the full table.

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
import math
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.document import Cell, Code, Figure, Para, Section, Table, num, render_html, render_markdown
from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, ensure_dir

#: score columns in display order; scores not listed follow in their own order
PREFERRED = [
    "attr-acc",  # a conditional suite's (docs/conditional.md): whether the texts keep to the attributes asked for
    "attr-acc-ceiling",
    "bleu-2",
    "bleu-3",
    "bleu-4",
    "bleu-5",
    "sacrebleu",
    "rouge-l-f",
    "meteor",
    "bertscore-f1",
    "mauve",
    "coherence",
    "ms-jaccard-2",
    "ms-jaccard-3",
    "ms-jaccard-4",
    "kld",
    "ppl",
    "ref-eps-ppl",
    "self-bleu-2",
    "self-bleu-3",
    "self-bleu-4",
    "self-bleu-5",
    "rep",
    "seq-rep-4",
    "distinct-1-corpus",
    "distinct-2-corpus",
    "distinct-3-corpus",
    "distinct-4-corpus",
    "diversity",
    "uniq",
]
#: the design card's metrics, in this order: the compact table that leads ``leaderboard.md`` and the
#: explorer's compact view (``maxbench.benchmark.present.explorer.data``) show these columns (those present),
#: after the scores a run's metrics declare for it (``compact_columns``)
COMPACT = ("bleu-4", "rouge-l-f", "meteor", "ppl", "self-bleu-4", "rep", "ms-jaccard-3")


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


def load_scored_run(run_dir: Path) -> ScoredRun:
    """A scored run as the leaderboard reads it, through the run folder's owner (``maxbench.rundir``):
    its fresh scores file, its manifest and its rows."""
    from maxbench.rundir import json_type, read_run

    run = read_run(run_dir, scored=True, rows_missing_ok=True)
    run_dir, scores, manifest = run.run_dir, run.scores, run.manifest
    doc = scores.to_dict()
    systems = scores.systems
    ident = manifest.get("identity") or {}
    suite = ident.get("suite") or manifest.get("suite") or scores.suite or {}
    if not isinstance(suite, dict):
        raise MaxbenchError(
            f"{run_dir}: the run's 'suite' is {json_type(suite)}, expected an object with the suite's name; "
            f"rescore the run (maxbench score {run_dir}) or restore its manifest.json"
        )
    steps, prompts = _from_generations(run.rows)
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
    )


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
def score_columns(rows: list[Row]) -> list[str]:
    """The score columns of ``rows`` in display order: ``PREFERRED``'s first, then the rest as they appear."""
    present = list(dict.fromkeys(k for row in rows for k in row.scores))
    return [c for c in PREFERRED if c in present] + [c for c in present if c not in PREFERRED]


def compact_columns(runs: list[ScoredRun], cols: list[str]) -> list[str]:
    """The columns of the compact table (and the explorer's compact view) among ``cols``, the score
    columns present: the scores the runs' metrics declare for it (``Metric.compact_scores``), in
    ``cols``' order, then ``COMPACT``'s, in its order. A run whose metrics declare none gets ``COMPACT``'s."""
    declared = {s for m in dict.fromkeys(m for r in runs for m in r.metrics) for s in declared_compact(m)}
    return [c for c in cols if c in declared] + [c for c in COMPACT if c in cols and c not in declared]


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


def _fmt(v, col: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    scale = 100.0 if col not in ("ppl", "ref-eps-ppl", "ref-ppl", "kld", "uniq", "sacrebleu") else 1.0
    v = v * scale
    return f"{v:.0f}" if col == "uniq" else f"{v:.2f}"


def best_rows(rows: list[Row], col: str, per_model: bool = False) -> set[int]:
    """Indices of the rows holding the best value of a column among rows of the same setting
    (all of them on a tie): a best value is only meaningful among numbers of the same prompts.
    ``per_model``: among rows of the same base model too."""
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
        hib = next(rows[i].scores[col].get("higher_is_better", True) for i, _ in vals)
        top = (max if hib else min)(v for _, v in vals)
        best |= {i for i, v in vals if v == top}
    return best


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


def _note(runs: list[ScoredRun], per_model: bool = False) -> Para:
    best = "best in column among the rows of the same base model" if per_model else "best in column"
    text = (
        "Scores x100 except sacreBLEU, PPL, KLD and Uniq; [95% bootstrap interval over prompts]; "
        f"bold = {best} (by the metric's direction); * p < 0.05, ** p < 0.01: paired permutation "
        "test over prompts against "
    )
    if all(r.comparisons.get("baselines") for r in runs):  # runs over several base models
        return Para(text + "the softmax of the row's own base model with the same decoding.")
    baselines = list(dict.fromkeys(r.comparisons.get("baseline") for r in runs))
    if len(baselines) == 1 and baselines[0] is not None:
        return Para(text + "the baseline {}.", (Code(baselines[0]),))
    if len(baselines) == 1:
        return Para(text + "a baseline (these runs name none, so no row has a test).")
    each = [r for r in runs if r.comparisons.get("baseline")]
    return Para(
        text + "each run's own baseline: " + ", ".join("{} in {}" for _ in each) + ".",
        tuple(x for r in each for x in (Code(r.comparisons["baseline"]), Code(r.run_id))),
    )


def build_sections(
    runs: list[ScoredRun], rows: list[Row], figures: list[Figure], compact: bool = False
) -> list[Section]:
    """The leaderboard page as document sections (``core/document.py``): one table of every score.
    With ``compact`` (the markdown file), a table of the compact columns (``compact_columns``) leads and
    the table of every score follows under its own heading; without (the HTML page), the one table."""
    cols = score_columns(rows)
    layout = _Layout.of(runs, rows)
    best = {c: best_rows(rows, c, layout.model) for c in cols}
    full = _table(rows, layout, cols, best)
    sources = Para("Sources: " + ", ".join("{}" for _ in runs), tuple(Code(r.path.as_posix()) for r in runs))
    plugins = list(dict.fromkeys(p for r in runs for p in r.plugins))
    if plugins:  # only then: a leaderboard without plugins keeps its bytes
        sources = Para(
            sources.template + "; plugins: " + ", ".join("{}" for _ in plugins),
            sources.args + tuple(Code(p) for p in plugins),
        )
    tail = Section("", paragraphs=[sources], figures=figures, figure_row=True)
    lead = compact_columns(runs, cols)
    if not compact or not lead or len(lead) == len(cols):
        return [Section(_title(runs), level=1, paragraphs=[_note(runs, layout.model)], tables=[full]), tail]
    return [
        Section(
            _title(runs), level=1, paragraphs=[_note(runs, layout.model)], tables=[_table(rows, layout, lead, best)]
        ),
        Section("All metrics", level=2, tables=[full]),
        tail,
    ]


def _table(rows: list[Row], layout: _Layout, cols: list[str], best: dict[str, set[int]]) -> Table:
    """The rows with the layout's extra columns and the score columns ``cols``; ``best``: per column,
    the rows holding its best value (marked among all rows, whichever columns a table shows)."""
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
        cells = [Cell(row.model if first else "", code=first)] * layout.model + [Cell(row.system, code=True)]
        cells += [Cell(row.run.run_id, code=True)] * layout.run
        cells += [Cell(_suite_text(row.run))] * layout.suite
        cells += [num(_coverage_text(row))] * layout.prompts
        for c in cols:
            e = row.scores.get(c)
            if e is None:
                cells.append(Cell(""))
                continue
            ci = "" if e.get("ci_low") is None else f"[{_fmt(e['ci_low'], c)}, {_fmt(e.get('ci_high'), c)}]"
            p = row.p_values.get(c, {}).get("p_value")
            cells.append(num(_fmt(e.get("value"), c), mark=stars(p), detail=ci, best=i in best[c]))
        body.append(tuple(cells))
    extra = len(header) - len(cols)
    return Table(columns=tuple(header), rows=tuple(body), align="l" * extra + "r" * len(cols), md_align=False)


def render(run_dirs: list[Path], out_dir: Path, mixed: bool = False) -> list[Path]:
    """Write leaderboard.md, .csv, .html and plots/ for ``run_dirs`` into ``out_dir``; returns the files."""
    from maxbench.benchmark.present.plots import write_plots

    if not run_dirs:
        raise MaxbenchError("give at least one scored run directory")
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
    atomic_write(written[1], _csv(rows, _Layout.of(runs, rows)))
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
    return _csv(rows, _Layout.of(runs, rows))


def _csv(rows: list[Row], layout: _Layout) -> str:
    cols = score_columns(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = ["run"] * layout.run + ["suite", "suite_prompts"] * layout.suite + ["prompts", "partial"] * layout.prompts
    w.writerow(
        ["base_model"] * layout.model
        + ["system", *extra]
        + [f"{c}{suffix}" for c in cols for suffix in ("", "_ci_low", "_ci_high", "_p_vs_baseline")]
    )
    for row in rows:
        covered, of = row.coverage
        line = [row.model] * layout.model + [row.system] + [row.run.run_id] * layout.run
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
