"""Rows, scores documents and plans of small run folders, for the tests of the run folder's owner."""

from pathlib import Path

from maxbench.rundir import RunPlan, generations_sha256

SMOKE_A = "tiny-random/softmax/greedy"
SMOKE_B = "tiny-random/sparsemax/greedy"


def row(system: str, pid: str, **extra) -> dict:
    """A generated row of ``system`` for prompt ``pid`` (sample 0), ``extra`` fields replacing its own."""
    return {"system": system, "prompt_id": pid, "sample": 0, "prompt": "P", "reference": "R", "text": "T"} | extra


def scores_doc(run_dir: Path, systems: list[str]) -> dict:
    """A scores document of ``systems`` over the run's generations as they are now (one score, rep)."""
    return {
        "format": "maxbench-scores/1",
        "run_id": run_dir.name,
        "created": "2026-01-01T00:00:00Z",
        "generations_sha256": generations_sha256(run_dir),
        "suite": {"name": "smoke"},
        "bootstrap": {"n_resamples": 0},
        "versions": {},
        "metrics": {"rep": {"signature": "rep|v1"}},
        "systems": {
            s: {"n_texts": 4, "scores": {"rep": {"value": 0.25 * i, "metric": "rep", "signature": "rep|v1"}}}
            for i, s in enumerate(systems)
        },
    }


def plan(run_dir: Path, systems: list[str]) -> RunPlan:
    """A plan of ``systems`` (system strings) on the smoke suite."""
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.systems.system_strings import parse_system

    return RunPlan(run_dir=run_dir, suite=load_suite("smoke"), systems=[parse_system(s) for s in systems])
