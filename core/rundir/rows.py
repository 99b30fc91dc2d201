"""The rows of a run: the one row rule (``row_problem``), the JSON-lines readers and writers of the
generations files and of ``timings.jsonl``, rows joined by key (``rows_by_key``) and the dropping of
damaged lines (``--drop-damaged-lines``).

``generations.jsonl`` holds one JSON row per (system, prompt id, sample) (``row_key``), appended a
batch at a time with one write, flushed and fsynced, so a crash leaves at most a trailing partial line,
which ``read_rows`` ignores (or cuts off, with ``repair``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, os_error
from maxbench.rundir.files import (
    GENERATIONS,
    check_run_dir,
    generation_files,
    generations_path,
    removed_path,
    timings_path,
)

#: the option of ``generate``, ``run`` and ``score`` that drops damaged lines of a generations file
DROP_FLAG = "--drop-damaged-lines"


def damaged(path: Path, n: int, what: str, sep: str = ":") -> MaxbenchError:
    return MaxbenchError(
        f"{path}{sep}{n} {what}; the run file is damaged: pass {DROP_FLAG} to drop only that line "
        f"(the file is copied to {path.name}.bak first) and keep every other row"
    )


def parse_line(line: bytes):
    """A line's JSON value; raises ValueError (also for bytes that are not UTF-8)."""
    return json.loads(line.decode("utf-8"))


def read_numbered_rows(path: Path, repair: bool = False) -> list[tuple[int, object]]:
    """(line number, value) of every non-empty whole line of a JSON-lines file. With ``repair``, a
    trailing partial line (a write cut by a crash) is removed from the file; otherwise it is ignored.
    A line that is not UTF-8 JSON is refused, naming it and ``DROP_FLAG``."""
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data) and repair:
            with open(path, "r+b") as f:
                f.truncate(end)
    except OSError as exc:
        raise os_error(path, exc, "read") from None
    rows = []
    for n, line in enumerate(data[:end].split(b"\n")[:-1], 1):
        if line.strip():
            try:
                rows.append((n, parse_line(line)))
            except UnicodeDecodeError:
                raise damaged(path, n, "is not UTF-8") from None
            except ValueError:
                raise damaged(path, n, "is not valid JSON") from None
    return rows


def read_rows(path: Path, repair: bool = False) -> list[dict]:
    """Rows of a generations file (see ``read_numbered_rows``)."""
    return [row for _, row in read_numbered_rows(path, repair)]


def row_problem(row) -> str | None:
    """What makes ``row`` no generated row (None when it is one): the one rule every reader of a run's
    rows reads them by. A row holds ``system``, ``prompt_id``, ``text`` and ``reference`` (strings),
    ``sample`` (a whole number >= 0; 0 when absent) and, when present, ``prompt`` (a string); its
    other fields (seeds, statistics, the references' log-probabilities) are the runner's."""
    if not isinstance(row, dict):
        return "is not a JSON object"
    for key in ("system", "prompt_id", "text", "reference"):
        if key not in row:
            return f"lacks field '{key}'"
    for key in ("system", "prompt_id", "text", "reference"):
        if not isinstance(row[key], str):
            return f"has a non-string '{key}' ({type(row[key]).__name__})"
    if "prompt" in row and not isinstance(row["prompt"], str):
        return f"has a non-string 'prompt' ({type(row['prompt']).__name__})"
    sample = row.get("sample", 0)
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
        return f"has a 'sample' that is not a whole number >= 0 ({json.dumps(sample)})"
    return None


def check_row(path: Path, n: int, row) -> dict:
    why = row_problem(row)
    if why:
        raise damaged(path, n, why, sep=" row ")
    return row


def read_run_rows(path: Path, repair: bool = False) -> list[tuple[int, dict]]:
    """(line number, row) of every row of a generations file, each checked by ``row_problem``."""
    return [(n, check_row(path, n, row)) for n, row in read_numbered_rows(path, repair)]


def _key_text(key: tuple) -> str:
    return f"system '{key[0]}', prompt '{key[1]}', sample {key[2]}"


