"""The rest of issue 41: a study export records the run and the sha256 of every rated text, and
``view --study`` checks them against the run's texts (item 2); a suite CSV saved with ';' or tabs
is named as such (item 7's kind); and the ``ppl`` metric scores a prompt + text longer than the
evaluator's context with strided (sliding-window) perplexity, the stride in its signature (item 9)."""

import hashlib
import json
import math
import shutil

import pytest

from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.perplexity import text_windows
from maxbench.errors import MaxbenchError
from tests.support.explorer_fixtures import make_scored_run, make_study_export
from tests.test_new_user_runs import _score_args


def _one_line_exit_2(result):
    rc, _, err = result
    assert rc == 2 and err.startswith("maxbench: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


# ---------------------------------------------------------------- the study's texts checked against the run
@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    root = tmp_path_factory.mktemp("study-texts")
    from maxbench.cli import main

    run_dir = make_scored_run(root)
    assert main([str(a) for a in _score_args(run_dir)]) == 0  # the fixture edits a text after scoring
    return root, run_dir, make_study_export(root, run_dir)


def _gen_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "generations.jsonl").read_text().splitlines()]


def test_the_explorer_export_records_each_rated_texts_hash_and_run(studied):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    texts = {(g["prompt_id"], g.get("sample", 0), g["system"]): g["text"] for g in _gen_rows(run_dir)}
    assert doc["ratings"]
    for r in doc["ratings"]:
        assert r["run_id"] == run_id
        text = texts[(r["prompt_id"], r["sample"], r["system"])]
        assert r["text_sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_view_refuses_a_study_whose_texts_the_run_no_longer_holds(cli, studied, tmp_path):
    root, run_dir, study = studied
    doc = json.loads(study.read_text())
    # the run regenerated under its name after the study: one rated text is not the run's any more
    work = tmp_path / "runs" / run_dir.name
    shutil.copytree(run_dir, work)
    rows = _gen_rows(work)
    rated = doc["ratings"][0]
    for g in rows:
        if (g["prompt_id"], g.get("sample", 0), g["system"]) == (rated["prompt_id"], rated["sample"], rated["system"]):
            g["text"] = g["text"] + " and a new ending"
            g["pieces"] = None
    (work / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in rows))
    rc, _, err = cli(*_score_args(work))  # scored again: only the study's texts are stale
    assert rc == 0, err
    err = _one_line_exit_2(cli("view", work, "--study", study, "--out", tmp_path / "o1"))
    assert f"'{rated['system']}'" in err and f"'{rated['prompt_id']}'" in err and "sha256" in err, err
    assert not (tmp_path / "o1").exists()
    # the study's own run: every text matches, no warning
    rc, _, err = cli("view", run_dir, "--study", study, "--out", tmp_path / "o2")
    assert rc == 0 and "warning" not in err, err


def test_a_row_of_another_run_is_refused(cli, studied, tmp_path):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    first = doc["ratings"][0] | {"run_id": "another-run"}
    (tmp_path / "rows.json").write_text(json.dumps(doc | {"ratings": [first] + doc["ratings"][1:]}))
    err = _one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "rows.json", "--out", tmp_path / "o"))
    assert "another-run" in err and f"'{first['system']}'" in err and f"'{first['prompt_id']}'" in err, err


def test_an_export_from_before_the_hashes_opens_with_the_run_check_and_a_warning(cli, studied, tmp_path):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    old = [{k: v for k, v in r.items() if k not in ("text_sha256", "run_id")} for r in doc["ratings"]]
    (tmp_path / "old.json").write_text(json.dumps(doc | {"ratings": old}))
    rc, _, err = cli("view", run_dir, "--study", tmp_path / "old.json", "--out", tmp_path / "o")
    assert rc == 0, err
    assert "maxbench: warning:" in err and "no text hashes" in err and "export it again" in err, err
    index = (tmp_path / "o" / "index.html").read_text()
    assert "no text hashes" in index
    # the run check still holds for such an export
    (tmp_path / "other.json").write_text(json.dumps(doc | {"ratings": old, "run_id": "someone-elses"}))
    err = _one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "other.json", "--out", tmp_path / "o3"))
    assert "someone-elses" in err


# ---------------------------------------------------------------- a suite CSV with another delimiter
def _suite(tmp_path, body: str):
    (tmp_path / "p.csv").write_text(body, encoding="utf-8")
    (tmp_path / "s.toml").write_text('name = "mine"\nfile = "p.csv"\n')
    return str(tmp_path / "s.toml")


