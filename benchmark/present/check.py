"""``maxbench leaderboard RUN... --check DIR``: a leaderboard made again against a committed one.

The contract (docs/reproducibility.md) between two machines, or a machine and the committed
results: **the same texts**, and **every number within a relative tolerance** (``RTOL``; the
perplexities ``PPL_RTOL``). The bits need not be the same: torch, MKL and oneDNN add in another
order on another CPU (an Intel Xeon moved 54 numbers of the default leaderboard in their 7th to
9th digit and graphmax paper's ref-eps-ppl in its 5th), but a text that changes, or a number that
moves further, is a real difference.

The texts of the runs (their ``generations.jsonl``, whose hash ``scores.json`` records and the
leaderboard checks) are compared with the texts the committed explorer shows (``DIR/explorer``:
every text of every system and prompt), the leaderboard the runs give (``leaderboard.csv`` as
``maxbench leaderboard`` would write it; nothing is written) with ``DIR/leaderboard.csv``: the
same systems and columns, the same empty cells, and every number within its tolerance.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from maxbench.errors import MaxbenchError

__all__ = ["RTOL", "PPL_RTOL", "ATOL", "CheckResult", "check", "compare", "explorer_texts", "run_texts", "tolerance"]

#: relative tolerance of every number: the differences seen between CPUs are below 1e-6 (the 7th
#: digit); 10x that leaves room and still catches any change of a text's score
RTOL = 1e-5
#: relative tolerance of the perplexities (ppl, ref-ppl, ref-eps-ppl and their bounds): the
#: exponential of a mean of log-probabilities, where a layer with exact zeros (sparsemax, graphmax
#: paper) puts reference tokens at its support's edge and a last-bit difference of the logits moves
#: one far (graphmax paper's ref-eps-ppl: 2.9e-5 on the Intel Xeon); 1e-3 is far below any
#: interval's width (its 95% interval spans about 13%)
PPL_RTOL = 1e-3
#: below this two numbers are equal whatever their ratio (a difference of means that is 0 on one
#: machine and 1e-17 on another)
ATOL = 1e-12
_PPL = re.compile(r"(^|-)ppl$")
_SUFFIXES = ("_ci_low", "_ci_high", "_p_vs_baseline")
_SHOWN = 8


def tolerance(column: str, rtol: float = RTOL, ppl_rtol: float = PPL_RTOL) -> float:
    """The relative tolerance of a leaderboard.csv column: ``ppl_rtol`` for a perplexity's value and
    interval bounds, ``rtol`` for everything else (p-values included)."""
    if column.endswith("_p_vs_baseline"):
        return rtol
    metric = next((column[: -len(s)] for s in _SUFFIXES if column.endswith(s)), column)
    return ppl_rtol if _PPL.search(metric) else rtol


@dataclass
class CheckResult:
    """What ``compare`` found: the broken parts of the contract (each a line) and every number that
    differs (row, column, fresh, committed, relative difference, tolerance), largest first."""

    problems: list[str]
    numbers: list[tuple[str, str, str, str, float, float]]
    cells: int
    texts: int
    fresh_hash: str
    committed_hash: str

    @property
    def holds(self) -> bool:
        return not self.problems


def _read_csv(path: Path) -> str:
    """The text of a leaderboard.csv, checked to be one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MaxbenchError(
            f"{path} does not exist; give a folder holding a leaderboard.csv (maxbench run --out)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MaxbenchError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    _parse_csv(text, str(path))
    return text


def _parse_csv(text: str, name: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    lines = list(csv.reader(io.StringIO(text)))
    if not lines or "system" not in lines[0]:
        raise MaxbenchError(f"{name} is not a leaderboard.csv (its first line names no 'system' column)")
    header = lines[0]
    if len(set(header)) != len(header):
        raise MaxbenchError(f"{name} names a column twice; it is not a leaderboard.csv maxbench wrote")
    rows: dict[str, dict[str, str]] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        if len(line) != len(header):
            raise MaxbenchError(f"{name} line {n} has {len(line)} cells, its header {len(header)}; the file is damaged")
        row = dict(zip(header, line))
        key = row["system"] + (f" [{row['run']}]" if "run" in row else "")
        if key in rows:
            raise MaxbenchError(f"{name} holds system {key!r} twice (lines {list(rows).index(key) + 2} and {n})")
        rows[key] = row
    return header, rows


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def compare(
    fresh_csv: str,
    committed_csv: str,
    fresh_texts: dict[tuple[str, str], str],
    committed_texts: dict[tuple[str, str], str],
    rtol: float = RTOL,
    ppl_rtol: float = PPL_RTOL,
    names: tuple[str, str] = ("the runs' leaderboard", "the committed leaderboard.csv"),
) -> CheckResult:
    """Compare a leaderboard.csv made again (``fresh_csv``, its texts by (system, prompt key)) with
    the committed one. Texts must be identical; the same systems and columns; a cell that is not a
    number (empty: no value) the same; a number within ``tolerance(column)`` relative (or ``ATOL``)."""
    header_f, rows_f = _parse_csv(fresh_csv, names[0])
    header_c, rows_c = _parse_csv(committed_csv, names[1])
    problems: list[str] = []
    for what, a, b in (("system", rows_f, rows_c), ("column", header_f, header_c)):
        only_f, only_c = [k for k in a if k not in b], [k for k in b if k not in a]
        if only_f:
            problems.append(f"{len(only_f)} {what}(s) only in {names[0]}: {', '.join(only_f[:_SHOWN])}")
        if only_c:
            problems.append(f"{len(only_c)} {what}(s) only in {names[1]}: {', '.join(only_c[:_SHOWN])}")
    numbers = []
    cells = 0
    for key in (k for k in rows_f if k in rows_c):
        for column in (c for c in header_f if c in header_c):
            got, want = rows_f[key][column], rows_c[key][column]
            a, b = _number(got), _number(want)
            if a is None or b is None:
                if got != want:
                    problems.append(f"{key}, {column}: {got or '(empty)'} here, {want or '(empty)'} committed")
                continue
            cells += 1
            if a == b:
                continue
            diff = abs(a - b)
            rel = diff / max(abs(a), abs(b))
            tol = tolerance(column, rtol, ppl_rtol)
            numbers.append((key, column, got, want, rel, tol))
            if diff > ATOL and rel > tol:
                problems.append(f"{key}, {column}: {got} here, {want} committed (relative {rel:.2g} > {tol:g})")
    numbers.sort(key=lambda r: -r[4] / r[5])
    systems = {s for s, _ in committed_texts} | {s for s, _ in fresh_texts}
    changed = [k for k in committed_texts if k in fresh_texts and fresh_texts[k] != committed_texts[k]]
    missing = [k for k in committed_texts if k not in fresh_texts]
    extra = [k for k in fresh_texts if k not in committed_texts]
    for what, keys in (
        ("differ", changed),
        ("are not in the runs", missing),
        ("are not in the committed explorer", extra),
    ):
        if keys:
            shown = "; ".join(f"{s} on prompt {p}" for s, p in sorted(keys)[:3])
            problems.append(f"{len(keys)} text(s) {what} (of {len(systems)} systems): {shown}")
    return CheckResult(
        problems, numbers, cells, len(committed_texts), texts_sha256(fresh_texts), texts_sha256(committed_texts)
    )


def texts_sha256(texts: dict[tuple[str, str], str]) -> str:
    """One hash of a set of texts: sha256 of their sorted (system, prompt key, text) as JSON lines."""
    h = hashlib.sha256()
    for key in sorted(texts):
        h.update((json.dumps([*key, texts[key]], ensure_ascii=False) + "\n").encode("utf-8"))
    return h.hexdigest()


def _prompt_key(prompt_id: str, sample: int) -> str:
    return f"{prompt_id}#{sample}" if sample else prompt_id  # the explorer's key of a prompt and sample


def run_texts(run_dirs: list[Path]) -> dict[tuple[str, str], str]:
    """Every text of the runs by (system, prompt key), read as ``maxbench view`` reads them."""
    from maxbench.benchmark.rundir import GENERATIONS, read_run_rows

    texts: dict[tuple[str, str], str] = {}
    for run_dir in run_dirs:
        for _, g in read_run_rows(Path(run_dir) / GENERATIONS):
            texts[(g["system"], _prompt_key(g["prompt_id"], g.get("sample", 0)))] = g.get("text") or ""
    return texts


def explorer_texts(folder: Path) -> dict[tuple[str, str], str]:
    """Every text the explorer in ``folder`` shows, by (system, prompt key)."""
    index_html = folder / "index.html"
    try:
        page = index_html.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MaxbenchError(
            f"{folder} holds no explorer (no index.html): the committed texts are read from it; give the folder "
            f"that `maxbench run --out` wrote, whose explorer/ holds every text"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MaxbenchError(f"cannot read {index_html}: {getattr(exc, 'strerror', None) or exc}") from None
    found = re.search(r'<script id="maxbench-data" type="application/json">(.*?)</script>', page, re.S)
    try:
        index = json.loads(found.group(1)) if found else None
        systems, chunks = index["systems"], int(index["n_chunks"])
    except (ValueError, TypeError, KeyError):
        raise MaxbenchError(
            f"{index_html} is not a maxbench explorer page (no readable data); write it again"
        ) from None
    texts: dict[tuple[str, str], str] = {}
    for c in range(chunks):
        path = folder / "data" / f"prompts-{c:03d}.js"
        try:
            body = path.read_text(encoding="utf-8")
            prefix = f"maxbenchChunk({c},"
            if not (body.startswith(prefix) and body.rstrip().endswith(");")):
                raise ValueError("not a data file of the explorer")
            records = json.loads(body[len(prefix) : body.rstrip().rindex(");")])
            for rec in records:
                for system, shown in zip(systems, rec["texts"]):
                    if shown is not None:
                        texts[(system, rec["key"])] = shown["text"]
        except FileNotFoundError:
            raise MaxbenchError(f"{path} is missing: the explorer in {folder} is incomplete; write it again") from None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise MaxbenchError(f"{path} is damaged ({exc}); write the explorer again") from None
    return texts


def _check_tolerance(name: str, value: float) -> None:
    if not (isinstance(value, float) and math.isfinite(value) and 0 <= value < 1):
        raise MaxbenchError(f"{name} must be a relative tolerance from 0 to below 1 (e.g. 1e-5), got {value}")


def check(
    run_dirs: list[Path], folder: Path, mixed: bool = False, rtol: float = RTOL, ppl_rtol: float = PPL_RTOL
) -> int:
    """Print the comparison of the runs' leaderboard and texts with ``folder``'s; 0 when the contract
    holds, 1 when it is broken (a MaxbenchError, exit 2, for input that cannot be compared)."""
    from maxbench.benchmark.present.leaderboard import leaderboard_csv

    _check_tolerance("--rtol", rtol)
    _check_tolerance("--ppl-rtol", ppl_rtol)
    folder = Path(folder)
    if not folder.is_dir():
        raise MaxbenchError(
            f"--check {folder}: no such folder; give the folder of the committed leaderboard (e.g. results)"
        )
    committed_csv = folder / "leaderboard.csv"
    committed = _read_csv(committed_csv)  # bad input first, before the runs load
    committed_texts = explorer_texts(folder / "explorer")
    fresh_csv = leaderboard_csv([Path(r) for r in run_dirs], mixed=mixed)
    result = compare(
        fresh_csv,
        committed,
        run_texts(run_dirs),
        committed_texts,
        rtol,
        ppl_rtol,
        names=("the runs' leaderboard", str(committed_csv)),
    )
    runs = ", ".join(str(r) for r in run_dirs)
    print(f"leaderboard check: {runs} against {folder} (numbers within {rtol:g} relative, perplexities {ppl_rtol:g})")
    same = result.fresh_hash == result.committed_hash
    print(
        f"texts: {result.texts} committed, sha256 {result.committed_hash[:16]}; the runs' {result.fresh_hash[:16]}"
        + (" (identical)" if same else " (different)")
    )
    moved = len(result.numbers)
    print(f"numbers: {result.cells} compared, {result.cells - moved} identical, {moved} differ")
    if result.numbers:
        print("largest differences (relative, against the tolerance):")
        for key, column, got, want, rel, tol in result.numbers[:_SHOWN]:
            print(f"  {key}  {column}: {got} here, {want} committed  ({rel:.2g} of {tol:g})")
    if result.holds:
        print("the contract holds: the same texts, every number within its tolerance")
        return 0
    print(f"the contract is broken ({len(result.problems)} problem(s)):")
    for line in result.problems[:20]:
        print(f"  {line}")
    if len(result.problems) > 20:
        print(f"  ... and {len(result.problems) - 20} more")
    return 1
