"""``maxbench score`` through the real command line: run directories, external files, bad input."""

from __future__ import annotations

import json

import pytest

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.cli import main
from maxbench.errors import MaxbenchError
from tests.support.cli import assert_one_line_exit_2
from tests.support.suites import write_tiny_suite

FAST = "sacrebleu,bleu-n,rouge-l,self-bleu,rep,distinct,uniq,kld,ms-jaccard"

PROMPTS = {
    "food-0001": ("I bought this coffee", "I bought this coffee and it tastes great, strong and smooth."),
    "food-0002": ("The dog food", "The dog food was a hit with both of our dogs."),
    "food-0003": ("These chips", "These chips are far too salty for me."),
    "food-0004": ("Great tea", "Great tea, I drink it every morning."),
}
OUTPUTS = {
    "smollm2-135m/softmax/top_p=0.9": [
        " and it is good.",
        " and it is very good coffee.",
        " was a hit.",
        "",
        " are salty.",
        " are too salty for me, too salty.",
        " I drink it.",
        " I like it.",
    ],
    "smollm2-135m/sparsemax/top_p=0.9": [
        " and I am not sure. I am not sure. I am not sure.",
        " is fine.",
        " is fine.",
        " is fine.",
        " are fine.",
        " are fine.",
        " is fine.",
        " is fine.",
    ],
}


def write_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for system, texts in OUTPUTS.items():
        i = 0
        for pid, (prompt, ref) in PROMPTS.items():
            for sample in range(2):
                rows.append(
                    {
                        "system": system,
                        "prompt_id": pid,
                        "sample": sample,
                        "seed": 1,
                        "prompt": prompt,
                        "reference": ref,
                        "text": texts[i],
                        "n_tokens": 5,
                        "finish": "length",
                    }
                )
                i += 1
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "run_id": "run",
        "suite": {"name": "toy", "sha256": "0" * 64},
        "systems": {s: {"model": "smollm2-135m", "layer": s.split("/")[1]} for s in OUTPUTS},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    assert err[0].startswith("maxbench: error: ")
    return err[0]


def test_score_run_writes_scores_json(tmp_path, capsys):
    run = write_run(tmp_path)
    assert main(["score", str(run), "--metrics", FAST, "--bootstrap", "200", "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out
    doc = json.loads((run / "scores.json").read_text())
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert doc["format"] == "maxbench-scores/1" and doc["bootstrap"]["n_resamples"] == 200
    assert set(doc["systems"]) == set(OUTPUTS)
    soft = doc["systems"]["smollm2-135m/softmax/top_p=0.9"]
    assert soft["n_texts"] == 8 and soft["n_prompts"] == 4 and soft["n_empty"] == 1
    # values are those of the metric objects on the system's texts
    texts = OUTPUTS["smollm2-135m/softmax/top_p=0.9"]
    ids = [pid for pid in PROMPTS for _ in range(2)]
    batch = TextBatch(texts, ids, {p: r for p, (_, r) in PROMPTS.items()})
    for name in ("bleu-n", "sacrebleu", "kld"):
        for key, score in get_metric(name).compute(batch).scores.items():
            assert soft["scores"][key]["value"] == pytest.approx(score.value, abs=1e-12)
    bleu4 = soft["scores"]["bleu-4"]
    assert bleu4["ci_low"] <= bleu4["value"] <= bleu4["ci_high"]
    assert set(bleu4["per_prompt"]) == set(PROMPTS)
    assert bleu4["signature"] == doc["metrics"]["bleu-n"]["signature"]
    assert doc["metrics"]["rep"]["higher_is_better"] is False
    # the sparsemax system loops and repeats itself: compared against the softmax baseline
    comp = doc["comparisons"]
    assert comp["baseline"] == "smollm2-135m/softmax/top_p=0.9"
    rep = comp["systems"]["smollm2-135m/sparsemax/top_p=0.9"]["self-bleu-4"]
    assert rep["difference"] > 0 and 0 < rep["p_value"] <= 1 and rep["n_prompts"] == 4


def test_score_external_files_json(tmp_path, capsys):
    from rouge_score import rouge_scorer
    from sacrebleu.metrics import BLEU

    gens = tmp_path / "gens.jsonl"
    refs = tmp_path / "refs.txt"
    hyps = ["The coffee is strong.", "", "Too salty for me."]
    gold = ["The coffee is strong and smooth.", "Our dogs loved it.", "These chips are far too salty."]
    gens.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(hyps)))
    refs.write_text("\n".join(gold) + "\n")
    assert (
        main(
            [
                "score",
                "--generations",
                str(gens),
                "--references",
                str(refs),
                "--metrics",
                "sacrebleu,rouge-l",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["n_texts"] == 3 and doc["n_empty"] == 1
    assert doc["scores"]["sacrebleu"]["value"] == pytest.approx(BLEU().corpus_score(hyps, [gold]).score, abs=1e-9)
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    want = sum(scorer.score(g, h)["rougeL"].fmeasure for g, h in zip(gold, hyps)) / 3
    assert doc["scores"]["rouge-l-f"]["value"] == pytest.approx(want, abs=1e-9)


def test_reference_free_metrics_need_no_references(tmp_path, capsys):
    gens = tmp_path / "gens.txt"
    gens.write_text("a b c a b c\nthe cat sat\n\n")  # the last line is an empty text
    assert main(["score", "--generations", str(gens), "--metrics", "rep,distinct", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "rep" in out and "distinct-1-corpus" in out


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"fine\n\xff\xfe broken\n", "line 2: not UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
        (b"", "holds no texts"),
    ],
)
def test_unreadable_generation_files(tmp_path, capsys, content, expected):
    gens = tmp_path / "gens.txt"
    gens.write_bytes(content)
    assert main(["score", "--generations", str(gens), "--metrics", "rep"]) == 2
    line = error_line(capsys)
    assert str(gens) in line and expected in line


def test_jsonl_line_without_text(tmp_path, capsys):
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"text": "ok"}\n{"text": "ok"}\n{"output": "no text field"}\n')
    assert main(["score", "--generations", str(gens), "--metrics", "rep"]) == 2
    line = error_line(capsys)
    assert f"{gens} line 3" in line and "'text'" in line


def test_different_numbers_of_generations_and_references(tmp_path, capsys):
    gens, refs = tmp_path / "g.txt", tmp_path / "r.txt"
    gens.write_text("one\ntwo\nthree\n")
    refs.write_text("one\ntwo\n")
    assert main(["score", "--generations", str(gens), "--references", str(refs), "--metrics", "sacrebleu"]) == 2
    line = error_line(capsys)
    assert "has 3 texts" in line and "has 2" in line and str(refs) in line


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--metrics", "rep,blue"], "unknown metric 'blue'"),
        (["--metrics", "sacrebleu"], "metric 'sacrebleu' needs references"),
        (["--metrics", ","], "--metrics is empty"),
    ],
)
def test_bad_metric_lists(tmp_path, capsys, args, expected):
    gens = tmp_path / "g.txt"
    gens.write_text("one\n")
    assert main(["score", "--generations", str(gens)] + args) == 2
    assert expected in error_line(capsys)