@pytest.mark.parametrize("delimiter, named", [(";", "';'"), ("\t", "tab"), ("|", "'|'")])
def test_a_suite_csv_with_another_delimiter_is_named(tmp_path, cli, delimiter, named):
    body = delimiter.join(["id", "prompt", "reference"]) + "\n" + delimiter.join(["1", "Hello there", "a ref"]) + "\n"
    err = _one_line_exit_2(cli("suites", _suite(tmp_path, body)))
    assert f"uses {named} as the delimiter" in err or f"use {named} as the delimiter" in err, err
    assert "save it with commas" in err, err
    # a comma-separated file without the column: the columns it has, no delimiter hint
    with pytest.raises(MaxbenchError, match=r"no 'prompt' column \(columns: \['id', 'text'\]\)"):
        load_suite(_suite(tmp_path, "id,text\n1,a\n"))
    with pytest.raises(MaxbenchError, match="CSV is empty"):
        load_suite(_suite(tmp_path, ""))
    assert [it.prompt for it in load_suite(_suite(tmp_path, "id,prompt\n1,Hello; there\n")).items] == ["Hello; there"]


# ---------------------------------------------------------------- ppl past the evaluator's context
def test_text_windows_score_each_text_token_once_with_enough_context():
    assert text_windows(3, 10, 10) == [(0, 10, 3)]
    assert text_windows(0, 10, 10) == [(0, 10, 1)]  # the first token has nothing before it
    for n_ctx, n_total, context, stride in [
        (3, 10, 6, None),
        (2, 40, 8, 3),
        (0, 100, 16, None),
        (30, 35, 8, None),  # the prompt alone fills the context
        (30, 100, 8, 8),  # a stride of the whole context: one token of context at least
        (9, 10, 8, None),
    ]:
        windows = text_windows(n_ctx, n_total, context, stride)
        scored = [t for _, end, first in windows for t in range(first, end)]
        assert scored == list(range(max(n_ctx, 1), n_total))
        s = min(stride or context // 2, context - 1)
        for start, end, first in windows:
            assert 0 <= start < first < end and end - start <= context
            assert first - start >= (context - s if start else first)
    with pytest.raises(ValueError):
        text_windows(3, 10, 1)


def _direct_nll(model, ids, start):
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    return -sum(logp[t - 1, ids[t]].item() for t in range(start, len(ids)))


def test_ppl_scores_a_text_longer_than_the_evaluators_context_in_strided_windows(tiny):
    context = tiny.model.config.max_position_embeddings
    assert context == 512
    prompt = "Once upon a time"
    long_text = " " + " ".join(f"w{i}" for i in range(400))
    short_text = " and then it rained."
    ctx = tiny.tokenizer(prompt)["input_ids"]
    cont = tiny.tokenizer(long_text, add_special_tokens=False)["input_ids"]
    assert len(cont) > context  # the text alone is longer than the context
    metric = get_metric("ppl", model="tiny-random")
    plain = metric.compute(TextBatch([short_text], ["p"], None, {"p": prompt}))
    res = metric.compute(TextBatch([long_text, short_text], ["p", "q"], None, {"p": prompt, "q": prompt}))
    # every token of the long text scored (none cut), in windows of the context moving by half of it
    short = tiny.tokenizer(short_text, add_special_tokens=False)["input_ids"]
    assert f"{len(cont) + len(short)} evaluator tokens scored" in res.notes
    assert res.signature == plain.signature + f"|stride:{context // 2}"
    seq = ctx + cont
    nll = sum(_direct_nll(tiny.model, seq[s:e], f - s) for s, e, f in text_windows(len(ctx), len(seq), context))
    nll += _direct_nll(tiny.model, ctx + short, len(ctx))
    assert res.scores["ppl"].value == pytest.approx(math.exp(nll / (len(cont) + len(short))), rel=1e-5)
    assert all(math.isfinite(v) for v in res.scores["ppl"].per_text)
    # a batch whose texts fit keeps the signature the committed leaderboards have, and its values
    again = metric.compute(TextBatch([short_text], ["p"], None, {"p": prompt}))
    assert again.signature == plain.signature and "stride" not in plain.signature
    assert again.scores["ppl"].value == plain.scores["ppl"].value
