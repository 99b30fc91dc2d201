"""maxbench from Python: the one door for plugins (``register_layer``, ``register_model``,
``register_metric``, ``register_adapter``; docs/plugins.md), and more below. ``import maxbench``
stays light: these are reached lazily through ``maxbench.__getattr__``. This module sits on top,
beside ``maxbench.cli``."""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable

from maxbench.errors import MaxbenchError
from maxbench.registry import current_origin, describe_origin
from maxbench.rundir import RunFiles


def _origin_of(obj) -> dict:
    """The origin of a plugin registered now: the file being included (or the file of the user's that
    defines it, which the included file imported: ``plugins.registration_origin``), else this session, by
    the sha256 of the object's source (of its qualified name where the source cannot be read)."""
    from maxbench.plugins import registration_origin

    origin = current_origin()
    if origin is not None:
        return registration_origin(obj, origin)
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        text = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"
    return {"source": "session", "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _check_class(kind: str, cls, base: type, name: str | None) -> tuple[str, dict]:
    origin = _origin_of(cls)
    label = getattr(cls, "__qualname__", repr(cls))
    where = describe_origin(origin)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise MaxbenchError(f"plugin {kind} {label} from {where} is not a subclass of {base.__name__}")
    key = name if name is not None else cls.name
    if not isinstance(key, str) or not key or key == base.name:
        raise MaxbenchError(f"plugin {kind} {label} from {where} sets no name: give the class a 'name' attribute")
    if cls.name != key:
        raise MaxbenchError(
            f"plugin {kind} '{key}' from {where}: its class is named '{cls.name}'; its name must equal its key"
        )
    return key, origin


def register_layer(cls: type, name: str | None = None) -> type:
    """Add the output layer ``cls`` (an ``OutputLayer`` subclass) under its ``name``; usable as a decorator."""
    from maxbench.systems.layers.base import OutputLayer
    from maxbench.systems.system_strings import LAYERS

    key, origin = _check_class("output layer", cls, OutputLayer, name)
    LAYERS.add_plugin(key, cls, origin)
    return cls


def register_metric(cls: type, name: str | None = None) -> type:
    """Add the metric ``cls`` (a ``Metric`` subclass) under its ``name``; usable as a decorator."""
    from maxbench.benchmark.metrics.base import METRICS, Metric

    key, origin = _check_class("metric", cls, Metric, name)
    METRICS.add_plugin(key, cls, origin)
    return cls


def register_adapter(cls: type, name: str | None = None) -> type:
    """Add the adapter ``cls`` (an ``Adapter`` subclass, systems/adapters/base.py) under its ``name``;
    usable as a decorator. It is then named in system strings as ``MODEL+name(k=v)``."""
    from maxbench.systems.adapters import ADAPTERS, Adapter

    key, origin = _check_class("adapter", cls, Adapter, name)
    ADAPTERS.add_plugin(key, cls, origin)
    return cls


def register_model(name: str, loader: Callable[[], tuple]) -> Callable[[], tuple]:
    """Add the base model ``name``: ``loader()`` returns (model, tokenizer, weights hash) on the CPU."""
    from maxbench.systems.models import MODELS

    origin = _origin_of(loader)
    if not callable(loader):
        raise MaxbenchError(f"plugin base model '{name}' from {describe_origin(origin)}: its loader is not callable")
    MODELS.add_plugin(name, loader, origin)
    return loader


# ---------------------------------------------------------------- runs from Python (evaluate, load_run)
# The same functions as the commands: ``maxbench generate`` (runner.generate_run over a RunPlan),
# ``maxbench score`` (scoring.score_run), ``maxbench export`` and ``maxbench compare``
# (benchmark/present/export.py). Nothing heavy is imported before a function is called.

DEFAULT_RUNS_DIR = "results/runs"


class RunResult(RunFiles):
    """A run directory as Python objects (``maxbench.rundir.RunFiles``, the one type of a run's read
    data, with the API's methods): ``path``, ``manifest`` (dict), ``generations`` (one dict per row of
    generations.jsonl), ``scores`` (scores.json as a dict; None before scoring) and ``scores_file``
    (the same, typed: ``maxbench.rundir.ScoresFile``)."""

    def __repr__(self) -> str:
        systems = list((self.scores or {}).get("systems", {})) or sorted({r["system"] for r in self.generations})
        scored = "scored" if self.scores is not None else "not scored"
        return f"RunResult({str(self.path)!r}, {len(self.generations)} generations, {scored}, systems={systems})"

    @property
    def human(self) -> dict | None:
        """The human row (scores.json's ``human``): the suite's references scored by every metric that
        applies to them, ``scores`` as a system's (value, interval; null with the ``reason`` for a metric
        that compares with the references), and its ``signature`` (the words each was cut to). None
        before scoring, or for a run without references."""
        return (self.scores or {}).get("human")

    def rows(self) -> list[dict]:
        """The tidy rows of ``maxbench export`` (benchmark/present/export.py: ``tidy_rows``)."""
        from maxbench.benchmark.present.export import tidy_rows

        if self.scores is None:
            raise MaxbenchError(f"{self.path} has no scores.json; run `maxbench score {self.path}` first")
        return tidy_rows(self.scores, self.generations)

    def to_pandas(self):
        """The tidy table of ``maxbench export`` as a pandas DataFrame: one row per (system, prompt id,
        sample, metric) with columns system, prompt_id, sample, seed, metric, value, signature."""
        from maxbench.benchmark.present.export import to_frame

        return to_frame(self.rows())

    def compare(
        self,
        other: RunResult | str,
        systems: list[str] | None = None,
        metrics: list[str] | None = None,
        n_resamples: int = 1000,
        seed: int = 0,
        level: float = 0.95,
        evaluator: str | None = None,
        device: str | None = None,
        progress: bool = False,
    ) -> dict:
        """Paired tests of this run's systems against ``other``'s (this minus other), as
        ``maxbench compare``: ``systems`` are names both hold or ``"A_SYSTEM=B_SYSTEM"`` pairs,
        ``metrics`` default to those both runs' scores name. Returns the JSON of ``compare --out``."""
        from pathlib import Path

        from maxbench import arguments
        from maxbench.benchmark.metrics.compare import check_compare_args, compare_runs, default_metrics
        from maxbench.benchmark.metrics.scoring import ScoringOptions

        other_path = other.path if isinstance(other, RunFiles) else arguments.path(other, "other")
        check_compare_args(n_resamples, level, seed, ("n_resamples", "level", "seed"))
        systems = arguments.names(systems, "systems", optional=True)
        metrics = arguments.names(metrics, "metrics", optional=True)
        arguments.text(evaluator, "evaluator", optional=True)
        arguments.text(device, "device", optional=True)
        arguments.flag(progress, "progress")
        a, b = Path(self.path), Path(other_path)
        options = ScoringOptions(
            metrics=list(metrics) if metrics else default_metrics(a, b, "metrics=[...]"),
            n_resamples=n_resamples,
            seed=seed,
            level=level,
            evaluator=evaluator,
            device=device,
            progress=progress,
        )
        return compare_runs(a, b, systems, options)


def load_run(path) -> RunResult:
    """The run directory ``path`` (manifest, generations and, if scored, scores) as a RunResult, read
    by the run folder's owner (``maxbench.rundir``) as every command reads it: scores of other
    generations than the run's now are refused, as ``leaderboard`` and ``export`` refuse them."""
    from pathlib import Path

    from maxbench import arguments
    from maxbench.rundir import read_run

    run = read_run(Path(arguments.path(path, "path")))
    return RunResult(path=run.path, manifest=run.manifest, generations=run.generations, scores_file=run.scores_file)


def evaluate(
    systems,
    suite: str = "smoke",
    metrics: list[str] | None = None,
    runs_dir=DEFAULT_RUNS_DIR,
    run_id: str | None = None,
    samples: int = 1,
    seed: int = 1234,
    device: str | None = None,
    *,
    batch_size: int = 8,
    corpus: str | None = "food-reviews",
    n_resamples: int = 1000,
    baseline: str | None = None,
    evaluator: str | None = None,
    reference_ppl: bool = True,
    threads: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Generate (resuming what is there), score and load a run, as ``maxbench generate`` then
    ``maxbench score`` do with the same arguments: ``systems`` are system strings
    (``"smollm2-135m/softmax/top_p=0.9"``; one string or a list), ``suite`` a built-in suite
    name or a suite .toml, ``metrics`` metric names (default: ``maxbench score``'s), the run
    directory ``runs_dir/run_id`` (default: named as ``maxbench generate`` names it). With
    ``reference_ppl=False`` the layers' log-probabilities of the references (ref-ppl) are not
    recorded (a model whose context cannot hold a suite's prompt and reference needs that)."""
    from pathlib import Path

    from maxbench import arguments
    from maxbench.benchmark.commands.options import run_id as make_run_id
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.metrics.base import parse_metric_list
    from maxbench.benchmark.metrics.names import DEFAULT_METRICS
    from maxbench.benchmark.metrics.scoring import ScoringOptions, score_run
    from maxbench.benchmark.run.runner import generate_run
    from maxbench.rundir import RunPlan
    from maxbench.systems.system_strings import parse_system

    # every argument checked here, before any work, by the checks the commands use
    if isinstance(systems, str):
        systems = [systems]
    if not isinstance(systems, list | tuple) or not all(isinstance(s, str) for s in systems):
        raise MaxbenchError(
            f"systems must be a system string or a list of them (e.g. 'smollm2-135m/softmax/top_p=0.9'), "
            f"got {type(systems).__name__} {systems!r}"
        )
    if not systems:
        raise MaxbenchError("give at least one system string, e.g. 'smollm2-135m/softmax/top_p=0.9'")
    arguments.path(suite, "suite")
    metrics = arguments.names(metrics, "metrics", optional=True)
    arguments.path(runs_dir, "runs_dir")
    arguments.text(run_id, "run_id", optional=True)
    samples = arguments.whole(samples, "samples", 1)
    seed = arguments.seed(seed, "seed")
    arguments.text(device, "device", optional=True)
    batch_size = arguments.whole(batch_size, "batch_size", 1)
    arguments.text(corpus, "corpus", optional=True)
    n_resamples = arguments.resamples(n_resamples, "n_resamples", minimum=0)
    arguments.text(baseline, "baseline", optional=True)
    arguments.text(evaluator, "evaluator", optional=True)
    arguments.flag(reference_ppl, "reference_ppl")
    threads = arguments.threads(threads, "threads")
    arguments.flag(progress, "progress")
    specs = [parse_system(s) for s in systems]
    names = [s.name for s in specs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise MaxbenchError(f"system '{twice}' is given twice; name each system once")
    loaded = load_suite(suite)
    names_of_metrics = parse_metric_list(",".join(metrics)) if metrics else list(DEFAULT_METRICS)
    plan = RunPlan(
        run_dir=Path(runs_dir) / make_run_id(run_id, loaded.name, *names),
        suite=loaded,
        systems=specs,
        samples=samples,
        seed=seed,
        batch_size=batch_size,
        corpus=corpus,
        reference_ppl=reference_ppl,
    )
    generate_run(plan, device=device, threads=threads, progress=progress)
    doc = score_run(
        plan.run_dir,
        ScoringOptions(
            metrics=names_of_metrics,
            n_resamples=n_resamples,
            evaluator=evaluator,
            device=device,
            threads=threads,
            progress=progress,
            defaults=not metrics,
        ),
        baseline=baseline,
    )
    from maxbench.benchmark.commands.score import warning_lines

    for line in warning_lines(doc):  # as `maxbench score` prints them: a partial run, metrics n/a (MAUVE on smoke)
        print(f"maxbench: warning: {line}", file=sys.stderr)
    return load_run(plan.run_dir)
