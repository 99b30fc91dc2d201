"""The score cache of a run: what ``score_run`` computed for each system, reused while nothing it
depends on has changed.

An entry is one system's part of ``scores.json`` (its scores with intervals, and the metric table
it contributes), or one system's comparison with its baseline. It is stored as JSON in
``RUN_DIR/score-cache/<key>.json``, the key a sha256 over everything the entry depends on:

- the system's rows as scored (texts, prompt ids, references, prompts, reference log-probabilities,
  vocabulary size) and its coverage of the suite;
- each metric's cache signature (its ``signature``; for ``ppl`` with the evaluator's weights hash);
- the bootstrap and test settings (resamples, seed, level);
- the code version: maxbench's and the scoring libraries' versions and a sha256 of the source of
  every metric module (``benchmark/metrics/*.py`` and ``systems/layers/perplexity.py``), so that
  editing a metric recomputes every score;
- for a comparison, the keys of both systems.

A file that cannot be read, is not valid JSON, names another key, or whose body does not match the
sha256 stored with it is recomputed and overwritten, never used. Entries the last scoring did not
use are removed, so the folder holds one scoring's worth. A cached entry is the JSON that was
computed, so ``scores.json`` is the same bytes with or without the cache.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from maxbench.fileio import atomic_write, ensure_dir

FORMAT = "maxbench-score-cache/1"
FOLDER = "score-cache"


def metric_sources() -> list[Path]:
    """The source files of every module that computes a score."""
    import maxbench.benchmark.metrics as metrics_pkg
    import maxbench.systems.layers.perplexity as ref_ppl

    return sorted(Path(metrics_pkg.__file__).parent.glob("*.py")) + [Path(ref_ppl.__file__)]


def source_digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    """sha256 of the source of every module that computes a score (``metric_sources``)."""
    return source_digest(metric_sources())


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=True).encode()).hexdigest()


def system_key(batch, coverage: dict, signatures: list[str], settings: dict, versions: dict) -> str:
    """The key of one system's scores."""
    rows = {
        "texts": batch.texts,
        "prompt_ids": batch.prompt_ids,
        "references": batch.references,
        "prompts": batch.prompts,
        "reference_logprobs": batch.reference_logprobs,
        "vocab_size": batch.vocab_size,
    }
    return _digest(
        {
            "what": "system",
            "rows": _digest(rows),
            "coverage": coverage,
            "metrics": signatures,
            "settings": settings,
            "versions": versions,
            "code": code_version(),
        }
    )


def comparison_key(system: str, key: str, baseline: str, baseline_key: str, settings: dict) -> str:
    """The key of one system's comparison with its baseline."""
    return _digest(
        {"what": "comparison", "system": [system, key], "baseline": [baseline, baseline_key], "settings": settings}
    )


class ScoreCache:
    """Entries of one run's score cache (see the module's docstring)."""

    def __init__(self, run_dir: Path):
        self.folder = Path(run_dir) / FOLDER
        self.used: set[str] = set()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str):
        """The entry stored under ``key``, or None when there is none to trust."""
        self.used.add(key)
        try:
            doc = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key or "body" not in doc:
            return None
        if doc.get("sha256") != _digest(doc["body"]):
            return None
        return doc["body"]

    def put(self, key: str, body) -> None:
        self.used.add(key)
        ensure_dir(self.folder, "score cache")
        doc = {"format": FORMAT, "key": key, "sha256": _digest(body), "body": body}
        atomic_write(self._path(key), json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n")

    def prune(self) -> None:
        """Remove the entries this scoring did not use."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("*.json"):
            if path.stem not in self.used:
                path.unlink(missing_ok=True)
