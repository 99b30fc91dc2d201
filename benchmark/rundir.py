"""The run directory's format: what ``results/runs/<run-id>/`` holds, how it is read and written.

``manifest.json`` pins what defines the run (``RunPlan.identity``: suite, systems, samples, seed,
batch size, corpus, lineup, ref-ppl) with its versions, machine, models and fitted resources; a
run directory made by another run is refused, never mixed. The systems are the one part of the
identity a run may change (``apply_lineup``): a row depends on its own system, prompt, sample and
seed, never on the other systems of the lineup, so a lineup that adds a system to a run resumes it
and generates only that system's rows, and one that drops a system moves that system's rows to
``generations.removed.jsonl`` (kept, neither scored nor shown; they come back if the system does).
Everything else must match, and a lineup that shares no system with the run is another run. ``generations.jsonl`` holds one JSON row
per (system, prompt id, sample) (``row_key``), appended a batch at a time with one write, flushed
and fsynced, so a crash leaves at most a trailing partial line, which ``read_rows`` ignores (or
cuts off, with ``repair``). When every key is present the file is rewritten once, in canonical
order (the lineup's systems, then the suite's prompts, then samples), through a temporary file and
an atomic rename: an interrupted and an uninterrupted run end byte-identical, and nothing written
is ever lost.

Shard i of n writes ``generations.shard-i-of-n.jsonl`` (``shard_file``) in the same row format;
``merge_shards`` joins the shards (and any rows already merged) into the same
``generations.jsonl``. ``RowsSeen`` reads the keys written to all of these files incrementally,
so the processes of a run can see each other's rows. Besides these the folder holds
``timings.jsonl`` (wall and CPU time per phase, kept out of the manifest and the rows), ``scores.json``
(``maxbench.benchmark.metrics.scoring``), and while a run is generating the lock files of its batch
claims and the reference states its workers share.

Nothing here decodes or schedules; ``maxbench.benchmark.run.runner`` does, over this format.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, os_error
from maxbench.locks import exclusive, held

MANIFEST = "manifest.json"
GENERATIONS = "generations.jsonl"
#: rows of systems the run's lineup no longer lists (``apply_lineup``), in the row format
REMOVED = "generations.removed.jsonl"
TIMINGS = "timings.jsonl"
#: the run directory's folder of batch claims (lock files only; see ``maxbench.locks.claim``)
CLAIMS = ".claims"
#: the run directory's folder of reference states its workers share (``maxbench.benchmark.run.runner.ReferenceStateCache``)
REFERENCE_STATES = ".reference-states"
#: the shard files of a run (``shard_file``), for ``Path.glob``
SHARD_GLOB = "generations.shard-*.jsonl"


#: the option of ``generate``, ``run`` and ``score`` that drops damaged lines of a generations file
DROP_FLAG = "--drop-damaged-lines"


def _damaged(path: Path, n: int, what: str, sep: str = ":") -> MaxbenchError:
    return MaxbenchError(
        f"{path}{sep}{n} {what}; the run file is damaged: pass {DROP_FLAG} to drop only that line "
        f"(the file is copied to {path.name}.bak first) and keep every other row"
    )


def _parse_line(line: bytes):
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
                rows.append((n, _parse_line(line)))
            except UnicodeDecodeError:
                raise _damaged(path, n, "is not UTF-8") from None
            except ValueError:
                raise _damaged(path, n, "is not valid JSON") from None
    return rows


def read_rows(path: Path, repair: bool = False) -> list[dict]:
    """Rows of a generations file (see ``read_numbered_rows``)."""
    return [row for _, row in read_numbered_rows(path, repair)]


def row_problem(row) -> str | None:
    """What makes ``row`` no generated row (None when it is one): the one rule ``score``, ``view``
    and ``run`` read rows by."""
    if not isinstance(row, dict):
        return "is not a JSON object"
    for key in ("system", "prompt_id", "text", "reference"):
        if key not in row:
            return f"lacks field '{key}'"
    for key in ("system", "prompt_id", "text", "reference"):
        if not isinstance(row[key], str):
            return f"has a non-string '{key}' ({type(row[key]).__name__})"
    sample = row.get("sample", 0)
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
        return f"has a 'sample' that is not a whole number >= 0 ({json.dumps(sample)})"
    return None


def check_row(path: Path, n: int, row) -> dict:
    why = row_problem(row)
    if why:
        raise _damaged(path, n, why, sep=" row ")
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
    for path in [run_dir / GENERATIONS, *sorted(run_dir.glob(SHARD_GLOB)), run_dir / REMOVED]:
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
                why = row_problem(_parse_line(line))
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


def row_key(row: dict) -> tuple:
    return (row["system"], row["prompt_id"], int(row.get("sample", 0)))


@dataclass
class RunPlan:
    """Everything that defines a run's content (what the manifest pins)."""

    run_dir: Path
    suite: object  # maxbench.benchmark.data.suites.Suite
    systems: list  # [SystemSpec]
    samples: int = 1
    seed: int = 1234
    batch_size: int = 8
    corpus: str | None = None  # fitting corpus for layers that need one
    registry: str | None = None
    #: also record each layer's teacher-forced log-probabilities of the references (ref-ppl)
    reference_ppl: bool = True
    #: model options of every model of the run (``--model-args``, docs/models.md); part of the
    #: identity only when given, so runs made before the option existed keep theirs
    model_args: dict = field(default_factory=dict)
    #: model options of one model each (a lineup's ``[model_args."MODEL"]``): base model -> options;
    #: ``model_args`` overrides them key by key. Part of the identity only when given, as above
    per_model_args: dict = field(default_factory=dict)
    #: the lineup's sweeps, ``{name: {knob, values, systems}}`` (``Sweep.record``): kept in the manifest
    #: under ``sweeps`` and brought up to date with the lineup, not part of the identity
    sweeps: dict = field(default_factory=dict)

    def options_for(self, model: str) -> dict:
        """The options ``model`` (a ``SystemSpec.model``) is loaded with: its own, then ``model_args``."""
        return dict(self.per_model_args.get(model, {})) | dict(self.model_args)

    def identity(self) -> dict:
        extra = {"model_args": dict(sorted(self.model_args.items()))} if self.model_args else {}
        if any(self.per_model_args.values()):
            extra["per_model_args"] = {m: dict(sorted(o.items())) for m, o in sorted(self.per_model_args.items()) if o}
        return extra | {
            "suite": self.suite.describe() | {"path": None},
            "systems": [s.name for s in self.systems],
            "samples": self.samples,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "corpus": self.corpus,
            "registry": self.registry,
            "reference_ppl": self.reference_ppl,
        }

    def jobs(self, system) -> list[tuple]:
        return [(item, s) for item in self.suite.items for s in range(self.samples)]

    def batches(self, system) -> list[list[tuple]]:
        jobs = self.jobs(system)
        return [jobs[i : i + self.batch_size] for i in range(0, len(jobs), self.batch_size)]

    def canonical_order(self) -> dict:
        order = {}
        for si, system in enumerate(self.systems):
            for ji, (item, s) in enumerate(self.jobs(system)):
                order[(system.name, item.id, s)] = (si, ji)
        return order


