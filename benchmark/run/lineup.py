"""Lineups: the systems a leaderboard compares, and how they are run, named in a TOML file.

A lineup file (``benchmark/lineups/<name>.toml``, or any path; ``maxbench run --lineup``
takes either) names a suite, a fitting corpus, samples per prompt, the seed, the batch size,
the baseline, the metrics and the systems as system strings::

    name = "default"
    suite = "food-reviews"
    corpus = "food-reviews"
    samples = 1
    seed = 1234
    batch_size = 48
    baseline = "smollm2-135m/softmax/top_p=0.9"
    evaluator = "smollm2-135m"     # the model of the ppl metric (optional)
    metrics = ["sacrebleu", "bleu-n", ...]
    systems = ["smollm2-135m/softmax/top_p=0.9", ...]

    [model_args."gemma3-270m"]     # options of one base model (optional; docs/models.md)
    dtype = "bf16"

``[model_args."MODEL"]`` gives the model options (``revision``, ``dtype``, ``trust_remote_code``:
those of ``--model-args``) of one base model, ``MODEL`` as the lineup's system strings write it
before any ``+ADAPTER`` (with its ``@REVISION`` if they give one); every system of that model, its
adapted ones included, loads it with them, and the lineup's other models are not touched. Options
for every model are given on the command line (``--model-args``); where both give a key for the
same model, the command line wins. There is no lineup-wide form: a lineup names its few models.
The options join the run's identity and the model's (its ``LoadedModel.hash``), so runs that
differ in one model's options never share rows, caches or trained heads; a lineup without
``model_args`` keeps the identity runs had before the key existed.

Loading checks everything it names (keys, system strings, models, layers and their
parameters, model options, metrics, the baseline) before anything runs; an unknown name is one line with the
closest known one. ``--registry`` is the flag's old name, kept as an alias; a run's manifest still records
its lineup under the key ``registry``, so runs made before the rename resume.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.plugins import include_all
from maxbench.registry import closest, unknown_name

LINEUP_DIR = Path(__file__).parents[1] / "lineups"  # benchmark/lineups/: the built-in lineups, package data
KEYS = (
    "name",
    "suite",
    "corpus",
    "samples",
    "seed",
    "batch_size",
    "baseline",
    "evaluator",
    "metrics",
    "systems",
    "include",
    "model_args",
)


@dataclass
class Lineup:
    name: str
    suite: str
    systems: list  # [maxbench.systems.system_strings.SystemSpec]
    corpus: str | None = None
    samples: int = 1
    seed: int = 1234
    batch_size: int = 16
    baseline: str | None = None
    evaluator: str | None = None  # the ppl metric's model; None: its default
    metrics: list = field(default_factory=list)
    path: Path | None = None
    include: list = field(default_factory=list)  # plugin files it includes
    #: base model (``SystemSpec.model``) -> its model options, checked and normalised (``[model_args."MODEL"]``)
    model_args: dict = field(default_factory=dict)


def builtin_lineups() -> dict[str, Path]:
    return {p.stem: p for p in sorted(LINEUP_DIR.glob("*.toml"))}


def _find(name_or_path: str) -> Path:
    builtins = builtin_lineups()
    if name_or_path in builtins:
        return builtins[name_or_path]
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if path.suffix == ".toml" or "/" in name_or_path:
        raise MaxbenchError(f"lineup file {path} does not exist; give the path of a lineup .toml file")
    raise unknown_name("lineup", name_or_path, builtins, hint="or the path of a lineup .toml file")


def load_lineup(name_or_path: str) -> Lineup:
    """The built-in lineup ``name_or_path`` or the lineup file at that path, checked."""
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.systems.models import check_model
    from maxbench.systems.system_strings import parse_system

    path = _find(name_or_path)
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MaxbenchError(f"lineup {path} is malformed: {exc}") from None
    for key in spec:
        if key not in KEYS:
            raise MaxbenchError(f"lineup {path}: {unknown_name('key', key, KEYS)}")
    for key in ("name", "suite", "corpus", "baseline", "evaluator"):
        if not isinstance(spec.get(key, ""), str):
            raise MaxbenchError(f"lineup {path}: '{key}' must be a string, got {spec[key]!r}")
    for key, least in (("samples", 1), ("seed", 0), ("batch_size", 1)):
        value = spec.get(key, least)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise MaxbenchError(f"lineup {path}: '{key}' must be a whole number >= {least}, got {value!r}")
    for key in ("systems", "metrics", "include"):
        value = spec.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MaxbenchError(f"lineup {path}: '{key}' must be a list of strings")
    if not spec.get("systems"):
        raise MaxbenchError(f"lineup {path} needs a non-empty 'systems' list of system strings")
    include = [str((path.parent / p).expanduser()) for p in spec.get("include", [])]
    include_all(include)  # plugin files, relative to the lineup file (docs/plugins.md)
    systems = [parse_system(s) for s in spec["systems"]]
    for s in systems:
        check_model(s.model)
        s.build_layer()  # an unknown parameter fails here, before anything runs
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise MaxbenchError(f"lineup {path} lists a system twice")
    metrics = spec.get("metrics", [])
    for metric in metrics:
        if metric not in METRICS:
            raise MaxbenchError(f"lineup {path}: {unknown_name('metric', metric, METRICS)}")
    model_args = _model_args(path, spec.get("model_args", {}), systems)
    baseline = spec.get("baseline")
    if baseline is not None:
        baseline = parse_system(baseline).name
        if baseline not in names:
            raise MaxbenchError(f"lineup {path}: baseline '{baseline}' is not one of its systems")
    return Lineup(
        name=spec.get("name", path.stem),
        suite=spec.get("suite", "food-reviews"),
        systems=systems,
        corpus=spec.get("corpus"),
        samples=spec.get("samples", 1),
        seed=spec.get("seed", 1234),
        batch_size=spec.get("batch_size", 16),
        baseline=baseline,
        evaluator=spec.get("evaluator") and check_model(spec["evaluator"]),
        metrics=list(metrics),
        path=path,
        include=include,
        model_args=model_args,
    )


def _model_args(path: Path, tables, systems: list) -> dict:
    """The lineup's ``[model_args."MODEL"]`` tables, checked: each names a base model of its systems,
    each option is known (``check_model_options``, which normalises the values as ``--model-args``)
    and fits its model (no revision for a built-in or a local folder, the same as an ``@REVISION``)."""
    from maxbench.systems.models import check_model_options, options_for_model

    models = list(dict.fromkeys(s.model for s in systems))
    form = '[model_args."MODEL"] with key = value lines'
    if not isinstance(tables, dict):
        raise MaxbenchError(f"lineup {path}: 'model_args' must be a table per model ({form}), got {tables!r}")
    out = {}
    for model, table in tables.items():
        if not isinstance(table, dict):
            raise MaxbenchError(
                f"lineup {path}: 'model_args' holds a table per model ({form}), but '{model}' is {table!r}; "
                f"options for every model go on the command line (--model-args)"
            )
        if model not in models:
            near = closest(model, models)
            raise MaxbenchError(
                f"lineup {path}: model_args names model '{model}', which none of its systems uses"
                + (f" (did you mean '{near}'?)" if near else "")
                + f"; its models: {', '.join(models)}"
            )
        where = f'lineup {path}: model_args."{model}"'
        for key, value in table.items():
            if not isinstance(value, (str, bool)):
                raise MaxbenchError(f"{where}: option '{key}' must be a string or true/false, got {value!r}")
        try:
            options = check_model_options(table)
            options_for_model(model, options)
        except MaxbenchError as exc:
            raise MaxbenchError(f"{where}: {exc}") from None
        if options:
            out[model] = dict(sorted(options.items()))
    return dict(sorted(out.items()))
