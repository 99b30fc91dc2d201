"""The Python API (maxbench.evaluate, load_run, RunResult): the commands' code path, from Python."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

from maxbench.cli import main

SYSTEM = "tiny-random/softmax/top_p=0.9,max_new_tokens=4"
METRICS = ["bleu-n", "rep", "distinct"]


def test_import_maxbench_stays_light_and_reaches_the_api():
    code = (
        "import sys, maxbench; assert 'torch' not in sys.modules and 'maxbench.api' not in sys.modules; "
        "f = maxbench.evaluate; assert callable(maxbench.load_run) and 'torch' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_evaluate_load_run_and_to_pandas_give_the_numbers_of_maxbench_score(tmp_path):
    import maxbench

    rows = [{"id": f"p{i}", "prompt": f"Review {i}: the soup was", "reference": f"cold, sadly {i}"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    result = maxbench.evaluate(
        [SYSTEM], str(tmp_path / "s.toml"), metrics=METRICS, runs_dir=tmp_path / "runs", run_id="a", n_resamples=50
    )
    run = tmp_path / "runs" / "a"
    assert result.path == run and result.manifest["seed"] == 1234 and len(result.generations) == 3
    # the command line scores a copy of the run (no scores, no score cache) with the same settings
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "scores.json").unlink()
    shutil.rmtree(copy / "score-cache", ignore_errors=True)
    assert main(["score", str(copy), "--metrics", ",".join(METRICS), "--bootstrap", "50", "--quiet"]) == 0
    cli_scores = json.loads((copy / "scores.json").read_text())
    assert cli_scores["systems"] == result.scores["systems"]
    loaded = maxbench.load_run(run)
    assert loaded.scores == result.scores and loaded.generations == result.generations
    frame = loaded.to_pandas()
    assert list(frame.columns) == ["system", "prompt_id", "sample", "seed", "metric", "value", "signature"]
    entry = cli_scores["systems"][SYSTEM]["scores"]
    for row in frame.itertuples():
        s = entry[row.metric]
        want = s["value"] if row.prompt_id is None else s["per_prompt"][row.prompt_id]
        assert (want is None and math.isnan(row.value)) or row.value == want
        assert row.signature == s["signature"]
    assert set(frame["metric"]) == set(entry)
    # evaluating again resumes: nothing generated, the same scores
    again = maxbench.evaluate(
        SYSTEM, str(tmp_path / "s.toml"), metrics=METRICS, runs_dir=tmp_path / "runs", run_id="a", n_resamples=50
    )
    assert again.generations == result.generations and again.scores == result.scores
    # and a run compared with itself differs in nothing
    doc = loaded.compare(again, n_resamples=50)
    assert all(s["difference"] in (0, None) for p in doc["pairs"] for s in p["scores"].values())


def test_run_result_is_the_run_folder_owners_one_run_type_with_the_apis_methods():
    """``RunResult`` holds no fields of its own: it is ``maxbench.rundir.RunFiles`` (what ``read_run``
    reads) with the API's methods, so a run read by the API and by a command is the same data."""
    import dataclasses

    import maxbench
    from maxbench.api import RunResult
    from maxbench.rundir import RunFiles, read_run
    from tests.support.paths import ROOT

    assert issubclass(RunResult, RunFiles)
    assert dataclasses.fields(RunResult) == dataclasses.fields(RunFiles)
    run = ROOT / "results" / "base-lms" / "runs" / "base-lms-food-reviews"
    loaded, read = maxbench.load_run(run), read_run(run)
    assert type(loaded) is RunResult and vars(loaded) == vars(read)
    assert loaded.scores == read.scores_file.to_dict() == json.loads((run / "scores.json").read_text())
    assert repr(loaded).startswith(f"RunResult({str(run)!r}, {len(read.generations)} generations, scored")