def _recorded_identity(manifest) -> dict:
    ident = manifest.get("identity") if isinstance(manifest, dict) else None
    return ident if isinstance(ident, dict) else {}


def generated_systems(manifest: dict) -> dict:
    """Every system the run has generated rows of, with its manifest entry: its lineup's systems now
    and those removed since (``apply_lineup``)."""
    out = {}
    for key in ("removed_systems", "systems"):
        section = manifest.get(key) if isinstance(manifest, dict) else None
        if isinstance(section, dict):
            out |= section
    return out


def existing_manifest(plan: RunPlan) -> dict | None:
    """The run directory's manifest if there is one; refused when another run made it. A plan whose
    identity differs from the recorded one only in its systems is the same run with a changed lineup
    (``apply_lineup``), unless it shares no system with the run."""
    path = plan.run_dir / MANIFEST
    if not path.exists():
        return None
    ident = plan.identity()
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        raise MaxbenchError(f"{path} is unreadable; this run directory is damaged") from None
    recorded = _recorded_identity(old)
    if not isinstance(old, dict) or recorded != ident:
        diff = [k for k in ident if recorded.get(k) != ident[k]]
        diff += [k for k in recorded if k not in ident]
        before = recorded.get("systems")
        if diff == ["systems"]:
            made = set(before) | set(generated_systems(old)) if isinstance(before, list) else set()
            if not made & {s.name for s in plan.systems}:  # no row to keep: another run, not an edit
                diff = ["systems, and it shares none of them with this one"]
        if diff != ["systems"]:
            raise MaxbenchError(
                f"run directory {plan.run_dir} was made by a different run (differs in: "
                f"{', '.join(diff)}); pick another --run-id or delete that directory"
            )
    check_code(plan, old)
    return old


