"""Human ratings in the rating app's long format, read from a file or from exported records.

One row per (study, item, system, annotator, criterion), as ``human_eval/studies/export.py`` writes it
(its COLUMNS); CSV, JSON (a list of rows, or ``{"ratings": [...]}``) and JSON Lines are read.
Every row is validated here, with the file and line of a bad value in the one-line error, so the
statistics downstream never see a malformed rating.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from maxbench.errors import MaxbenchError

REQUIRED_COLUMNS = ("study", "item", "system", "annotator", "criterion", "value")
OPTIONAL_COLUMNS = ("position", "seconds", "flags", "scale_min", "scale_max")


@dataclass(frozen=True)
class Rating:
    """One row of the long format.

    Attributes
    ----------
    study, item, system, annotator, criterion : str
        Who rated which text (an item is a prompt; (item, system) names one rated text) on which
        rubric criterion (an *aspect* in the report).
    value : float or None
        The rating; None where the row holds none (an empty cell), which the analysis excludes.
    position : float or None
        1-based position of the page in the annotator's presentation order.
    seconds : float or None
        Time the annotator spent on the page.
    flags : tuple of str
        Sorted, distinct flags such as ``attention_failed`` or ``revoked``.
    scale_min, scale_max : float or None
        The rubric's scale, when the export states it.
    where : str
        Where the row came from (``line 12`` of a CSV, ``record 3`` of JSON), for error messages.
    """

    study: str
    item: str
    system: str
    annotator: str
    criterion: str
    value: float | None
    position: float | None
    seconds: float | None
    flags: tuple[str, ...]
    scale_min: float | None
    scale_max: float | None
    where: str

    @property
    def unit(self) -> tuple[str, str]:
        return (self.item, self.system)


@dataclass(frozen=True)
class StudyProgress:
    """How far the rating of a study in the rating database has got.

    Attributes
    ----------
    texts_assigned, texts_rated : int
        Rating pages given to annotators (attention checks not counted), and those rated.
    texts_unrated_stopped : int
        Unrated pages of annotators who were revoked or stopped by the attention checks.
    closed : bool
        Whether the researcher has closed the study.
    """

    texts_assigned: int
    texts_rated: int
    texts_unrated_stopped: int
    closed: bool

    @property
    def complete(self) -> bool:
        return self.texts_rated == self.texts_assigned


@dataclass(frozen=True)
class Ratings:
    """The validated rows of one input and what identifies that input in a report.

    Attributes
    ----------
    rows : tuple of Rating
        In input order.
    source : str
        The file name or ``the rating database``: never an absolute path, so reports stay portable.
    sha256 : str
        Hex digest of ``sha256_of``.
    sha256_of : str
        What was hashed: the file's bytes, or the rows as canonical JSON for a database export.
    baseline : str or None
        The run's baseline as the study recorded it (database studies only): the default reference.
    progress : StudyProgress or None
        How many assigned texts are rated (database studies only; a file does not say).
    judgment : str
        The rubric's judgment type (database studies; ``likert`` for a file).
    gold : tuple of GoldScore or None
        Each annotator's gold-item accuracy (database studies with gold items; None for a file).
    """

    rows: tuple[Rating, ...]
    source: str
    sha256: str
    sha256_of: str
    baseline: str | None = None
    progress: StudyProgress | None = None
    judgment: str = "likert"
    gold: tuple | None = None


def load_ratings(path: str | Path) -> Ratings:
    """Read a long-format CSV, JSON (a list of rows, or {"ratings": [...]}) or JSON Lines file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MaxbenchError(f"ratings file {path} does not exist; pass the CSV/JSON the rating app exported") from None
    except IsADirectoryError:
        raise MaxbenchError(f"ratings file {path} is a directory; pass the exported CSV or JSON file") from None
    try:
        text = data.decode("utf-8-sig")  # a BOM is what spreadsheet programs write
    except UnicodeDecodeError as exc:
        raise MaxbenchError(
            f"{path.name} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); re-save it as UTF-8"
        ) from None
    sha = hashlib.sha256(data).hexdigest()
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".ndjson"):
        records = _json_records(text, path.name, lines=suffix != ".json")
    else:
        records = _csv_records(text, path.name)
    return ratings_from_records(records, source=path.name, sha256=sha)