def test_missing_model_or_data_names_the_metric(tmp_path, capsys, monkeypatch):
    import maxbench.systems.assets
    import maxbench.systems.models

    def offline(name):
        raise MaxbenchError(f"cannot fetch asset '{name}' from its registry: no network")

    def no_model(name, device=None, threads=None):
        raise MaxbenchError(f"no model named '{name}'")

    monkeypatch.setattr(maxbench.systems.assets, "fetch", offline)
    monkeypatch.setattr(maxbench.systems.models, "load_model", no_model)
    gens, refs = tmp_path / "g.txt", tmp_path / "r.txt"
    gens.write_text("a text\n")
    refs.write_text("a reference\n")
    base = ["score", "--generations", str(gens), "--references", str(refs)]
    assert main(base + ["--metrics", "bertscore"]) == 2
    assert "metric 'bertscore' needs its encoder model" in error_line(capsys)
    assert main(base + ["--metrics", "meteor"]) == 2
    assert "metric 'meteor' needs WordNet" in error_line(capsys)
    assert main(base + ["--metrics", "ppl", "--ppl-model", "gpt-nothing"]) == 2
    assert "metric 'ppl' cannot load evaluator model 'gpt-nothing'" in error_line(capsys)


def test_bad_run_directories(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope"), "--metrics", "rep"]) == 2
    assert "is not a run directory" in error_line(capsys)
    run = write_run(tmp_path)
    with open(run / "generations.jsonl", "a") as f:
        f.write(json.dumps({"system": "s", "prompt_id": "x", "reference": "r"}) + "\n")
    assert main(["score", str(run), "--metrics", "rep"]) == 2
    line = error_line(capsys)
    assert "row 17 lacks field 'text'" in line and "generations.jsonl" in line
    assert main(["score", str(run), "--generations", "x.txt"]) == 2
    assert "either RUN_DIR or --generations" in error_line(capsys)
    (tmp_path / "other").mkdir()
    good = write_run(tmp_path / "other")
    assert main(["score", str(good), "--metrics", "rep", "--baseline", "no/such/system"]) == 2
    assert "--baseline 'no/such/system'" in error_line(capsys)


# ---------------------------------------------------------------- score keeps its work
def test_score_refuses_before_computing_when_scores_json_cannot_be_written(tmp_path, cli):
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", write_tiny_suite(tmp_path), "--decoding", "greedy,max_new_tokens=2",
        "--runs-dir", tmp_path, "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    (tmp_path / "r" / "scores.json").mkdir()
    err = assert_one_line_exit_2(
        cli("score", tmp_path / "r", "--metrics", "distinct"), "scores.json", "not a regular file"
    )
    assert "scoring" not in err


def test_the_default_metrics_say_which_registered_plugin_metrics_they_left_out(tmp_path, capsys, monkeypatch):
    import maxbench
    from maxbench import plugins
    from maxbench.benchmark.commands import score as score_command
    from maxbench.benchmark.metrics.base import Metric, mean_score

    class Length(Metric):
        name = "test-length"
        variant = "characters per text"
        signature = "test-length|v:1"

        @property
        def score_ranges(self):
            return {"test-length": (0.0, float("inf"))}

        def _compute(self, batch):
            return self.result([mean_score(batch, "test-length", [len(t) for t in batch.texts])])

    plugins.forget()
    try:
        maxbench.register_metric(Length)
        monkeypatch.setattr(score_command, "DEFAULT_METRICS", ("rep",))  # the defaults, cut to one cheap metric
        run = write_run(tmp_path)
        assert main(["score", str(run), "--bootstrap", "20", "--quiet"]) == 0
        err = capsys.readouterr().err
        assert (
            "maxbench: note: plugin metric 'test-length'" in err
            and "is not scored" in err
            and "--metrics test-length" in err
        )
        assert main(["score", str(run), "--metrics", "rep,test-length", "--bootstrap", "20", "--quiet"]) == 0
        assert "not scored" not in capsys.readouterr().err
    finally:
        plugins.forget()
