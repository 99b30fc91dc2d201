"""Shards and the canonical order. Shard i of n writes ``generations.shard-i-of-n.jsonl``
(``shard_file``) in the row format; ``merge_shards`` joins the shards (and any rows already merged)
into ``generations.jsonl``. ``RowsSeen`` reads the keys written to all of these files incrementally, so
the processes of a run can see each other's rows. When every key is present the run's file is rewritten
once in canonical order (the lineup's systems, then the suite's prompts, then samples), through a
temporary file and an atomic rename: an interrupted and an uninterrupted run end byte-identical, and
nothing written is ever lost."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, os_error
from maxbench.rundir.files import (
    GENERATIONS,
    REFERENCE_STATES,
    generation_files,
    generations_path,
    removed_path,
    shard_files,
)
from maxbench.rundir.manifest import RunPlan
from maxbench.rundir.rows import damaged, parse_line, read_run_rows, row_key, rows_by_key, rows_bytes, write_rows


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise MaxbenchError(f"--shard must look like i/n (e.g. 0/4), got '{text}'") from None
    if not (n >= 1 and 0 <= i < n):
        raise MaxbenchError(f"--shard {text}: need 0 <= i < n")
    return i, n


class RowsSeen:
    """Keys of the rows written so far to any generations file of the run (the merged file and every
    shard's, whatever the number of shards that wrote them), read incrementally: ``refresh`` parses
    only the whole lines appended since the last look (a file replaced by its canonical rewrite is
    read again), so a worker can ask before every batch whether another process has written it."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.keys: set = set()
        self._seen: dict = {}  # path -> (inode, bytes read, lines read)

    def refresh(self) -> set:
        for path in generation_files(self.run_dir):
            try:
                with open(path, "rb") as f:
                    inode = os.fstat(f.fileno()).st_ino
                    old_inode, offset, lines = self._seen.get(path, (None, 0, 0))
                    if old_inode != inode:
                        offset, lines = 0, 0
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise os_error(path, exc, "read") from None
            end = data.rfind(b"\n") + 1
            for n, line in enumerate(data[:end].split(b"\n")[:-1], lines + 1):
                if line.strip():
                    try:
                        row = parse_line(line)
                    except UnicodeDecodeError:
                        raise damaged(path, n, "is not UTF-8") from None
                    except ValueError:
                        raise damaged(path, n, "is not valid JSON") from None
                    try:
                        self.keys.add(row_key(row))
                    except (KeyError, TypeError, ValueError, AttributeError):
                        raise damaged(path, n, "is not a row") from None
            self._seen[path] = (inode, offset + end, lines + data[:end].count(b"\n"))
        return self.keys

    def done(self, system: str, batch: list) -> bool:
        return all((system, it.id, s) in self.keys for it, s in batch)


def finished_keys(plan: RunPlan) -> set:
    """Keys of the rows already written to any generations file of the run, and of the plan's systems'
    rows in the removed file (``apply_lineup`` moves them back): none is decoded again."""
    names = {s.name for s in plan.systems}
    parked = {row_key(row) for _, row in read_run_rows(removed_path(plan.run_dir))}
    return RowsSeen(plan.run_dir).refresh() | {k for k in parked if k[0] in names}


def shard_file(run_dir: Path, shard: tuple[int, int] | None) -> Path:
    """The generations file shard ``(i, n)`` appends to (``generations.jsonl`` without a shard)."""
    return run_dir / (GENERATIONS if shard is None else f"generations.shard-{shard[0]}-of-{shard[1]}.jsonl")


def shard_lines(run_dir: Path) -> int:
    """Lines in the run's shard files, counted without parsing them (for a progress bar)."""
    count = 0
    for path in shard_files(run_dir):
        try:
            count += path.read_bytes().count(b"\n")
        except OSError:
            pass
    return count


def canonicalise(plan: RunPlan, path: Path, shard) -> None:
    """Rewrite ``path`` (shard ``shard``'s file, or the run's ``generations.jsonl`` when ``shard`` is
    None) in canonical order: a shard's file with the rows it holds, the run's file only once it and
    the shard files hold every row (an incomplete one is left to be appended to on the next run).
    Rows of a system the plan does not define are refused."""
    order = plan.canonical_order()
    sources = [(path, read_run_rows(path))]
    if shard is None:  # rows made by earlier sharded invocations count too
        sources += [(other, read_run_rows(other)) for other in shard_files(plan.run_dir)]
    unknown = [r for _, rows in sources for _, r in rows if row_key(r) not in order]
    if unknown:
        raise MaxbenchError(
            f"{path} holds rows of system '{unknown[0]['system']}', which this run does not "
            f"define; this run directory belongs to another lineup"
        )
    by_key = rows_by_key(sources)
    if shard is None and len(by_key) < len(order):
        return  # incomplete: keep appending on the next run
    body = rows_bytes([by_key[k] for k in sorted(by_key, key=order.get)])
    if not path.exists() or path.read_bytes() != body:
        atomic_write(path, body)


def merge_shards(plan: RunPlan) -> Path:
    """Join shard files into generations.jsonl in canonical order; all keys must be present."""
    order = plan.canonical_order()
    sources = [(path, read_run_rows(path)) for path in generation_files(plan.run_dir)]
    by_key = rows_by_key(sources)
    missing = [k for k in order if k not in by_key]
    if missing:
        raise MaxbenchError(
            f"cannot merge {plan.run_dir}: {len(missing)} rows missing (e.g. {missing[0]}); "
            f"run the missing shards first"
        )
    out = generations_path(plan.run_dir)
    write_rows(out, [by_key[k] for k in sorted(order, key=order.get)])
    shutil.rmtree(plan.run_dir / REFERENCE_STATES, ignore_errors=True)  # every row is written: not needed again
    return out