def system_code(system) -> dict:
    """Where a system's code comes from (docs/plugins.md): the origins of its layer and its model."""
    from maxbench.registry import builtin_origin
    from maxbench.systems.models import MODELS
    from maxbench.systems.system_strings import LAYERS

    model = MODELS.origin(system.model) if system.model in MODELS else builtin_origin()
    code = {"layer": LAYERS.origin(system.layer), "model": model}
    if getattr(system, "adapter", None):
        from maxbench.systems.adapters import ADAPTERS

        code["adapter"] = ADAPTERS.origin(system.adapter)
    return code


def check_code(plan: RunPlan, manifest: dict) -> None:
    """Refuse to resume a run whose rows were made by other plugin code: rows of old code must not be
    mixed with new. Built-ins are not compared (their origin is maxbench's version)."""
    from maxbench.registry import describe_origin, is_plugin_origin

    recorded = generated_systems(manifest)  # a system removed and listed again: its rows come back
    for system in plan.systems:
        entry = recorded.get(system.name)
        code = entry.get("code") if isinstance(entry, dict) else None
        if not isinstance(code, dict):
            continue  # a run made before origins were recorded
        now = system_code(system)
        for part in ("layer", "model", "adapter"):
            old, new = code.get(part), now.get(part)
            if (is_plugin_origin(old) or is_plugin_origin(new)) and old != new:
                raise MaxbenchError(
                    f"system '{system.name}' of run directory {plan.run_dir} was generated with {part} code from "
                    f"{describe_origin(old or {})}, but that code is now {describe_origin(new)}; rows of the old code "
                    "must not be mixed with new: pick another --run-id or delete that directory"
                )


def check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    with exclusive(plan.run_dir / MANIFEST):  # workers of one run start together
        return _check_or_write_manifest(plan, extra)


