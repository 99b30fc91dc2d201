"""The batch sizes of a run (``maxbench.rundir``): a run of the device generator, whose rows do not depend
on their batch, resumes at another batch size and its manifest records each part; a run of the CPU
generator is refused in one line saying why and what to do; a run never resumed at another batch size
keeps the manifest it had."""

import json

import pytest

from maxbench.errors import MaxbenchError
from maxbench.locks import exclusive
from maxbench.rundir import (
    MANIFEST,
    RunPlan,
    append_rows,
    apply_batch_size,
    apply_lineup,
    batch_size_now,
    check_or_write_manifest,
    existing_manifest,
    generations_path,
    read_manifest,
    shard_file,
)
from tests.support.rundir import SMOKE_A, SMOKE_B
from tests.support.rundir import plan as _smoke_plan
from tests.support.rundir import row as _row


def _plan(run_dir, systems, batch_size: int, generator: str | None) -> RunPlan:
    plan = _smoke_plan(run_dir, systems)
    plan.batch_size, plan.generator = batch_size, generator
    return plan


def _started(tmp_path, generator: str | None, rows: int = 2) -> RunPlan:
    """A run of SMOKE_A made at batch size 4 with ``rows`` rows written."""
    plan = _plan(tmp_path / "r", [SMOKE_A], 4, generator)
    check_or_write_manifest(plan, {})
    append_rows(generations_path(plan.run_dir), [_row(SMOKE_A, it.id) for it in plan.suite.items[:rows]])
    return plan


def test_a_device_generator_run_resumes_at_another_batch_size_and_records_each_part(tmp_path):
    _started(tmp_path, "device")
    smaller = _plan(tmp_path / "r", [SMOKE_A], 2, "device")
    assert existing_manifest(smaller) is not None  # not refused
    part = apply_batch_size(smaller)
    assert part is not None and (part["batch_size"], part["rows_before"]) == (2, 2)
    manifest = read_manifest(smaller.run_dir)
    assert manifest["identity"]["batch_size"] == 4  # the identity keeps the run's first batch size
    assert [{k: p[k] for k in ("batch_size", "rows_before")} for p in manifest["batch_sizes"]] == [
        {"batch_size": 4, "rows_before": 0},
        {"batch_size": 2, "rows_before": 2},
    ]
    assert batch_size_now(manifest) == 2
    assert apply_batch_size(smaller) is None  # the same batch size again: no new part
    assert check_or_write_manifest(smaller, {}) == read_manifest(smaller.run_dir)
    append_rows(generations_path(smaller.run_dir), [_row(SMOKE_A, smaller.suite.items[2].id)])
    apply_batch_size(_plan(tmp_path / "r", [SMOKE_A], 4, "device"))  # back to the first batch size: a third part
    parts = read_manifest(smaller.run_dir)["batch_sizes"]
    assert [(p["batch_size"], p["rows_before"]) for p in parts] == [(4, 0), (2, 2), (4, 3)]


def test_another_batch_size_is_refused_while_a_process_of_the_run_still_decodes_at_its_own(tmp_path):
    plan = _started(tmp_path, "device")
    before = (plan.run_dir / MANIFEST).read_bytes()
    running = shard_file(plan.run_dir, (1, 2))  # a shard that has not written its first row yet
    smaller = _plan(tmp_path / "r", [SMOKE_A], 2, "device")
    with exclusive(running):
        with pytest.raises(MaxbenchError) as caught:
            apply_batch_size(smaller)
    said = str(caught.value)
    assert f"{running} is being written by another process of this run at batch size 4" in said, said
    assert "--batch-size 4" in said and "\n" not in said
    assert (plan.run_dir / MANIFEST).read_bytes() == before
    assert apply_batch_size(smaller)["batch_size"] == 2  # once it has ended


@pytest.mark.parametrize("generator", [None, "cpu"])
def test_a_cpu_generator_run_at_another_batch_size_is_refused_saying_why_and_what_to_do(tmp_path, generator):
    plan = _started(tmp_path, generator)
    before = (plan.run_dir / MANIFEST).read_bytes()
    with pytest.raises(MaxbenchError) as caught:
        existing_manifest(_plan(tmp_path / "r", [SMOKE_A], 2, generator))
    said = str(caught.value)
    assert "\n" not in said
    for words in (
        "was generated at batch size 4 with the cpu generator",
        "depends on the rest of its batch",
        "resume it with --batch-size 4",
        "another --run-id",
        "--generator device",
    ):
        assert words in said, said
    with pytest.raises(MaxbenchError, match="resume it with --batch-size 4"):
        apply_batch_size(_plan(tmp_path / "r", [SMOKE_A], 2, generator))
    assert (plan.run_dir / MANIFEST).read_bytes() == before


def test_a_cpu_generator_run_differing_in_more_than_its_batch_size_names_every_difference(tmp_path):
    _started(tmp_path, "cpu")
    other = _plan(tmp_path / "r", [SMOKE_A], 2, "cpu")
    other.seed = 7
    with pytest.raises(MaxbenchError, match=r"differs in: seed, batch_size\)"):
        existing_manifest(other)


@pytest.mark.parametrize("generator", [None, "device"])
def test_a_run_resumed_at_its_own_batch_size_keeps_its_manifest_byte_for_byte(tmp_path, generator):
    plan = _started(tmp_path, generator)
    before = (plan.run_dir / MANIFEST).read_bytes()
    again = _plan(tmp_path / "r", [SMOKE_A], 4, generator)
    assert apply_batch_size(again) is None
    check_or_write_manifest(again, {})
    assert (plan.run_dir / MANIFEST).read_bytes() == before
    assert "batch_sizes" not in json.loads(before)


def test_the_identity_of_a_cpu_generator_run_holds_what_it_held_before_batch_sizes_could_change(tmp_path):
    plan = _plan(tmp_path / "r", [SMOKE_A], 4, "cpu")
    assert list(plan.identity()) == [
        "suite",
        "systems",
        "samples",
        "seed",
        "batch_size",
        "corpus",
        "registry",
        "reference_ppl",
    ]
    assert not plan.batch_invariant and _plan(tmp_path / "r", [SMOKE_A], 4, "device").batch_invariant


def test_a_lineup_change_at_another_batch_size_keeps_the_first_batch_size_and_records_the_part(tmp_path):
    _started(tmp_path, "device")
    grown = _plan(tmp_path / "r", [SMOKE_A, SMOKE_B], 2, "device")
    assert apply_lineup(grown)["added"] == [SMOKE_B]
    part = apply_batch_size(grown)
    assert part is not None and (part["batch_size"], part["rows_before"]) == (2, 2)
    manifest = read_manifest(grown.run_dir)
    assert manifest["identity"]["batch_size"] == 4 and manifest["identity"]["systems"] == [SMOKE_A, SMOKE_B]


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ('"4"', "'batch_sizes' is a string, expected a list"),
        ("[4]", "batch_sizes[0] is 4, expected an object with a whole batch_size"),
        ('[{"rows_before": 0}]', 'batch_sizes[0] is {"rows_before": 0}, expected an object with a whole batch_size'),
    ],
)
def test_a_damaged_batch_sizes_list_is_refused_naming_what_is_wrong(tmp_path, parts, problem):
    (tmp_path / MANIFEST).write_text('{"batch_sizes": ' + parts + "}")
    with pytest.raises(MaxbenchError) as caught:
        read_manifest(tmp_path)
    assert problem in str(caught.value) and "restore its manifest.json" in str(caught.value)
