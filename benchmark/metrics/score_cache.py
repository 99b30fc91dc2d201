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

Beside the entry of a system that is another system's baseline, ``<key>.stats.npz`` keeps the
per-prompt statistics of its scores (``PromptStats``' blocks, column keys and prompt ids, as plain
arrays: NumPy's format, never a pickle), so that a system added to the run is tested against the
baseline without scoring the baseline again (``maxbench.benchmark.metrics.scoring``: the
statistics are used only when they give back the cached values and per-prompt values exactly).

A file that cannot be read, is not valid JSON, names another key, or whose body does not match the
sha256 stored with it is recomputed and overwritten, never used. Entries the last scoring did not
use are removed, so the folder holds one scoring's worth; only files maxbench wrote (a score-cache
entry with the ``FORMAT`` marker) are ever removed, never through a symbolic link. A cache folder that
cannot be used (a file, a symbolic link, unwritable) or an entry that cannot be written (a folder) turns
the cache off for the scoring, with one warning line on stderr: the scores are computed and written
all the same. A cached entry is the JSON that was computed, so ``scores.json`` is the same bytes with
or without the cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

from maxbench.errors import MaxbenchError
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
    if getattr(batch, "reference_stride", None) is not None:  # absent: the keys of runs made before it
        rows["reference_stride"] = batch.reference_stride
    if getattr(batch, "conditions", None) is not None:  # a conditional suite's attributes (attr-acc)
        rows["conditions"] = batch.conditions.key()
    if getattr(batch, "reference_pool", None) is not None:  # the held-out split (heldout-bleu)
        rows["reference_pool"] = batch.reference_pool.key()
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


_ENTRY = re.compile(r"[0-9a-f]{64}\.json")
_STATS = re.compile(r"([0-9a-f]{64})\.stats\.npz")
STATS_SUFFIX = ".stats.npz"


class ScoreCache:
    """Entries of one run's score cache (see the module's docstring)."""

    def __init__(self, run_dir: Path):
        self.folder = Path(run_dir) / FOLDER
        self.used: set[str] = set()
        self.off = False
        if self.folder.is_symlink():
            self._turn_off("it is a symbolic link (maxbench writes and deletes nothing through one)")
        elif self.folder.exists() and not self.folder.is_dir():
            self._turn_off("it is not a folder")

    def _turn_off(self, why: str) -> None:
        if not self.off:
            self.off = True
            print(
                f"maxbench: warning: score cache {self.folder} cannot be used ({why}); scoring without it",
                file=sys.stderr,
                flush=True,
            )

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str):
        """The entry stored under ``key``, or None when there is none to trust."""
        self.used.add(key)
        if self.off:
            return None
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
        if self.off:
            return
        doc = {"format": FORMAT, "key": key, "sha256": _digest(body), "body": body}
        try:
            ensure_dir(self.folder, "score cache")
            atomic_write(self._path(key), json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n")
        except MaxbenchError as exc:  # the scores are computed: they are not lost for a cache
            self._turn_off(str(exc).split(";")[0])

    def _stats_path(self, key: str) -> Path:
        return self.folder / f"{key}{STATS_SUFFIX}"

    def put_stats(self, key: str, results) -> None:
        """Keep the per-prompt statistics of ``results`` (one system's ``MetricResult`` list) beside its
        entry ``key``."""
        import numpy as np
        import scipy.sparse as sp

        if self.off:
            return
        header = {"format": FORMAT, "key": key, "scores": []}
        arrays = {}
        for result in results:
            for name, score in result.scores.items():
                stats = score.stats
                if stats is None:
                    header["scores"].append({"name": name, "stats": False})
                    continue
                i = len(header["scores"])
                blocks = []
                for j, (block, cols) in enumerate(zip(stats.blocks, stats.keys)):
                    if sp.issparse(block):
                        csr = block.tocsr()
                        arrays |= {f"{i}.{j}.data": csr.data, f"{i}.{j}.indices": csr.indices}
                        arrays[f"{i}.{j}.indptr"] = csr.indptr
                        blocks.append({"kind": "csr", "shape": list(csr.shape), "keys": cols is not None})
                    else:
                        arrays[f"{i}.{j}"] = np.asarray(block)
                        blocks.append({"kind": "dense", "keys": cols is not None})
                    if cols is not None:
                        arrays[f"{i}.{j}.keys"] = np.asarray(cols)
                arrays[f"{i}.ids"] = np.array(list(stats.prompt_ids), dtype=str)
                value = float(stats.value()).hex()  # what the rebuilt statistics must give back, bit for bit
                header["scores"].append(
                    {"name": name, "stats": True, "bootstrap_ok": bool(stats.bootstrap_ok), "blocks": blocks}
                    | {"value": value}
                )
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        try:
            ensure_dir(self.folder, "score cache")
            atomic_write(self._stats_path(key), buf.getvalue())
        except MaxbenchError as exc:
            self._turn_off(str(exc).split(";")[0])

    def get_stats(self, key: str) -> dict | None:
        """What ``put_stats`` kept for ``key``: score name -> (prompt ids, blocks, column keys,
        bootstrap_ok, the statistics' value as ``float.hex``), or None for a score without statistics;
        None when there is nothing to use."""
        import numpy as np
        import scipy.sparse as sp

        path = self._stats_path(key)
        if self.off or path.is_symlink() or not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                header = json.loads(z["header"].tobytes().decode())
                if header.get("format") != FORMAT or header.get("key") != key:
                    return None
                out = {}
                for i, entry in enumerate(header["scores"]):
                    if not entry["stats"]:
                        out[entry["name"]] = None
                        continue
                    blocks, keys = [], []
                    for j, b in enumerate(entry["blocks"]):
                        if b["kind"] == "csr":
                            parts = (z[f"{i}.{j}.data"], z[f"{i}.{j}.indices"], z[f"{i}.{j}.indptr"])
                            blocks.append(sp.csr_matrix(parts, shape=tuple(b["shape"])))
                        else:
                            blocks.append(z[f"{i}.{j}"])
                        keys.append(z[f"{i}.{j}.keys"] if b["keys"] else None)
                    ids = tuple(str(x) for x in z[f"{i}.ids"])
                    ok, value = bool(entry["bootstrap_ok"]), str(entry["value"])
                    out[entry["name"]] = (ids, tuple(blocks), tuple(keys), ok, value)
                return out
        except Exception:  # noqa: BLE001 - unreadable, truncated or not ours: the scores are computed instead
            return None

    def prune(self) -> None:
        """Remove the entries this scoring did not use: only regular files named like an entry whose
        content is a score-cache entry (``FORMAT``), never a link, never anything else."""
        if self.off or self.folder.is_symlink() or not self.folder.is_dir():
            return
        for path in self.folder.iterdir():
            stats = _STATS.fullmatch(path.name)
            if stats and stats.group(1) not in self.used and not path.is_symlink() and path.is_file():
                if self.get_stats(stats.group(1)) is not None:  # a statistics file maxbench wrote
                    path.unlink(missing_ok=True)
                continue
            if not _ENTRY.fullmatch(path.name) or path.stem in self.used:
                continue
            if path.is_symlink() or not path.is_file():
                continue
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("key") == path.stem:
                path.unlink(missing_ok=True)