def _check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    path = plan.run_dir / MANIFEST
    ident = plan.identity()
    old = existing_manifest(plan)
    if old is not None:
        return old
    manifest = {
        "run_id": plan.run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "identity": ident,
        "suite": plan.suite.describe(),
        "samples": plan.samples,
        "seed": plan.seed,
        "seed_rule": "sha256(f'{seed}:{prompt_id}:{sample}')[:4] as big-endian int",
        "systems": {s.name: system_entry(s) for s in plan.systems},
    } | extra
    manifest = with_sweeps(manifest, plan)
    atomic_write(path, json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    return manifest


def system_entry(system) -> dict:
    """A system's entry in the manifest's ``systems`` section."""
    return {
        "model": system.model,
        "layer": system.layer,
        "layer_params": dict(system.params),
        "decoding": system.decoding.label,
        "code": system_code(system),
    } | ({"adapter": system.adapter, "adapter_params": dict(system.adapter_params)} if system.adapter else {})


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
    match (``existing_manifest``). Each step can be repeated, so a run killed in the middle of this
    ends the same on its next start. Files another process is writing now are not touched: the
    change is refused with one line instead (a worker of the old lineup still running)."""
    path = plan.run_dir / MANIFEST
    if not path.exists():
        return None
    with exclusive(path):  # the workers of one run start together: the first one does this
        manifest = existing_manifest(plan)
        if manifest is None:
            return None
        before = _recorded_identity(manifest).get("systems")
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
        manifest["identity"] = plan.identity()
        manifest["systems"] = systems
        if gone:
            manifest["removed_systems"] = gone
        change = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "added": added, "removed": removed}
        manifest["lineup_changes"] = [*(manifest.get("lineup_changes") or []), change]
        atomic_write(path, json.dumps(with_sweeps(manifest, plan), indent=1) + "\n")
        return {"added": added, "removed": removed, "restored": [n for n in added if n in back]}


def with_sweeps(manifest: dict, plan: RunPlan) -> dict:
    """``manifest`` with the plan's sweeps under ``sweeps`` (no key when it has none)."""
    out = {k: v for k, v in manifest.items() if k != "sweeps"}
    return out | {"sweeps": plan.sweeps} if plan.sweeps else out


def _move_rows(plan: RunPlan, scan: bool = True) -> set:
    """``apply_lineup``'s row moves (see there); does nothing when every row is where it belongs.
    Without ``scan`` the generations files are read only when the removed file holds rows of the
    plan's systems. Returns the systems whose rows came back from the removed file."""
    names = {s.name for s in plan.systems}
    removed_file = plan.run_dir / REMOVED
    parked = _system_lines(removed_file)
    coming = [(n, sys_, line) for n, sys_, line in parked if sys_ in names]
    if not scan and not coming:
        return set()
    files = [plan.run_dir / GENERATIONS, *sorted(plan.run_dir.glob(SHARD_GLOB))]
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
                row = check_row(path, n, _parse_line(line))
            except UnicodeDecodeError:
                raise _damaged(path, n, "is not UTF-8") from None
            except ValueError:
                raise _damaged(path, n, "is not valid JSON") from None
            out.append((n, row["system"], line))
    return out


def recorded_model_hash(manifest: dict | None, model: str) -> str | None:
    """The weights hash the manifest records for ``model`` (``models`` section), None if none."""
    models = manifest.get("models") if isinstance(manifest, dict) else None
    entry = models.get(model) if isinstance(models, dict) else None
    recorded = entry.get("hash") if isinstance(entry, dict) else None
    return recorded if isinstance(recorded, str) and recorded else None


def check_model_hash(plan: RunPlan, manifest: dict | None, model: str, loaded_hash: str | None) -> None:
    """Refuse to resume a run whose rows were made from other weights than the model loaded now (a run
    copied from another machine): rows of two weight files must not sit under one hash, and the
    recorded hash is never overwritten."""
    recorded = recorded_model_hash(manifest, model)
    if recorded is not None and loaded_hash is not None and recorded != loaded_hash:
        raise MaxbenchError(
            f"run directory {plan.run_dir} was generated with model '{model}' of hash {recorded}, but the "
            f"model loaded here has hash {loaded_hash}; rows of two weight files must not be mixed in one run: "
            "pick another --run-id, or regenerate the run in a new directory"
        )


def update_manifest(plan: RunPlan, key: str, value: dict) -> None:
    """Add ``value``'s entries to the manifest's ``key`` section, under the manifest's lock (workers
    update it side by side), keeping the section in the lineup's order whoever wrote first. A model's
    recorded hash is never replaced by another one (``check_model_hash``)."""
    path = plan.run_dir / MANIFEST
    rank = {name: i for i, name in enumerate([*(s.name for s in plan.systems), *(s.model_key for s in plan.systems)])}
    with exclusive(path):
        manifest = json.loads(path.read_text())
        if key == "models":
            for model, entry in value.items():
                check_model_hash(plan, manifest, model, entry.get("hash") if isinstance(entry, dict) else None)
        section = manifest.setdefault(key, {}) | value
        manifest[key] = dict(sorted(section.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        atomic_write(path, json.dumps(manifest, indent=1) + "\n")


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` as JSON lines with one write, flushed and fsynced (a crash cuts at most the last line)."""
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise os_error(path, exc) from None


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
        for path in [self.run_dir / GENERATIONS, *sorted(self.run_dir.glob(SHARD_GLOB))]:
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
                        row = _parse_line(line)
                    except UnicodeDecodeError:
                        raise _damaged(path, n, "is not UTF-8") from None
                    except ValueError:
                        raise _damaged(path, n, "is not valid JSON") from None
                    try:
                        self.keys.add(row_key(row))
                    except (KeyError, TypeError, ValueError, AttributeError):
                        raise _damaged(path, n, "is not a row") from None
            self._seen[path] = (inode, offset + end, lines + data[:end].count(b"\n"))
        return self.keys

    def done(self, system: str, batch: list) -> bool:
        return all((system, it.id, s) in self.keys for it, s in batch)


def finished_keys(plan: RunPlan) -> set:
    """Keys of the rows already written to any generations file of the run, and of the plan's systems'
    rows in the removed file (``apply_lineup`` moves them back): none is decoded again."""
    names = {s.name for s in plan.systems}
    parked = {row_key(row) for _, row in read_run_rows(plan.run_dir / REMOVED)}
    return RowsSeen(plan.run_dir).refresh() | {k for k in parked if k[0] in names}


def shard_file(run_dir: Path, shard: tuple[int, int] | None) -> Path:
    """The generations file shard ``(i, n)`` appends to (``generations.jsonl`` without a shard)."""
    return run_dir / (GENERATIONS if shard is None else f"generations.shard-{shard[0]}-of-{shard[1]}.jsonl")


def canonicalise(plan: RunPlan, path: Path, shard) -> None:
    """Rewrite ``path`` (shard ``shard``'s file, or the run's ``generations.jsonl`` when ``shard`` is
    None) in canonical order: a shard's file with the rows it holds, the run's file only once it and
    the shard files hold every row (an incomplete one is left to be appended to on the next run).
    Rows of a system the plan does not define are refused."""
    order = plan.canonical_order()
    sources = [(path, read_run_rows(path))]
    if shard is None:  # rows made by earlier sharded invocations count too
        sources += [(other, read_run_rows(other)) for other in sorted(plan.run_dir.glob(SHARD_GLOB))]
    unknown = [r for _, rows in sources for _, r in rows if row_key(r) not in order]
    if unknown:
        raise MaxbenchError(
            f"{path} holds rows of system '{unknown[0]['system']}', which this run does not "
            f"define; this run directory belongs to another registry"
        )
    by_key = rows_by_key(sources)
    if shard is None and len(by_key) < len(order):
        return  # incomplete: keep appending on the next run
    body = "".join(json.dumps(by_key[k], ensure_ascii=False) + "\n" for k in sorted(by_key, key=order.get))
    if not path.exists() or path.read_text() != body:
        atomic_write(path, body)


def merge_shards(plan: RunPlan) -> Path:
    """Join shard files into generations.jsonl in canonical order; all keys must be present."""
    order = plan.canonical_order()
    sources = [(plan.run_dir / GENERATIONS, read_run_rows(plan.run_dir / GENERATIONS))]
    sources += [(path, read_run_rows(path)) for path in sorted(plan.run_dir.glob(SHARD_GLOB))]
    by_key = rows_by_key(sources)
    missing = [k for k in order if k not in by_key]
    if missing:
        raise MaxbenchError(
            f"cannot merge {plan.run_dir}: {len(missing)} rows missing (e.g. {missing[0]}); "
            f"run the missing shards first"
        )
    out = plan.run_dir / GENERATIONS
    atomic_write(out, "".join(json.dumps(by_key[k], ensure_ascii=False) + "\n" for k in sorted(order, key=order.get)))
    shutil.rmtree(plan.run_dir / REFERENCE_STATES, ignore_errors=True)  # every row is written: not needed again
    return out
