"""A run folder's files: their names and paths, the folder's check, the digests a report records of
them, and how a run's files record a path (relative to the repository when it lies inside it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import os_error

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


def read_object(path: Path, what_to_do: str) -> dict:
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