def _csv_records(text: str, name: str) -> list[tuple[str, dict]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise MaxbenchError(f"{name} is empty; it needs a header row with {','.join(REQUIRED_COLUMNS)}")
    reader.fieldnames = [f.strip() for f in reader.fieldnames]
    if any(c not in reader.fieldnames for c in REQUIRED_COLUMNS):
        delimiter = _other_delimiter(text)
        if delimiter is not None:
            shown = "tab" if delimiter == "\t" else repr(delimiter)
            raise MaxbenchError(
                f"{name} lacks the required columns as read with commas, but the file seems to use {shown} as its "
                f"delimiter; maxbench reads comma-separated CSV (save it with commas)"
            )
    _check_columns(reader.fieldnames, name)
    records = []
    try:
        for row in reader:
            if None in row:
                raise MaxbenchError(
                    f"{name} line {reader.line_num} has more fields than the header; quote fields that contain commas"
                )
            records.append((f"line {reader.line_num}", row))
    except csv.Error as exc:
        raise MaxbenchError(f"{name} line {reader.line_num} is not valid CSV ({exc})") from None
    return records


def _other_delimiter(text: str) -> str | None:
    """The delimiter other than a comma (';', tab, '|') that splits the header line into all the
    required columns (a spreadsheet in a locale with decimal commas saves with ';'), else None."""
    header = next(iter(text.splitlines()), "")
    for delimiter in (";", "\t", "|"):
        if delimiter not in header:
            continue
        try:
            columns = {c.strip() for c in next(csv.reader([header], delimiter=delimiter))}
        except (csv.Error, StopIteration):
            continue
        if all(c in columns for c in REQUIRED_COLUMNS):
            return delimiter
    return None


def _json_records(text: str, name: str, lines: bool) -> list[tuple[str, dict]]:
    try:
        if lines:
            raw = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MaxbenchError(
            f"{name} is not valid JSON ({exc.msg} at line {exc.lineno}); export it again from the rating app"
        ) from None
    if isinstance(raw, dict) and isinstance(raw.get("ratings"), list):
        raw = raw["ratings"]
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise MaxbenchError(f'{name} must hold a list of rating objects (or {{"ratings": [...]}})')
    columns = set().union(*(r.keys() for r in raw)) if raw else set()
    _check_columns(columns, name, per_row=raw)
    return [(f"record {i + 1}", r) for i, r in enumerate(raw)]


def _check_columns(columns: Iterable[str], name: str, per_row: list[dict] | None = None) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in set(columns)]
    if missing:
        raise MaxbenchError(
            f"{name} lacks required column(s) {', '.join(missing)}; the long format needs {','.join(REQUIRED_COLUMNS)}"
        )
    for i, row in enumerate(per_row or []):
        lacking = [c for c in REQUIRED_COLUMNS if c not in row]
        if lacking:
            raise MaxbenchError(f"{name} record {i + 1} lacks {', '.join(lacking)}")


def ratings_from_records(
    records: Sequence[tuple[str, dict] | dict],
    source: str,
    sha256: str | None = None,
    baseline: str | None = None,
    progress: StudyProgress | None = None,
) -> Ratings:
    """Parse dict rows (as the rating app's export gives them) into validated Ratings."""
    rows = []
    for n, rec in enumerate(records):
        where, rec = rec if isinstance(rec, tuple) else (f"record {n + 1}", rec)
        rows.append(_parse_row(rec, where, source))
    sha256_of = "the file's bytes"
    if sha256 is None:
        canonical = json.dumps(
            [r if not isinstance(r, tuple) else r[1] for r in records], sort_keys=True, ensure_ascii=False, default=str
        )
        sha256, sha256_of = hashlib.sha256(canonical.encode("utf-8")).hexdigest(), "the rows as canonical JSON"
    return Ratings(tuple(rows), source, sha256, sha256_of, baseline, progress)


def _text(rec: dict, key: str, where: str, source: str) -> str:
    value = rec.get(key)
    text = "" if value is None else str(value).strip()
    if not text:
        raise MaxbenchError(f"{source} {where}: column {key} is empty; every row needs {key}")
    return text


def _number(rec: dict, key: str, where: str, source: str) -> float | None:
    value = rec.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}, not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}, not a number") from None
    if not math.isfinite(number):
        raise MaxbenchError(f"{source} {where}: {key} is {value!r}; give a finite number or leave it empty")
    return number


def _parse_row(rec: dict, where: str, source: str) -> Rating:
    flags = rec.get("flags")
    if isinstance(flags, (list, tuple)):
        flag_list = [str(f).strip() for f in flags]
    else:
        flag_list = [] if flags is None else [f.strip() for f in str(flags).split(";")]
    return Rating(
        study=_text(rec, "study", where, source),
        item=_text(rec, "item", where, source),
        system=_text(rec, "system", where, source),
        annotator=_text(rec, "annotator", where, source),
        criterion=_text(rec, "criterion", where, source),
        value=_number(rec, "value", where, source),
        position=_number(rec, "position", where, source),
        seconds=_number(rec, "seconds", where, source),
        flags=tuple(sorted({f for f in flag_list if f})),
        scale_min=_number(rec, "scale_min", where, source),
        scale_max=_number(rec, "scale_max", where, source),
        where=where,
    )


@dataclass(frozen=True)
class GoldScore:
    """One annotator's gold judgments: ``correct`` of ``n`` (one per gold pair and criterion)."""

    annotator: str
    n: int
    correct: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.n if self.n else None


def failing_annotators(scores: tuple[GoldScore, ...] | None, threshold: float | None) -> set[str]:
    """Annotators whose gold accuracy is below ``threshold`` (none without a rule or gold)."""
    if threshold is None or not scores:
        return set()
    return {s.annotator for s in scores if s.accuracy is not None and s.accuracy < threshold}
