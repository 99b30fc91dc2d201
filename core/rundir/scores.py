"""A run's ``scores.json``: the typed ``ScoresFile``, its one freshness check against the generations
(``ScoresFile.stale``), its reader and its writer. The scores are computed by
``maxbench.benchmark.metrics.scoring``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write
from maxbench.rundir.files import (
    SCORES,
    check_run_dir,
    generations_path,
    generations_sha256,
    json_type,
    read_object,
    scores_path,
)


def _scores_shape_problem(doc: dict) -> str | None:
    """What is wrong, and where, with the shape of a scores.json document (None when nothing is)."""
    if "systems" not in doc:
        return "has no 'systems' table of scores"
    systems = doc["systems"]
    if not isinstance(systems, dict):
        return f"'systems' is {json_type(systems)}, expected an object of system -> entry"
    for system, entry in systems.items():
        if not isinstance(entry, dict):
            return f"systems[{system!r}] is {json_type(entry)}, expected an object"
        scores = entry.get("scores", {})
        if not isinstance(scores, dict):
            return f"systems[{system!r}]['scores'] is {json_type(scores)}, expected an object of metric -> result"
        for metric, value in scores.items():
            if not isinstance(value, dict):
                return f"systems[{system!r}]['scores'][{metric!r}] is {json_type(value)}, expected an object"
    for key in ("metrics", "suite", "bootstrap", "versions"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"'{key}' is {json_type(doc[key])}, expected an object"
    human = doc.get("human")
    if human is not None and not (isinstance(human, dict) and isinstance(human.get("scores", {}), dict)):
        return "'human' is not an object with a 'scores' object (the human row)"
    if isinstance(human, dict) and any(not isinstance(v, dict) for v in human.get("scores", {}).values()):
        return "human['scores'] holds an entry that is not an object"
    comparisons = doc.get("comparisons")
    if comparisons is not None and not isinstance(comparisons, dict):
        return f"'comparisons' is {json_type(comparisons)}, expected an object"
    if isinstance(comparisons, dict):
        table = comparisons.get("systems")
        if table is not None and not isinstance(table, dict):
            return f"comparisons['systems'] is {json_type(table)}, expected an object"
        for system, entry in (table or {}).items():
            if not isinstance(entry, dict):
                return f"comparisons['systems'][{system!r}] is {json_type(entry)}, expected an object"
    return None


@dataclass
class ScoresFile:
    """A run's ``scores.json``: the scores of every system of the run's generations as they were when
    they were scored (``maxbench.benchmark.metrics.scoring.score_run`` writes it, ``read_scores``
    reads it). Its scores are the run's only while ``generations_sha256`` is the sha256 of the run's
    ``generations.jsonl`` now (``stale``): a system added and dropped again, or rows generated or
    dropped since, leave a scores file of other generations, which every reader refuses alike."""

    #: the run directory the file belongs to
    run_dir: Path
    #: system -> its entry: ``n_texts``, ``n_prompts``, coverage, ``notes``, ``not_applicable`` and
    #: ``scores`` (score name -> value, interval, per-prompt values, the metric that gave it, ...)
    systems: dict
    #: the file format (``maxbench-scores/1``)
    format: str | None = None
    #: the run's id, as its manifest names it
    run_id: str | None = None
    #: when the scores were computed (UTC, ISO 8601)
    created: str | None = None
    #: the sha256 of the ``generations.jsonl`` that was scored (None in a hand-made file: not checked)
    generations_sha256: str | None = None
    #: the suite as the manifest records it
    suite: dict | None = None
    #: the bootstrap's resamples, seed and level
    bootstrap: dict | None = None
    #: the versions of the packages the scores depend on
    versions: dict | None = None
    #: metric -> its signature, variant and (for a plugin's) origin; None in a file without the table
    metrics: dict | None = None
    #: the human row: the suite's references scored as a system's texts are (``label``, ``signature``,
    #: ``scores``; ``maxbench.benchmark.metrics.human``); None in a file scored before it, or without references
    human: dict | None = None
    #: the paired tests against the baseline (``baseline``, ``systems``: system -> rows); None without one
    comparisons: dict | None = None
    #: keys the format does not name, kept so that ``to_dict`` gives the file's document back
    extra: dict = field(default_factory=dict)
    #: the format's keys the file holds (``to_dict`` leaves out the others)
    keys: tuple = ()

    #: the document's keys in the order the file holds them
    KEYS = (
        "format",
        "run_id",
        "created",
        "generations_sha256",
        "suite",
        "bootstrap",
        "versions",
        "metrics",
        "systems",
        "human",
        "comparisons",
    )

    @classmethod
    def from_dict(cls, run_dir: Path, doc: dict) -> ScoresFile:
        """The typed file of a scores document; one whose shape is wrong is refused in one line."""
        problem = _scores_shape_problem(doc)
        if problem:
            raise MaxbenchError(f"{scores_path(run_dir)}: {problem}; rescore the run (maxbench score {run_dir})")
        known = {k: doc[k] for k in cls.KEYS if k in doc}
        extra = {k: v for k, v in doc.items() if k not in cls.KEYS}
        return cls(run_dir=Path(run_dir), extra=extra, keys=tuple(known), **known)

    def to_dict(self) -> dict:
        """The document as ``scores.json`` holds it: the format's keys in its order (those the file
        has, and any set since), then the others."""
        doc = {k: getattr(self, k) for k in self.KEYS if k in self.keys or getattr(self, k) is not None}
        return doc | self.extra

    def stale(self) -> str | None:
        """Why these are not the scores of the run's generations as they are now (None when they are,
        and when there is nothing to compare: no generations, or a file that records no hash)."""
        recorded = self.generations_sha256
        now = generations_sha256(self.run_dir)
        if now is None or not isinstance(recorded, str) or recorded == now:
            return None
        return (
            f"{scores_path(self.run_dir)} scored generations with sha256 {recorded}, but "
            f"{generations_path(self.run_dir)} has sha256 {now}: these are not this run's scores; "
            f"run `maxbench score {self.run_dir}`"
        )


def read_scores(run_dir: Path, fresh: bool = True) -> ScoresFile:
    """The run's scores file. A folder without one, a file that is not a scores document and, when
    ``fresh``, scores of other generations than the run's now (``ScoresFile.stale``) are refused in
    one line saying what to run."""
    run_dir = check_run_dir(run_dir)
    path = scores_path(run_dir)
    if not path.is_file():
        raise MaxbenchError(f"{run_dir} has no {SCORES}; run `maxbench score {run_dir}` first")
    scores = ScoresFile.from_dict(run_dir, read_object(path, f"rescore the run (maxbench score {run_dir})"))
    why = scores.stale() if fresh else None
    if why:
        raise MaxbenchError(why)
    return scores


def write_scores(run_dir: Path, doc: dict) -> dict:
    """Write ``doc`` as the run's ``scores.json`` (atomically); returns what the file holds. When the
    file holds the same scores already and only ``created`` would differ, it is kept as it is (and so
    is its ``created``)."""
    path = scores_path(run_dir)
    text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        old_text = path.read_text(encoding="utf-8")
        old = json.loads(old_text)
    except (OSError, ValueError):
        old_text, old = None, None
    if isinstance(old, dict) and isinstance(old.get("created"), str):
        same = json.dumps(doc | {"created": old["created"]}, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        if old_text == same:  # the same scores: the file stays as it is
            return doc | {"created": old["created"]}
    if old_text != text:
        atomic_write(path, text)
    return doc
