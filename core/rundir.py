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
(``ScoresFile``; computed by ``maxbench.benchmark.metrics.scoring``), and while a run is generating
the lock files of its batch claims and the reference states its workers share.

This module is the folder's one owner: every command, the rating app's study creation and the Python
API open a run's rows, manifest, shards and scores through it (``read_generations``,
``read_manifest``, ``read_scores``, ``write_scores``, ...), so a valid row (``row_problem``), a fresh
scores file (``ScoresFile.stale``) and the one-line refusal of a damaged folder are defined once.
Nothing here decodes, schedules or scores; ``maxbench.benchmark.run.runner`` generates and
``maxbench.benchmark.metrics.scoring`` scores, over this format.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, os_error
from maxbench.locks import exclusive, held

if TYPE_CHECKING:  # annotations only: the shared base imports no other maxbench package at run time
    from maxbench.benchmark.data.suites import Suite
    from maxbench.systems.system_strings import SystemSpec


MANIFEST = "manifest.json"
GENERATIONS = "generations.jsonl"
#: the scores of the run's generations (``ScoresFile``)
SCORES = "scores.json"
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


# ---------------------------------------------------------------- the folder and its files


def manifest_path(run_dir: Path) -> Path:
    return Path(run_dir) / MANIFEST


def generations_path(run_dir: Path) -> Path:
    return Path(run_dir) / GENERATIONS


def scores_path(run_dir: Path) -> Path:
    return Path(run_dir) / SCORES


def removed_path(run_dir: Path) -> Path:
    return Path(run_dir) / REMOVED


def timings_path(run_dir: Path) -> Path:
    return Path(run_dir) / TIMINGS


def shard_files(run_dir: Path) -> list[Path]:
    """The run's shard files (``shard_file``), in name order."""
    return sorted(Path(run_dir).glob(SHARD_GLOB))


def generation_files(run_dir: Path) -> list[Path]:
    """Every file that holds the run's rows of its lineup: ``generations.jsonl`` and the shard files."""
    return [generations_path(run_dir), *shard_files(run_dir)]


def run_inputs(run_dir: Path) -> list[tuple[Path, str]]:
    """Every file of the run this module owns (whether it exists yet or not), and the folder itself,
    as inputs of a command for ``maxbench.fileio.check_not_input``: an output never replaces them."""
    run_dir = Path(run_dir)
    named = [
        (manifest_path(run_dir), "the run's manifest"),
        (generations_path(run_dir), "the run's texts"),
        (scores_path(run_dir), "the run's scores"),
        (removed_path(run_dir), "the run's kept rows of dropped systems"),
        (timings_path(run_dir), "the run's timings"),
    ]
    named += [(f, "a shard of the run's texts") for f in shard_files(run_dir)]
    named += [(Path(f"{f}.lock"), "a lock file of the run") for f, _ in named[:3]]
    named += [(run_dir / CLAIMS, "the run's batch claims"), (run_dir / REFERENCE_STATES, "the run's reference states")]
    return [*named, (run_dir, "the run folder")]


def has_generations(run_dir: Path) -> bool:
    return generations_path(run_dir).is_file()