def rows_by_key(sources: list[tuple[Path, list[tuple[int, dict]]]], allow_same: bool = True) -> dict:
    """The rows of ``sources`` ((file, numbered rows) pairs) by ``row_key``. Two different rows with one
    key are refused, naming the key and both lines (never is one of them silently kept); the same
    row twice (a shard and the merged file) is one row unless not ``allow_same``."""
    by_key: dict = {}
    where: dict = {}
    for path, rows in sources:
        for n, row in rows:
            key = row_key(row)
            if key in by_key and (not allow_same or by_key[key] != row):
                (p0, n0) = where[key]
                at = f"lines {n0} and {n}" if p0 == path else f"{p0}:{n0} and line {n}"
                what = "two different rows" if by_key[key] != row else "the same row twice"
                raise MaxbenchError(
                    f"{path} {at} hold {what} for {_key_text(key)}; delete the wrong line "
                    f"(or move the run directory away to regenerate it)"
                )
            by_key[key] = row
            where[key] = (path, n)
    return by_key


def row_key(row: dict) -> tuple:
    return (row["system"], row["prompt_id"], int(row.get("sample", 0)))


def add_drop_option(p) -> None:
    """``--drop-damaged-lines`` of ``generate``, ``run`` and ``score``."""
    p.add_argument(
        DROP_FLAG,
        dest="drop_damaged_lines",
        action="store_true",
        help="first drop the damaged lines of the run's generations files (not JSON, not UTF-8, not a row), "
        "each file copied to <file>.bak first; every other row is kept (a dropped row is generated again)",
    )


def drop_damaged(run_dir: Path, asked: bool) -> None:
    """With ``asked``, ``drop_damaged_lines`` and one warning line on stderr per dropped line."""
    import sys

    if asked and Path(run_dir).is_dir():
        for note in drop_damaged_lines(run_dir):
            print(f"maxbench: warning: {note}", file=sys.stderr, flush=True)


def drop_damaged_lines(run_dir: Path) -> list[str]:
    """Drop every line of the run's generations files that is not a whole row (not UTF-8, not JSON, not
    a row by ``row_problem``), each file copied first to ``<name>.bak`` beside it; the other rows stay
    as they are. Returns one message per dropped line."""
    run_dir = Path(run_dir)
    notes = []
    for path in [*generation_files(run_dir), removed_path(run_dir)]:
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise os_error(path, exc, "read") from None
        end = data.rfind(b"\n") + 1
        keep, dropped = [], []
        for n, line in enumerate(data[:end].split(b"\n")[:-1], 1):
            if not line.strip():
                continue
            try:
                why = row_problem(parse_line(line))
            except UnicodeDecodeError:
                why = "is not UTF-8"
            except ValueError:
                why = "is not valid JSON"
            if why:
                dropped.append(f"{path}:{n} {why}")
            else:
                keep.append(line + b"\n")
        if not dropped:
            continue
        backup = path.with_name(path.name + ".bak")
        atomic_write(backup, data)
        atomic_write(path, b"".join(keep) + data[end:])
        notes += [f"dropped {d} (the original file is kept as {backup})" for d in dropped]
    return notes


def rows_bytes(rows: list[dict]) -> bytes:
    """Rows as the generations files hold them: one JSON line each, UTF-8."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as a whole generations file (atomically), in the given order."""
    atomic_write(path, rows_bytes(rows))


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` as JSON lines with one write, flushed and fsynced (a crash cuts at most the last line)."""
    data = rows_bytes(rows)
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise os_error(path, exc) from None


def read_generations(run_dir: Path, numbered: bool = False, missing_ok: bool = False) -> list:
    """The rows of the run's ``generations.jsonl``, each a row by ``row_problem``, no key twice
    (``rows_by_key``); with ``numbered``, (line number, row) pairs. A folder without the file is
    refused (``[]`` with ``missing_ok``), and so is one whose file holds no row."""
    run_dir = check_run_dir(run_dir)
    path = generations_path(run_dir)
    if not path.is_file():
        if missing_ok:
            return []
        raise MaxbenchError(f"{run_dir} has no {GENERATIONS}; generate first (maxbench generate / run)")
    rows = read_run_rows(path)
    if not rows and not missing_ok:
        raise MaxbenchError(f"{path} holds no generations; generate first (maxbench generate / run)")
    rows_by_key([(path, rows)], allow_same=False)  # a key twice: refused, naming both lines
    return rows if numbered else [row for _, row in rows]


def write_generations(run_dir: Path, rows: list[dict]) -> None:
    """Write ``rows`` as the run's ``generations.jsonl`` (atomically)."""
    write_rows(generations_path(run_dir), rows)


def read_timings(run_dir: Path) -> list[dict]:
    """The rows of the run's ``timings.jsonl`` (one per phase of each invocation; [] without one)."""
    path = timings_path(run_dir)
    return read_rows(path) if path.is_file() else []
