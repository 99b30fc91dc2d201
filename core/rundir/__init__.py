"""The run directory's format and its one owner: what ``results/runs/<run-id>/`` holds, how it is read
and written. Every command, the rating app's study creation and the Python API open a run's rows,
manifest, shards and scores through this package (``read_generations``, ``read_manifest``,
``read_scores``, ``write_scores``, ``read_run``, ...), so a valid row (``row_problem``), a fresh scores
file (``ScoresFile.stale``) and the one-line refusal of a damaged folder are defined once. This module
is the package's public API: import its names from ``maxbench.rundir``; its modules are

- ``files``: the folder's file names and paths, the folder's check, digests, recorded paths;
- ``rows``: the row rule, the JSON-lines readers and writers (``generations.jsonl``, ``timings.jsonl``),
  rows by key, dropping damaged lines;
- ``manifest``: ``RunPlan`` (what a run pins), the manifest's reader and writers, the resume checks;
- ``lineup``: a run whose lineup changed (``apply_lineup``; a dropped system's rows kept in
  ``generations.removed.jsonl``) or, free of its batch, its batch size (``apply_batch_size``);
- ``shards``: shard files, the rows seen so far, the canonical order and the merge;
- ``scores``: ``scores.json`` as a typed ``ScoresFile`` with its freshness check;
- ``run``: a run as every reader reads it (``RunFiles``, ``read_run``).

Besides these files the folder holds, while a run is generating, the lock files of its batch claims
and the reference states its workers share. Nothing here decodes, schedules or scores;
``maxbench.benchmark.run.runner`` generates and ``maxbench.benchmark.metrics.scoring`` scores, over
this format.
"""

from maxbench.rundir.files import (
    CLAIMS,
    GENERATIONS,
    MANIFEST,
    REFERENCE_STATES,
    REMOVED,
    SCORES,
    SHARD_GLOB,
    TIMINGS,
    check_run_dir,
    file_digests,
    generation_files,
    generations_path,
    generations_sha256,
    has_generations,
    has_scores,
    json_type,
    manifest_path,
    recorded_file,
    recorded_path,
    removed_path,
    repository_root,
    run_inputs,
    scores_path,
    shard_files,
    timings_path,
)
from maxbench.rundir.lineup import (
    apply_batch_size,
    apply_lineup,
)
from maxbench.rundir.manifest import (
    RunPlan,
    batch_size_now,
    check_code,
    check_model_hash,
    check_or_write_manifest,
    existing_manifest,
    generated_systems,
    read_manifest,
    recorded_model_hash,
    system_entry,
    update_manifest,
    with_sweeps,
    write_manifest,
)
from maxbench.rundir.rows import (
    DROP_FLAG,
    add_drop_option,
    append_rows,
    check_row,
    drop_damaged,
    drop_damaged_lines,
    read_generations,
    read_numbered_rows,
    read_rows,
    read_run_rows,
    read_timings,
    row_key,
    row_problem,
    rows_by_key,
    write_generations,
    write_rows,
)
from maxbench.rundir.run import (
    RunFiles,
    read_run,
)
from maxbench.rundir.scores import (
    ScoresFile,
    read_scores,
    write_scores,
)
from maxbench.rundir.shards import (
    RowsSeen,
    canonicalise,
    finished_keys,
    merge_shards,
    parse_shard,
    shard_file,
    shard_lines,
)

__all__ = [
    "CLAIMS",
    "DROP_FLAG",
    "GENERATIONS",
    "MANIFEST",
    "REFERENCE_STATES",
    "REMOVED",
    "RowsSeen",
    "RunFiles",
    "RunPlan",
    "SCORES",
    "SHARD_GLOB",
    "ScoresFile",
    "TIMINGS",
    "add_drop_option",
    "append_rows",
    "apply_batch_size",
    "apply_lineup",
    "batch_size_now",
    "canonicalise",
    "check_code",
    "check_model_hash",
    "check_or_write_manifest",
    "check_row",
    "check_run_dir",
    "drop_damaged",
    "drop_damaged_lines",
    "existing_manifest",
    "file_digests",
    "finished_keys",
    "generated_systems",
    "generation_files",
    "generations_path",
    "generations_sha256",
    "has_generations",
    "has_scores",
    "json_type",
    "manifest_path",
    "merge_shards",
    "parse_shard",
    "read_generations",
    "read_manifest",
    "read_numbered_rows",
    "read_rows",
    "read_run",
    "read_run_rows",
    "read_scores",
    "read_timings",
    "recorded_file",
    "recorded_model_hash",
    "recorded_path",
    "removed_path",
    "repository_root",
    "row_key",
    "row_problem",
    "rows_by_key",
    "run_inputs",
    "scores_path",
    "shard_file",
    "shard_files",
    "shard_lines",
    "system_entry",
    "timings_path",
    "update_manifest",
    "with_sweeps",
    "write_generations",
    "write_manifest",
    "write_rows",
    "write_scores",
]
