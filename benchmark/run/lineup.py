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

A ``systems`` entry may instead be a sweep: one system string and one option it varies, each value a
system of its own (docs/frontiers.md)::

    systems = [
      { system = "smollm2-135m/softmax/sample", sweep = { temp = [0.7, 1.0, 1.3] } },
      { system = "smollm2-135m/graphmax(solver=exact)/sample", sweep = { lam = [0.3, 1, 3] }, name = "graphmax" },
    ]

The option is a decoding option of a sampled system (``temp``, also spelled ``temperature``;
``top_k``, ``top_p``, ``min_p``, ``typical_p``, ``epsilon``, ``eta``) or a parameter its layer
accepts (graphmax's ``lam``, POSG's ``tag_topk``, a plugin layer's), set in the system string (a
value given there is replaced). Each point is checked as the system string it makes (the same rules
as a written one), so a value out of range is refused where it would be written by hand; a sweep
needs two values or more, all naming different systems, and ``top_k`` takes whole numbers >= 1
(0 turns it off, which has no place in k's order). The points join the lineup in the option's
increasing order; a point that another sweep or entry also names is one system, run once. A sweep
is named ``name`` or, by default, by its system string with the option written ``option=*``
(``smollm2-135m/softmax/temp=*``). ``Lineup.sweeps`` holds ``{name: Sweep}``; the run's manifest
keeps ``Sweep.record()`` under ``sweeps`` (``{name: {knob, values, systems}}``, ``RunPlan.sweeps``),
so the systems of one sweep, its option and their order are known from the run folder alone. The
record is not part of the run's identity: a point added to a sweep is a system added to the run.

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
from dataclasses import dataclass, field, replace
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


#: the decoding options a sweep may vary, as a decoding label spells them; ``temperature`` reads as ``temp``
SWEEP_DECODING = ("temp", "top_k", "top_p", "min_p", "typical_p", "epsilon", "eta")
#: each decoding option's "off" value (the setting's default), which a sweep's name leaves out
_OFF = {"temp": 1, "top_k": 0, "top_p": 1, "min_p": 0, "typical_p": 1, "epsilon": 0, "eta": 0}
SWEEP_KEYS = ("system", "sweep", "name")


@dataclass(frozen=True)
class Sweep:
    """One system swept over one option: ``values`` in increasing order, ``systems`` the names of
    the points in the same order."""

    name: str
    knob: str
    values: tuple
    systems: tuple

    def record(self) -> dict:
        """What the run's manifest keeps under ``sweeps`` for this sweep's name."""
        return {"knob": self.knob, "values": list(self.values), "systems": list(self.systems)}


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
    #: sweep name -> Sweep, in the lineup's order (its points are among ``systems``)
    sweeps: dict = field(default_factory=dict)


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
    for key in ("metrics", "include"):
        value = spec.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MaxbenchError(f"lineup {path}: '{key}' must be a list of strings")
    entries = spec.get("systems", [])
    if not isinstance(entries, list) or not all(isinstance(v, (str, dict)) for v in entries):
        raise MaxbenchError(
            f"lineup {path}: 'systems' must be a list of system strings and sweeps "
            '({ system = "...", sweep = { option = [values] } })'
        )
    if not entries:
        raise MaxbenchError(f"lineup {path} needs a non-empty 'systems' list of system strings")
    include = [str((path.parent / p).expanduser()) for p in spec.get("include", [])]
    include_all(include)  # plugin files, relative to the lineup file (docs/plugins.md)
    systems, sweeps = _systems(path, entries)
    for s in systems:
        check_model(s.model)
        s.build_layer()  # an unknown parameter fails here, before anything runs
    names = [s.name for s in systems]
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
        sweeps=sweeps,
    )


def _systems(path: Path, entries: list) -> tuple[list, dict]:
    """The lineup's systems (each once, in the order its entries name them) and its sweeps. A system
    string listed twice is refused; a sweep's point that another entry also names is the same system."""
    from maxbench.systems.system_strings import parse_system

    systems: dict = {}  # name -> SystemSpec
    written: set = set()
    sweeps: dict = {}
    for entry in entries:
        if isinstance(entry, str):
            spec = parse_system(entry)
            if spec.name in written:
                raise MaxbenchError(f"lineup {path} lists a system twice: {spec.name}")
            written.add(spec.name)
            systems.setdefault(spec.name, spec)
            continue
        sweep, points = _sweep(path, entry)
        if sweep.name in sweeps:
            raise MaxbenchError(
                f"lineup {path} has two sweeps named '{sweep.name}'; give one of them another name (name = \"...\")"
            )
        sweeps[sweep.name] = sweep
        for spec in points:
            systems.setdefault(spec.name, spec)
    return list(systems.values()), sweeps


