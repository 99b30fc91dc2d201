"""A run's lineup changed: a row depends on its own system, prompt, sample and seed, never on the
other systems of the lineup, so a lineup that adds a system to a run resumes it and generates only that
system's rows, and one that drops a system moves that system's rows to ``generations.removed.jsonl``
(kept, neither scored nor shown; they come back if the system does). Everything else must match, and a
lineup that shares no system with the run is another run.

A run whose rows do not depend on their batch (``RunPlan.batch_invariant``: the device generator) may
also resume at another batch size; ``apply_batch_size`` records each batch size it ran at."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, os_error
from maxbench.locks import exclusive, held
from maxbench.rundir.files import SHARD_GLOB, generation_files, manifest_path, removed_path
from maxbench.rundir.manifest import (
    RunPlan,
    batch_size_now,
    existing_manifest,
    generated_systems,
    recorded_identity,
    system_entry,
    with_sweeps,
    write_manifest,
)
from maxbench.rundir.rows import (
    check_row,
    damaged,
    parse_line,
    read_numbered_rows,
    read_run_rows,
    row_key,
    rows_by_key,
)


def apply_lineup(plan: RunPlan) -> dict | None:
    """Bring an existing run directory to the plan's systems, before anything is generated; returns
    ``{"added": [...], "removed": [...]}`` when the lineup changed, else None.

    The rows of a system the plan no longer lists move, byte for byte, from the generations files
    (``generations.jsonl`` and the shard files) to ``generations.removed.jsonl``, and the rows found
    there of a system the plan lists again move back: so ``generations.jsonl``, which ``score``,
    ``view``, ``export`` and ``study create`` read, holds the lineup's rows and no other, and a
    dropped system's rows are never lost nor generated twice. Then the manifest records the new
    systems (its identity's list and ``systems`` section; a removed system's entry goes to
    ``removed_systems``) and the change in ``lineup_changes``. Every other part of the identity must
    match (``existing_manifest``) but the batch size of a run whose rows do not depend on their batch,
    which stays the identity's first one (``apply_batch_size``). Each step can be repeated, so a run
    killed in the middle of this ends the same on its next start. Files another process is writing now are not touched: the
    change is refused with one line instead (a worker of the old lineup still running)."""
    path = manifest_path(plan.run_dir)
    if not path.exists():
        return None
    with exclusive(path):  # the workers of one run start together: the first one does this
        manifest = existing_manifest(plan)
        if manifest is None:
            return None
        before = recorded_identity(manifest).get("systems")
        names = [s.name for s in plan.systems]
        # the lineup as recorded: only rows of a system listed again can be out of place (in the removed file)
        back = _move_rows(plan, scan=before != names)
        if before == names:
            if with_sweeps(manifest, plan) != manifest:  # the same systems, grouped into sweeps otherwise
                atomic_write(path, json.dumps(with_sweeps(manifest, plan), indent=1) + "\n")
            return None
        old = generated_systems(manifest)
        added = [n for n in names if n not in before]
        removed = [n for n in before if n not in names]
        systems = {s.name: old.get(s.name) or system_entry(s) for s in plan.systems}
        gone = {n: e for n, e in old.items() if n not in names}
        manifest = {k: v for k, v in manifest.items() if k != "removed_systems"}
        # the identity's batch size stays the run's first (a later one is a part: apply_batch_size)
        manifest["identity"] = plan.identity() | {
            "batch_size": recorded_identity(manifest).get("batch_size", plan.batch_size)
        }
        manifest["systems"] = systems
        if gone:
            manifest["removed_systems"] = gone
        change = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "added": added, "removed": removed}
        manifest["lineup_changes"] = [*(manifest.get("lineup_changes") or []), change]
        write_manifest(plan.run_dir, with_sweeps(manifest, plan))
        return {"added": added, "removed": removed, "restored": [n for n in added if n in back]}


def apply_batch_size(plan: RunPlan) -> dict | None:
    """Record the plan's batch size as a new part of an existing run when it is not the one the run was
    last generated at (after ``apply_lineup``, before anything is generated); returns the new part, or
    None. ``batch_sizes`` in the manifest lists the parts in order, each ``{"batch_size",
    "rows_before"}``: the rows of the run's systems in its generations files when the part began (the
    first part's 0, then those finished at the batch sizes before), and when (``at``). A run never
    resumed at another batch size has no ``batch_sizes``: its identity's ``batch_size``, which stays the
    first part's, made every row. Only a run whose rows do not depend on their batch gets here with
    another batch size (``existing_manifest`` refuses the others)."""
    path = manifest_path(plan.run_dir)
    if not path.exists():
        return None
    with exclusive(path):  # the workers of one run start together: the first one records the part
        manifest = existing_manifest(plan)
        now = batch_size_now(manifest) if manifest is not None else None
        if now is None or now == plan.batch_size:
            return None
        # a process still decoding at the run's batch size claims its batches by their numbers at it (a
        # shard's file is known by its lock before its first row)
        shards = {f.with_name(f.name.removesuffix(".lock")) for f in plan.run_dir.glob(SHARD_GLOB + ".lock")}
        busy = [f for f in dict.fromkeys([*generation_files(plan.run_dir), *sorted(shards)]) if held(f)]
        if busy:
            raise MaxbenchError(
                f"{busy[0]} is being written by another process of this run at batch size {now}, and the "
                "processes of a run decode at one batch size: wait for it to end, or stop it, and run the same "
                f"command again (or join it with --batch-size {now})"
            )
        names = {s.name for s in plan.systems}
        keys = {row_key(row) for f in generation_files(plan.run_dir) for _, row in read_run_rows(f)}
        part = {
            "batch_size": plan.batch_size,
            "rows_before": sum(1 for key in keys if key[0] in names),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        parts = manifest.get("batch_sizes") or [{"batch_size": now, "rows_before": 0}]
        write_manifest(plan.run_dir, manifest | {"batch_sizes": [*parts, part]})
        return part


def _move_rows(plan: RunPlan, scan: bool = True) -> set:
    """``apply_lineup``'s row moves (see there); does nothing when every row is where it belongs.
    Without ``scan`` the generations files are read only when the removed file holds rows of the
    plan's systems. Returns the systems whose rows came back from the removed file."""
    names = {s.name for s in plan.systems}
    removed_file = removed_path(plan.run_dir)
    parked = _system_lines(removed_file)
    coming = [(n, sys_, line) for n, sys_, line in parked if sys_ in names]
    if not scan and not coming:
        return set()
    files = generation_files(plan.run_dir)
    lines = {f: _system_lines(f) for f in files}
    leaving = {f: [(n, sys_, line) for n, sys_, line in rows if sys_ not in names] for f, rows in lines.items()}
    if not coming and not any(leaving.values()):
        return set()
    busy = [f for f in files if (leaving[f] or (coming and f == files[0])) and held(f)]
    if busy:
        raise MaxbenchError(
            f"{busy[0]} is being written by another process (a worker of an earlier lineup of this run?); "
            "wait for it to end, or stop it, and run the same command again"
        )
    # every row that leaves is first kept in the removed file, with those already there
    sources = [(removed_file, [(n, json.loads(line)) for n, _, line in parked])]
    sources += [(f, [(n, json.loads(line)) for n, _, line in rows]) for f, rows in leaving.items() if rows]
    kept = rows_by_key(sources)  # two different rows under one key: refused, naming both
    by_key_line = {}
    for _, rows in [(removed_file, parked), *leaving.items()]:
        for _, _, line in rows:
            by_key_line.setdefault(row_key(json.loads(line)), line)
    if any(leaving.values()):
        atomic_write(removed_file, b"".join(by_key_line[k] + b"\n" for k in kept))
    # the rows of systems listed again go back to generations.jsonl (unless a file holds them already)
    present = {row_key(json.loads(line)) for rows in lines.values() for _, s, line in rows if s in names}
    back = [by_key_line[k] + b"\n" for k in kept if k[0] in names and k not in present]
    if back:
        read_numbered_rows(files[0], repair=True)  # a line cut by a crash would swallow the first row
        with open(files[0], "ab") as f:
            f.write(b"".join(back))
            f.flush()
            os.fsync(f.fileno())
    for f, rows in leaving.items():
        if rows:
            atomic_write(f, b"".join(line + b"\n" for _, s, line in lines[f] if s in names))
    stay = [by_key_line[k] + b"\n" for k in kept if k[0] not in names]
    if stay:
        atomic_write(removed_file, b"".join(stay))
    else:
        removed_file.unlink(missing_ok=True)
    return {s for _, s, _ in coming}


def _system_lines(path: Path) -> list[tuple[int, str, bytes]]:
    """(line number, system, the line's bytes) of each row of a generations file (checked as
    ``read_run_rows`` checks them; a trailing partial line is left out)."""
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc, "read") from None
    out = []
    for n, line in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        if line.strip():
            try:
                row = check_row(path, n, parse_line(line))
            except UnicodeDecodeError:
                raise damaged(path, n, "is not UTF-8") from None
            except ValueError:
                raise damaged(path, n, "is not valid JSON") from None
            out.append((n, row["system"], line))
    return out
