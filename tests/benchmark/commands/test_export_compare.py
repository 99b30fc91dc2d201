"""``maxbench export`` and ``maxbench compare`` on a small real run (tiny-random, real decoding and scorer)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from maxbench.cli import main

SYSTEMS = ["tiny-random/softmax/top_p=0.9,max_new_tokens=6", "tiny-random/sparsemax/top_p=0.9,max_new_tokens=6"]
FAST = "sacrebleu,bleu-n,rouge-l,rep,distinct,uniq"


def make_suite(folder):
    rows = [
        {"id": f"p{i}", "prompt": f"Review {i}: the soup was", "reference": f"cold and salty, sadly {i}"}
        for i in range(4)
    ]
    (folder / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "s.toml").write_text('name = "four"\nfile = "p.jsonl"\n')
    return folder / "s.toml"


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    suite = make_suite(root)
    argv = ["generate", "--suite", suite, "--runs-dir", root / "runs", "--run-id", "a", "--no-progress"]
    for s in SYSTEMS:
        argv += ["--system", s]
    assert main([str(a) for a in argv]) == 0
    run = root / "runs" / "a"
    assert main(["score", str(run), "--metrics", FAST, "--bootstrap", "50", "--quiet"]) == 0
    return run


def error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    return lines[0]


def expected_numbers(run) -> dict:
    """(system, prompt id or None, score) -> (value, signature), from scores.json."""
    doc = json.loads((run / "scores.json").read_text())
    out = {}
    for system, entry in doc["systems"].items():
        for name, s in entry["scores"].items():
            out[(system, None, name)] = (s["value"], s["signature"])
            for pid, v in s["per_prompt"].items():
                out[(system, pid, name)] = (v, s["signature"])
    return out


def read_back(path, fmt) -> list[dict]:
    if fmt == "jsonl":
        return [json.loads(x) for x in path.read_text().splitlines()]
    if fmt == "csv":
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            r["prompt_id"] = r["prompt_id"] or None
            r["value"] = float(r["value"]) if r["value"] else None
            r["sample"] = int(r["sample"]) if r["sample"] else None
            r["seed"] = int(r["seed"]) if r["seed"] else None
        return rows
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_export_round_trips_the_numbers_of_scores_json(scored_run, tmp_path, cli, fmt):
    out = tmp_path / f"t.{fmt}"
    rc, _, err = cli("export", scored_run, "--format", fmt, "--out", out)
    assert rc == 0, err
    rows = read_back(out, fmt)
    assert list(rows[0]) == ["system", "prompt_id", "sample", "seed", "metric", "value", "signature"]
    expected = expected_numbers(scored_run)
    got = {(r["system"], r["prompt_id"], r["metric"]): (r["value"], r["signature"]) for r in rows}
    assert len(got) == len(rows) == len(expected)
    assert got == expected  # exact: every float round-trips
    seeds = {
        (g["system"], g["prompt_id"]): (g["sample"], g["seed"])
        for g in map(json.loads, open(scored_run / "generations.jsonl"))
    }
    for r in rows:  # one sample per prompt: each prompt's row names its draw
        assert (r["sample"], r["seed"]) == (seeds[(r["system"], r["prompt_id"])] if r["prompt_id"] else (None, None))


def test_export_of_an_unscored_run_says_to_score_it(scored_run, tmp_path, cli):
    run = tmp_path / "r"
    shutil.copytree(scored_run, run)
    (run / "scores.json").unlink()
    rc, out, err = cli("export", run, "--format", "csv")
    assert rc == 2 and out == ""
    assert f"run `maxbench score {run}` first" in error_line(err)


def test_compare_of_a_run_with_itself_differs_in_nothing(scored_run, tmp_path, cli):
    rc, out, err = cli("compare", scored_run, scored_run, "--bootstrap", "50", "--quiet", "--out", tmp_path / "c.json")
    assert rc == 0, err
    assert out.startswith("| system A | system B | score |")
    doc = json.loads((tmp_path / "c.json").read_text())
    assert [(p["system_a"], p["system_b"]) for p in doc["pairs"]] == [(s, s) for s in SYSTEMS]
    names = set()
    for pair in doc["pairs"]:
        for name, s in pair["scores"].items():
            names.add(name)
            assert s["value_a"] == s["value_b"]
            if s["difference"] is not None:
                assert s["difference"] == 0 and s["p_value"] == 1 and s["n_prompts"] == 4
    assert {"bleu-4", "rouge-l-f", "uniq"} <= names
    # the same values as scores.json: the scorer's own metrics on the same texts
    scores = json.loads((scored_run / "scores.json").read_text())["systems"]
    for pair in doc["pairs"]:
        for name, s in pair["scores"].items():
            assert s["value_a"] == scores[pair["system_a"]]["scores"][name]["value"]


def test_compare_pairs_named_systems_across_runs(scored_run, cli):
    a, b = SYSTEMS
    rc, out, err = cli(
        "compare", scored_run, scored_run, "--systems", f"{b}={a}", "--metrics", "rep", "--bootstrap", "50", "--quiet"
    )
    assert rc == 0, err
    doc_rows = [line for line in out.splitlines()[2:]]
    assert doc_rows and all(f"| `{b}` | `{a}` | rep" in line for line in doc_rows)
    rc, _, err = cli("compare", scored_run, scored_run, "--systems", "nope/softmax/greedy", "--quiet")
    assert rc == 2 and "system 'nope/softmax/greedy' is not in run A" in error_line(err)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda m: m.update(seed=m["seed"] + 1), "the runs differ in seed"),
        (lambda m: m["suite"].update(sha256="f" * 64), "the runs differ in suite hash"),
    ],
)
def test_compare_refuses_runs_of_another_suite_or_seed(scored_run, tmp_path, cli, edit, expected):
    other = tmp_path / "b"
    shutil.copytree(scored_run, other)
    manifest = json.loads((other / "manifest.json").read_text())
    edit(manifest)
    (other / "manifest.json").write_text(json.dumps(manifest))
    rc, out, err = cli("compare", scored_run, other, "--quiet")
    assert rc == 2 and out == ""
    assert expected in error_line(err)
