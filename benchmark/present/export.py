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
    """The tidy rows of a run: its fresh scores (stale ones are refused, as the leaderboard refuses
    them) with its rows, both read by the run folder's owner."""
    from maxbench.rundir import read_run

    run = read_run(run_dir, scored=True)
    return tidy_rows(run.scores, run.generations)


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