def has_scores(run_dir: Path) -> bool:
    return scores_path(run_dir).is_file()


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` as a Path; a folder that does not exist is refused in one line."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise MaxbenchError(
            f"{run_dir} is not a run directory (no such folder); make one first (maxbench run), "
            "or name a folder under results/runs/"
        )
    return run_dir


def json_type(value) -> str:
    """The JSON name of a value's type, for messages about a malformed file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _read_object(path: Path, what_to_do: str) -> dict:
    """A JSON object file of the run; a file that is unreadable, not UTF-8 JSON or not an object is
    refused in one line, naming it and ``what_to_do``."""
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise os_error(path, exc, "read") from None
    except ValueError:  # JSON and UTF-8 errors alike
        raise MaxbenchError(f"{path} is not valid JSON; {what_to_do}") from None
    if not isinstance(doc, dict):
        raise MaxbenchError(f"{path} is {json_type(doc)}, not a JSON object; {what_to_do}")
    return doc


def read_manifest(run_dir: Path, required: bool = False) -> dict:
    """The run's manifest ({} when the folder has none, unless ``required``). A damaged one (not JSON,
    not an object, an 'identity' that is not an object) is refused in one line."""
    run_dir = check_run_dir(run_dir)
    path = manifest_path(run_dir)
    if not path.is_file():
        if required:
            raise MaxbenchError(f"{run_dir} has no {MANIFEST}; its suite and seeds cannot be checked")
        return {}
    todo = f"the run directory is damaged: restore its {MANIFEST} or regenerate the run"
    doc = _read_object(path, todo)
    why = _manifest_problem(doc)
    if why:
        raise MaxbenchError(f"{path}: {why}; {todo}")
    return doc


def _manifest_problem(manifest: dict) -> str | None:
    """What is wrong with the shape of a run's manifest (None when nothing is)."""
    for key in ("systems", "removed_systems", "suite", "identity"):
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            return f"'{key}' is {json_type(manifest[key])}, expected an object"
    for key in ("systems", "removed_systems"):
        for name, entry in (manifest.get(key) or {}).items():
            if not isinstance(entry, dict):
                return f"{key}[{name!r}] is {json_type(entry)}, expected an object"
    samples = manifest.get("samples", 1)
    if not isinstance(samples, int) or isinstance(samples, bool):
        return f"'samples' is {json.dumps(samples)}, not a whole number"
    return None


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Write the run's manifest (atomically)."""
    atomic_write(manifest_path(run_dir), json.dumps(manifest, indent=1) + "\n")


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


def generations_sha256(run_dir: Path) -> str | None:
    """The sha256 of the run's ``generations.jsonl`` as it is now (None without one): what
    ``scores.json`` records of the generations it scored."""
    path = generations_path(run_dir)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(path, exc, "read") from None


def file_digests(run_dir: Path) -> dict[str, str]:
    """The sha256 of the run's manifest, generations and scores files as they are now ('' for one that
    is absent), keyed ``manifest``, ``generations``, ``scores``: what a report records of a run it used."""
    out = {}
    for name, path in (("manifest", manifest_path), ("generations", generations_path), ("scores", scores_path)):
        try:
            out[name] = hashlib.sha256(path(run_dir).read_bytes()).hexdigest()
        except FileNotFoundError:
            out[name] = ""
        except OSError as exc:
            raise os_error(path(run_dir), exc, "read") from None
    return out


def read_timings(run_dir: Path) -> list[dict]:
    """The rows of the run's ``timings.jsonl`` (one per phase of each invocation; [] without one)."""
    path = timings_path(run_dir)
    return read_rows(path) if path.is_file() else []


def shard_lines(run_dir: Path) -> int:
    """Lines in the run's shard files, counted without parsing them (for a progress bar)."""
    count = 0
    for path in shard_files(run_dir):
        try:
            count += path.read_bytes().count(b"\n")
        except OSError:
            pass
    return count


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
    suite: Suite
    systems: list[SystemSpec]
    samples: int = 1
    seed: int = 1234
    batch_size: int = 8
    corpus: str | None = None  # fitting corpus for layers that need one
    lineup: str | None = None
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
    #: the random generator of sampled rows (``maxbench.systems.decoding.GENERATORS``): None until
    #: the run's device is known, then that device's default unless one was asked for. Part of the
    #: identity only when not ``cpu``, so runs made before the option existed keep theirs
    generator: str | None = None

    def options_for(self, model: str) -> dict:
        """The options ``model`` (a ``SystemSpec.model``) is loaded with: its own, then ``model_args``."""
        return dict(self.per_model_args.get(model, {})) | dict(self.model_args)

    def identity(self) -> dict:
        extra = {"model_args": dict(sorted(self.model_args.items()))} if self.model_args else {}
        if self.generator not in (None, "cpu"):
            extra["generator"] = self.generator
        if any(self.per_model_args.values()):
            extra["per_model_args"] = {m: dict(sorted(o.items())) for m, o in sorted(self.per_model_args.items()) if o}
        return extra | {
            "suite": self.suite.describe() | {"path": None},
            "systems": [s.name for s in self.systems],
            "samples": self.samples,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "corpus": self.corpus,
            "registry": self.lineup,  # the lineup, under its old key: runs made before the rename resume
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
    if not manifest_path(plan.run_dir).exists():
        return None
    ident = plan.identity()
    old = read_manifest(plan.run_dir)
    recorded = _recorded_identity(old)
    if isinstance(old, dict) and recorded.get("generator", "cpu") != ident.get("generator", "cpu"):
        made, asked = recorded.get("generator", "cpu"), ident.get("generator", "cpu")
        raise MaxbenchError(
            f"run directory {plan.run_dir} was generated with the {made} generator, not the {asked} one; its "
            f"rows must not be mixed: resume it with --generator {made}, or pick another --run-id"
        )
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
        now = system.code()
        for part in ("layer", "model", "adapter"):
            old, new = code.get(part), now.get(part)
            if (is_plugin_origin(old) or is_plugin_origin(new)) and old != new:
                raise MaxbenchError(
                    f"system '{system.name}' of run directory {plan.run_dir} was generated with {part} code from "
                    f"{describe_origin(old or {})}, but that code is now {describe_origin(new)}; rows of the old code "
                    "must not be mixed with new: pick another --run-id or delete that directory"
                )


def repository_root() -> Path | None:
    """The source checkout maxbench runs from (the folder holding ``pyproject.toml`` above the
    package), or None for an installed package."""
    from maxbench import fileio  # the shared base: its folder is the package's top, core/ in a checkout

    root = Path(fileio.__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def recorded_path(path) -> str | None:
    """How a run's files record ``path``: relative to the repository when it lies inside it, so that a
    committed run names no folder of the machine that made it; otherwise as given."""
    if path is None:
        return None
    root = repository_root()
    if root is not None:
        try:
            return Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            pass
    return str(path)


def recorded_file(recorded: str) -> Path:
    """The file a recorded path names: a relative one under the repository when it is there (else
    from the working folder, as runs recorded it before), an absolute one as it is (runs made before
    paths were recorded relative; on another machine it is simply not found)."""
    path = Path(recorded)
    root = repository_root()
    if not path.is_absolute() and root is not None and (root / path).exists():
        return root / path
    return path


def check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    with exclusive(manifest_path(plan.run_dir)):  # workers of one run start together
        return _check_or_write_manifest(plan, extra)


def _check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    ident = plan.identity()
    old = existing_manifest(plan)
    if old is not None:
        return old
    manifest = {
        "run_id": plan.run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "identity": ident,
        "suite": plan.suite.describe() | {"path": recorded_path(plan.suite.path)},
        "samples": plan.samples,
        "seed": plan.seed,
        "seed_rule": "sha256(f'{seed}:{prompt_id}:{sample}')[:4] as big-endian int",
        "systems": {s.name: system_entry(s) for s in plan.systems},
    } | extra
    manifest = with_sweeps(manifest, plan)
    write_manifest(plan.run_dir, manifest)
    return manifest


def system_entry(system) -> dict:
    """A system's entry in the manifest's ``systems`` section."""
    return {
        "model": system.model,
        "layer": system.layer,
        "layer_params": dict(system.params),
        "decoding": system.decoding.label,
        "code": system.code(),
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
    path = manifest_path(plan.run_dir)
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
        write_manifest(plan.run_dir, with_sweeps(manifest, plan))
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
    path = manifest_path(plan.run_dir)
    rank = {name: i for i, name in enumerate([*(s.name for s in plan.systems), *(s.model_key for s in plan.systems)])}
    with exclusive(path):
        manifest = json.loads(path.read_text())
        if key == "models":
            for model, entry in value.items():
                check_model_hash(plan, manifest, model, entry.get("hash") if isinstance(entry, dict) else None)
        section = manifest.setdefault(key, {}) | value
        manifest[key] = dict(sorted(section.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        write_manifest(plan.run_dir, manifest)


def _rows_bytes(rows: list[dict]) -> bytes:
    """Rows as the generations files hold them: one JSON line each, UTF-8."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as a whole generations file (atomically), in the given order."""
    atomic_write(path, _rows_bytes(rows))


def write_generations(run_dir: Path, rows: list[dict]) -> None:
    """Write ``rows`` as the run's ``generations.jsonl`` (atomically)."""
    write_rows(generations_path(run_dir), rows)


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` as JSON lines with one write, flushed and fsynced (a crash cuts at most the last line)."""
    data = _rows_bytes(rows)
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
    parked = {row_key(row) for _, row in read_run_rows(removed_path(plan.run_dir))}
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
    body = _rows_bytes([by_key[k] for k in sorted(by_key, key=order.get)])
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


# ---------------------------------------------------------------- the scores file


def _scores_shape_problem(doc: dict) -> str | None:
    """What is wrong, and where, with the shape of a scores.json document (None when nothing is)."""
    if "systems" not in doc:
        return "has no 'systems' table of scores"
    systems = doc["systems"]
    if not isinstance(systems, dict):
        return f"'systems' is {json_type(systems)}, expected an object of system -> entry"
    for system, entry in systems.items():
        if not isinstance(entry, dict):
            return f"systems[{system!r}] is {json_type(entry)}, expected an object"
        scores = entry.get("scores", {})
        if not isinstance(scores, dict):
            return f"systems[{system!r}]['scores'] is {json_type(scores)}, expected an object of metric -> result"
        for metric, value in scores.items():
            if not isinstance(value, dict):
                return f"systems[{system!r}]['scores'][{metric!r}] is {json_type(value)}, expected an object"
    for key in ("metrics", "suite", "bootstrap", "versions"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"'{key}' is {json_type(doc[key])}, expected an object"
    human = doc.get("human")
    if human is not None and not (isinstance(human, dict) and isinstance(human.get("scores", {}), dict)):
        return "'human' is not an object with a 'scores' object (the human row)"
    if isinstance(human, dict) and any(not isinstance(v, dict) for v in human.get("scores", {}).values()):
        return "human['scores'] holds an entry that is not an object"
    comparisons = doc.get("comparisons")
    if comparisons is not None and not isinstance(comparisons, dict):
        return f"'comparisons' is {json_type(comparisons)}, expected an object"
    if isinstance(comparisons, dict):
        table = comparisons.get("systems")
        if table is not None and not isinstance(table, dict):
            return f"comparisons['systems'] is {json_type(table)}, expected an object"
        for system, entry in (table or {}).items():
            if not isinstance(entry, dict):
                return f"comparisons['systems'][{system!r}] is {json_type(entry)}, expected an object"
    return None


@dataclass
class ScoresFile:
    """A run's ``scores.json``: the scores of every system of the run's generations as they were when
    they were scored (``maxbench.benchmark.metrics.scoring.score_run`` writes it, ``read_scores``
    reads it). Its scores are the run's only while ``generations_sha256`` is the sha256 of the run's
    ``generations.jsonl`` now (``stale``): a system added and dropped again, or rows generated or
    dropped since, leave a scores file of other generations, which every reader refuses alike."""

    #: the run directory the file belongs to
    run_dir: Path
    #: system -> its entry: ``n_texts``, ``n_prompts``, coverage, ``notes``, ``not_applicable`` and
    #: ``scores`` (score name -> value, interval, per-prompt values, the metric that gave it, ...)
    systems: dict
    #: the file format (``maxbench-scores/1``)
    format: str | None = None
    #: the run's id, as its manifest names it
    run_id: str | None = None
    #: when the scores were computed (UTC, ISO 8601)
    created: str | None = None
    #: the sha256 of the ``generations.jsonl`` that was scored (None in a hand-made file: not checked)
    generations_sha256: str | None = None
    #: the suite as the manifest records it
    suite: dict | None = None
    #: the bootstrap's resamples, seed and level
    bootstrap: dict | None = None
    #: the versions of the packages the scores depend on
    versions: dict | None = None
    #: metric -> its signature, variant and (for a plugin's) origin; None in a file without the table
    metrics: dict | None = None
    #: the human row: the suite's references scored as a system's texts are (``label``, ``signature``,
    #: ``scores``; ``maxbench.benchmark.metrics.human``); None in a file scored before it, or without references
    human: dict | None = None
    #: the paired tests against the baseline (``baseline``, ``systems``: system -> rows); None without one
    comparisons: dict | None = None
    #: keys the format does not name, kept so that ``to_dict`` gives the file's document back
    extra: dict = field(default_factory=dict)
    #: the format's keys the file holds (``to_dict`` leaves out the others)
    keys: tuple = ()

    #: the document's keys in the order the file holds them
    KEYS = (
        "format",
        "run_id",
        "created",
        "generations_sha256",
        "suite",
        "bootstrap",
        "versions",
        "metrics",
        "systems",
        "human",
        "comparisons",
    )

    @classmethod
    def from_dict(cls, run_dir: Path, doc: dict) -> ScoresFile:
        """The typed file of a scores document; one whose shape is wrong is refused in one line."""
        problem = _scores_shape_problem(doc)
        if problem:
            raise MaxbenchError(f"{scores_path(run_dir)}: {problem}; rescore the run (maxbench score {run_dir})")
        known = {k: doc[k] for k in cls.KEYS if k in doc}
        extra = {k: v for k, v in doc.items() if k not in cls.KEYS}
        return cls(run_dir=Path(run_dir), extra=extra, keys=tuple(known), **known)

    def to_dict(self) -> dict:
        """The document as ``scores.json`` holds it: the format's keys in its order (those the file
        has, and any set since), then the others."""
        doc = {k: getattr(self, k) for k in self.KEYS if k in self.keys or getattr(self, k) is not None}
        return doc | self.extra

    def stale(self) -> str | None:
        """Why these are not the scores of the run's generations as they are now (None when they are,
        and when there is nothing to compare: no generations, or a file that records no hash)."""
        recorded = self.generations_sha256
        now = generations_sha256(self.run_dir)
        if now is None or not isinstance(recorded, str) or recorded == now:
            return None
        return (
            f"{scores_path(self.run_dir)} scored generations with sha256 {recorded}, but "
            f"{generations_path(self.run_dir)} has sha256 {now}: these are not this run's scores; "
            f"run `maxbench score {self.run_dir}`"
        )


def read_scores(run_dir: Path, fresh: bool = True) -> ScoresFile:
    """The run's scores file. A folder without one, a file that is not a scores document and, when
    ``fresh``, scores of other generations than the run's now (``ScoresFile.stale``) are refused in
    one line saying what to run."""
    run_dir = check_run_dir(run_dir)
    path = scores_path(run_dir)
    if not path.is_file():
        raise MaxbenchError(f"{run_dir} has no {SCORES}; run `maxbench score {run_dir}` first")
    scores = ScoresFile.from_dict(run_dir, _read_object(path, f"rescore the run (maxbench score {run_dir})"))
    why = scores.stale() if fresh else None
    if why:
        raise MaxbenchError(why)
    return scores


def write_scores(run_dir: Path, doc: dict) -> dict:
    """Write ``doc`` as the run's ``scores.json`` (atomically); returns what the file holds. When the
    file holds the same scores already and only ``created`` would differ, it is kept as it is (and so
    is its ``created``)."""
    path = scores_path(run_dir)
    text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        old_text = path.read_text(encoding="utf-8")
        old = json.loads(old_text)
    except (OSError, ValueError):
        old_text, old = None, None
    if isinstance(old, dict) and isinstance(old.get("created"), str):
        same = json.dumps(doc | {"created": old["created"]}, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        if old_text == same:  # the same scores: the file stays as it is
            return doc | {"created": old["created"]}
    if old_text != text:
        atomic_write(path, text)
    return doc


# ---------------------------------------------------------------- a run as its readers see it


@dataclass
class RunFiles:
    """What a run folder holds for its readers, each part read and checked here (``read_run``)."""

    #: the run directory
    run_dir: Path
    #: its manifest ({} for a folder without one)
    manifest: dict
    #: its rows (``read_generations``)
    rows: list[dict]
    #: its scores, fresh (``ScoresFile.stale``); None for a run that is not scored
    scores: ScoresFile | None


def read_run(run_dir: Path, scored: bool = False, rows_missing_ok: bool = False) -> RunFiles:
    """A run folder as every reader reads it: the manifest, the scores when there are some (``scored``:
    a run without them is refused) and the rows, each refused in one line when damaged, and scores of
    other generations refused as stale. ``rows_missing_ok``: scores kept without their generations."""
    run_dir = check_run_dir(run_dir)
    manifest = read_manifest(run_dir)
    scores = read_scores(run_dir) if scored or has_scores(run_dir) else None
    rows = read_generations(run_dir, missing_ok=rows_missing_ok)
    return RunFiles(run_dir, manifest, rows, scores)
