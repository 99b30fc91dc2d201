"""A run folder as every reader reads it (``read_run``): its manifest, its rows and its fresh scores,
each refused in one line when damaged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from maxbench.rundir.files import check_run_dir, has_scores
from maxbench.rundir.manifest import read_manifest
from maxbench.rundir.rows import read_generations
from maxbench.rundir.scores import ScoresFile, read_scores


@dataclass
class RunFiles:
    """A run folder as its readers hold it, each part read and checked by ``read_run``: the one type of
    a run's read data. The Python API's ``maxbench.RunResult`` is this type with the API's methods
    (``rows``, ``to_pandas``, ``compare``), so its ``path``, ``manifest``, ``generations`` and
    ``scores`` are these."""

    #: the run directory
    path: Path
    #: its manifest ({} for a folder without one)
    manifest: dict
    #: its rows of ``generations.jsonl`` (``read_generations``)
    generations: list[dict]
    #: its scores file, fresh (``ScoresFile.stale``); None for a run that is not scored
    scores_file: ScoresFile | None

    @property
    def scores(self) -> dict | None:
        """The scores file's document (``scores.json`` as a dict; ``ScoresFile.to_dict``), None for a run
        that is not scored."""
        return None if self.scores_file is None else self.scores_file.to_dict()


def read_run(run_dir: Path, scored: bool = False, rows_missing_ok: bool = False) -> RunFiles:
    """A run folder as every reader reads it: the manifest, the scores when there are some (``scored``:
    a run without them is refused) and the rows, each refused in one line when damaged, and scores of
    other generations refused as stale. ``rows_missing_ok``: scores kept without their generations."""
    run_dir = check_run_dir(run_dir)
    manifest = read_manifest(run_dir)
    scores = read_scores(run_dir) if scored or has_scores(run_dir) else None
    rows = read_generations(run_dir, missing_ok=rows_missing_ok)
    return RunFiles(path=run_dir, manifest=manifest, generations=rows, scores_file=scores)