def _sweep(path: Path, entry: dict) -> tuple[Sweep, list]:
    """One ``{ system = ..., sweep = { option = [values] }, name = ... }`` entry: the Sweep and its
    points (SystemSpecs, checked as written system strings are), in the option's increasing order."""
    from maxbench.systems.system_strings import parse_system

    where = f"lineup {path}: sweep"
    form = '{ system = "MODEL/LAYER/DECODING", sweep = { option = [value, value, ...] } }'
    for key in entry:
        if key not in SWEEP_KEYS:
            raise MaxbenchError(f"{where} {entry.get('system', '')!r}: {unknown_name('key', key, SWEEP_KEYS)}")
    text, table = entry.get("system"), entry.get("sweep")
    if not isinstance(text, str) or not isinstance(table, dict):
        raise MaxbenchError(f"{where}: write each sweep as {form}, got {entry!r}")
    if len(table) != 1:
        raise MaxbenchError(
            f"{where} of '{text}' varies {len(table)} options ({', '.join(table) or 'none'}); a sweep varies exactly "
            "one: give each option an entry of its own (the same system string, another sweep)"
        )
    ((knob, values),) = table.items()
    knob = "temp" if knob == "temperature" else knob
    base = parse_system(text)
    name = entry.get("name", _starred(base, knob))
    if not isinstance(name, str) or not name.strip():
        raise MaxbenchError(f"{where} of '{text}': 'name' must be a non-empty string, got {name!r}")
    where = f"{where} '{name}'"
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise MaxbenchError(f"{where}: {knob} must be a list of numbers, got {values!r}")
    if len(values) < 2:
        raise MaxbenchError(
            f"{where} has {len(values)} point(s); a sweep needs two values or more (one system: list it)"
        )
    if knob in SWEEP_DECODING:
        if not base.decoding.do_sample:
            raise MaxbenchError(
                f"{where}: '{text}' decodes greedily, so it has no {knob}; sweep a sampled system (e.g. "
                f"{text.rsplit('/', 1)[0]}/sample)"
            )
        if knob == "top_k" and not all(isinstance(v, int) and v >= 1 for v in values):
            raise MaxbenchError(
                f"{where}: top_k takes whole numbers >= 1 (0 turns it off, outside k's order), got {values!r}"
            )
    else:
        params, open_ended = _layer_parameters(base)
        if knob not in params and not open_ended:
            options = [*SWEEP_DECODING, *params]
            near = closest(knob, options)
            raise MaxbenchError(
                f"{where}: '{text}' has no option '{knob}' to sweep"
                + (f" (did you mean '{near}'?)" if near else "")
                + f"; its options: {', '.join(options)}"
            )
    points: dict = {}  # name -> (value, SystemSpec)
    for value in sorted(values):
        try:
            spec = _point(base, knob, value)
        except MaxbenchError as exc:
            raise MaxbenchError(f"{where}: {knob}={value}: {exc}") from None
        if spec.name in points:
            raise MaxbenchError(
                f"{where}: values {points[spec.name][0]!r} and {value!r} name the same system ({spec.name}); "
                "list each value once"
            )
        points[spec.name] = (value, spec)
    return (
        Sweep(name, knob, tuple(v for v, _ in points.values()), tuple(points)),
        [spec for _, spec in points.values()],
    )


def _layer_parameters(base) -> tuple[list, bool]:
    """The parameters ``base``'s layer names, and whether it takes any other (``**kwargs``)."""
    import inspect

    from maxbench.systems.system_strings import layer_class

    init = layer_class(base.layer).__init__
    if init is object.__init__:  # a layer without parameters (softmax)
        return [], False
    params = list(inspect.signature(init).parameters.values())[1:]
    named = [p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def _point(base, knob: str, value):
    """``base`` with ``knob`` set to ``value``, read back from its system string (so it is canonical)
    and its layer built: the checks of a system string written by hand."""
    from maxbench.systems.decoding import DecodingSetting
    from maxbench.systems.system_strings import parse_system

    if knob in SWEEP_DECODING:
        spec = replace(base, decoding=DecodingSetting.parse(f"{base.decoding.label},{knob}={value!r}"))
    else:
        params = dict(base.params) | {knob: value}
        spec = replace(base, params=tuple(params.items()))
    spec = parse_system(spec.name)
    spec.build_layer()
    return spec


def sweep_point(system: str, knob: str, value):
    """``system`` (a system string) with ``knob`` set to ``value``: a sweep's point as a lineup's sweep
    makes it (canonical, its layer built; bad input is one line). A decoding option ``system`` already
    sets is replaced, not given twice."""
    from maxbench.systems.decoding import DecodingSetting
    from maxbench.systems.system_strings import parse_system

    knob = "temp" if knob == "temperature" else knob
    base = parse_system(system)
    if knob in SWEEP_DECODING:
        names = {knob, "temperature"} if knob == "temp" else {knob}
        rest = [p for p in base.decoding.label.split(",") if p.split("=")[0] not in names]
        if base.decoding.do_sample and "sample" not in rest:
            rest.insert(0, "sample")
        base = replace(base, decoding=DecodingSetting.parse(",".join(rest)))
    return _point(base, knob, value)


def _starred(base, knob: str) -> str:
    """The default name of a sweep: ``base``'s system string with ``knob`` written ``knob=*``."""
    from maxbench.systems.decoding import DecodingSetting

    if knob not in SWEEP_DECODING:
        return replace(base, params=tuple((dict(base.params) | {knob: "*"}).items())).name
    try:
        off = DecodingSetting.parse(f"{base.decoding.label},{knob}={_OFF[knob]}")
    except MaxbenchError:
        off = base.decoding
    head, label = replace(base, decoding=off).name.rsplit("/", 1)
    parts = [p for p in label.split(",") if p not in ("sample", "greedy")]
    return f"{head}/{','.join([f'{knob}=*', *parts])}"


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
