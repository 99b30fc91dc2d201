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

Loading checks everything it names (keys, system strings, models, layers and their
parameters, metrics, the baseline) before anything runs; an unknown name is one line with the
closest known one. ``--registry`` is the flag's old name, kept as an alias; a run's manifest still records
its lineup under the key ``registry``, so runs made before the rename resume.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.plugins import include_all
from maxbench.registry import unknown_name

LINEUP_DIR = Path(__file__).parent / "lineups"
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
    )
