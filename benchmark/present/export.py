"""A scored run as a tidy table (``maxbench export``).

The tidy table has one row per (system, prompt id, sample, metric) with the columns ``COLUMNS``:
``metric`` is the score's name in ``scores.json`` (``bleu-4``, ``self-bleu-4``, ``rouge-l``, ...),
``signature`` the signature string of the metric that gave it. ``scores.json`` keeps, for each score
of a system, its value and its value on each prompt alone (``per_prompt``: the score computed on
that prompt's texts, every sample of the prompt together); nothing per sample is kept, and the
scorer's statistics are per prompt too (``stats.PromptStats``). So:

* each score of a system has one row with ``prompt_id``, ``sample`` and ``seed`` empty: the value
  of ``scores.json`` over the whole run (for a corpus-level score such as sacreBLEU or MAUVE this
  is not the mean of the prompts' values; MAUVE, which has no per-prompt value, has only this row);
* each prompt has one row with the prompt's value; ``sample`` and ``seed`` are those of the
  prompt's one generation when the system has one sample of it, and empty when it has several
  (the value is then the prompt's, over all its samples, not any one sample's).

An undefined or not-applicable score is an empty ``value``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write

COLUMNS = ("system", "prompt_id", "sample", "seed", "metric", "value", "signature")
FORMATS = ("parquet", "csv", "jsonl")


# ---------------------------------------------------------------- reading a run


def read_manifest(run_dir: Path) -> dict:
    from maxbench.benchmark.rundir import MANIFEST

    path = Path(run_dir) / MANIFEST
    if not Path(run_dir).is_dir():
        raise MaxbenchError(f"{run_dir} is not a directory; give a run directory (results/runs/<run-id>)")
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise MaxbenchError(f"{path} is unreadable; this run directory is damaged") from None
    return doc if isinstance(doc, dict) else {}


def read_generations(run_dir: Path) -> list[dict]:
    from maxbench.benchmark.rundir import GENERATIONS, read_rows

    path = Path(run_dir) / GENERATIONS
    if not path.exists():
        raise MaxbenchError(f"{run_dir} has no {GENERATIONS}; generate first (maxbench generate / run)")
    return read_rows(path)


def read_scores(run_dir: Path) -> dict:
    """The run's ``scores.json``; a run that has none is refused with what to run."""
    path = Path(run_dir) / "scores.json"
    if not path.exists():
        raise MaxbenchError(f"{run_dir} has no scores.json; run `maxbench score {run_dir}` first")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise MaxbenchError(f"{path} is unreadable; score the run again (maxbench score {run_dir})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("systems"), dict):
        raise MaxbenchError(f"{path} is not a maxbench scores file; score the run again (maxbench score {run_dir})")
    return doc


# ---------------------------------------------------------------- the tidy table


def tidy_rows(scores: dict, generations: list[dict]) -> list[dict]:
    """The tidy rows (``COLUMNS``) of a run's scores and generations (see the module's docstring)."""
    draws: dict[tuple[str, str], list[tuple]] = {}
    for row in generations:
        key = (str(row["system"]), str(row["prompt_id"]))
        draws.setdefault(key, []).append((int(row.get("sample", 0)), row.get("seed")))
    out = []
    for system, entry in scores["systems"].items():
        for name, score in entry.get("scores", {}).items():
            signature = score.get("signature")
            out.append(_row(system, None, None, None, name, score.get("value"), signature))
            for pid, value in (score.get("per_prompt") or {}).items():
                mine = draws.get((system, pid), [])
                sample, seed = mine[0] if len(mine) == 1 else (None, None)
                out.append(_row(system, pid, sample, seed, name, value, signature))
    return out


def _row(system, prompt_id, sample, seed, metric, value, signature) -> dict:
    if value is not None:
        value = float(value)
    return dict(zip(COLUMNS, (system, prompt_id, sample, seed, metric, value, signature)))


def run_table(run_dir: Path) -> list[dict]:
    run_dir = Path(run_dir)
    scores = read_scores(run_dir)
    return tidy_rows(scores, read_generations(run_dir))


def to_frame(rows: list[dict]):
    """The tidy rows as a pandas DataFrame (``sample`` and ``seed`` nullable integers, empty
    ``value`` as NaN)."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("sample", "seed"):
        frame[col] = frame[col].astype("Int64")
    frame["value"] = frame["value"].astype("float64")
    return frame


def _arrow_table(rows: list[dict]):
    import pyarrow as pa

    schema = pa.schema(
        [
            ("system", pa.string()),
            ("prompt_id", pa.string()),
            ("sample", pa.int64()),
            ("seed", pa.int64()),
            ("metric", pa.string()),
            ("value", pa.float64()),
            ("signature", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def encode(rows: list[dict], fmt: str) -> bytes:
    """The rows in ``fmt`` (parquet, csv or jsonl). CSV writes an empty field for an empty value
    and floats as Python's shortest round-tripping text; JSONL writes null."""
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows).encode()
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in r.items()})
        return buf.getvalue().encode()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(_arrow_table(rows), buf)
        return buf.getvalue()
    raise MaxbenchError(f"unknown export format '{fmt}'; choose one of {', '.join(FORMATS)}")


def export_run(run_dir: Path, fmt: str, out: Path) -> int:
    """Write the run's tidy table to ``out`` (atomically); returns the number of rows."""
    rows = run_table(run_dir)
    atomic_write(out, encode(rows, fmt))
    return len(rows)


# ---------------------------------------------------------------- comparing two runs
