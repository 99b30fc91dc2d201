"""The score cache: the same scores.json bytes with and without it, only what changed recomputed,
and a corrupt, mismatching or stale entry recomputed, never trusted."""

import json
import math
import shutil

import pytest

from maxbench.benchmark.metrics import score_cache
from maxbench.benchmark.metrics.base import Metric, get_metric
from maxbench.benchmark.metrics.scoring import ScoringOptions, score_run

METRICS = ["bleu-n", "self-bleu", "rep", "distinct", "kld"]
HUMAN_METRICS = ["self-bleu", "rep", "distinct"]  # those of METRICS that score the references too (the human row)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A generated run of two tiny-random systems (in-process, no scoring yet)."""
    from maxbench.cli import main

    tmp = tmp_path_factory.mktemp("cache")
    rows = [{"id": f"p{i}", "prompt": f"Review {i}: the soup was", "reference": f"cold, salty {i}"} for i in range(8)]
    (tmp / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "s.toml").write_text('name = "eight"\nfile = "p.jsonl"\n')
    argv = ["generate", "--model", "tiny-random", "--layer", "softmax", "--layer", "sparsemax", "--suite"]
    argv += [str(tmp / "s.toml"), "--decoding", "top_p=0.9,max_new_tokens=16", "--batch-size", "4"]
    argv += ["--runs-dir", str(tmp / "runs"), "--run-id", "r", "--threads", "1", "--no-progress"]
    assert main(argv) == 0
    return tmp / "runs" / "r"


def _options():
    return ScoringOptions(metrics=METRICS, n_resamples=50, progress=False)


@pytest.fixture
def fresh(run_dir, tmp_path):
    """A copy of the run without scores or cache."""
    d = tmp_path / "r"
    shutil.copytree(run_dir, d, ignore=shutil.ignore_patterns("scores.json", "score-cache"))
    return d


@pytest.fixture
def computed(monkeypatch):
    """Counts metric computations: (metric, number of texts) per call."""
    calls = []
    real = Metric.compute

    def counting(self, batch):
        calls.append((self.name, batch.texts[0]))
        return real(self, batch)

    monkeypatch.setattr(Metric, "compute", counting)
    return calls


def _without_created(path):
    doc = json.loads(path.read_text())
    doc.pop("created")
    return doc


def test_scores_json_is_the_same_bytes_with_and_without_the_cache(fresh, tmp_path, computed):
    plain = tmp_path / "plain"
    shutil.copytree(fresh, plain)
    score_run(plain, _options(), use_cache=False)
    assert not (plain / "score-cache").exists()
    score_run(fresh, _options())  # fills the cache
    first = (fresh / "scores.json").read_bytes()
    n = len(computed)
    score_run(fresh, _options())  # everything from the cache
    assert len(computed) == n, "a warm rescoring computes nothing"
    assert (fresh / "scores.json").read_bytes() == first, "unchanged scores leave the file as it is"
    (fresh / "scores.json").unlink()
    score_run(fresh, _options())  # written from cached entries only
    assert len(computed) == n
    cached, uncached = (fresh / "scores.json").read_text(), (plain / "scores.json").read_text()
    created = json.loads(uncached)["created"]
    assert cached.replace(json.loads(cached)["created"], created) == uncached
    assert _without_created(fresh / "scores.json") == _without_created(plain / "scores.json")


def test_only_the_changed_system_is_recomputed(fresh, computed):
    score_run(fresh, _options())
    gen = fresh / "generations.jsonl"
    rows = [json.loads(line) for line in gen.read_text().splitlines()]
    changed = next(r for r in rows if "sparsemax" in r["system"])
    changed["text"] = "an edited text, as if generated again"
    gen.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    computed.clear()
    score_run(fresh, _options())
    # the human row (the references, " cold, salty ..."): only the metrics that apply to it, on its probe
    human = [name for name, text in computed if text.startswith(" cold, salty")]
    assert sorted(human) == sorted(HUMAN_METRICS)
    computed[:] = [(name, text) for name, text in computed if not text.startswith(" cold, salty")]
    assert {name for name, _ in computed} == set(METRICS) | {"ref-ppl"}
    firsts = [text for _, text in computed]
    # sparsemax's batch, and softmax's first prompts only (the baseline: its statistics for the paired
    # tests come from the cache, and each metric's code that turns them into scores from this probe)
    assert changed["text"] in firsts and len(set(firsts)) == 2 and len(computed) == 2 * (len(METRICS) + 1)
    assert len(list((fresh / "score-cache").glob("*.stats.npz"))) == 2, "the baseline's and the human row's statistics"
    after = json.loads((fresh / "scores.json").read_text())
    plain = fresh.parent / "plain"
    shutil.copytree(fresh, plain, ignore=shutil.ignore_patterns("scores.json", "score-cache"))
    score_run(plain, _options(), use_cache=False)
    assert after | {"created": None} == json.loads((plain / "scores.json").read_text()) | {"created": None}
    assert len(list((fresh / "score-cache").glob("*.json"))) == 4, "entries no scoring uses are removed"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "edited value", "other key", "other format"])
def test_a_damaged_entry_is_recomputed_never_trusted(fresh, computed, damage):
    score_run(fresh, _options())
    expected = _without_created(fresh / "scores.json")
    entries = sorted((fresh / "score-cache").glob("*.json"))
    path = entries[0]
    doc = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        path.write_text(path.read_text()[:100])
    elif damage == "edited value":  # valid JSON, but the body no longer matches its sha256
        # a system's entry (comparisons hold differences, not values); the keys, hence the order
        # of the entries, change with the code version
        path = next(e for e in entries if '"value": ' in e.read_text())
        doc = json.loads(path.read_text())
        path.write_text(path.read_text().replace('"value": ', '"value": 1', 1))
        edited = json.loads(path.read_text())
        assert edited["sha256"] == doc["sha256"] and edited["body"] != doc["body"]
    elif damage == "other key":  # a whole valid entry, filed under another key
        path.write_text(entries[1].read_text())
    else:
        path.write_text(json.dumps(doc | {"format": "maxbench-score-cache/0"}))
    computed.clear()
    (fresh / "scores.json").unlink()
    score_run(fresh, _options())
    assert computed, "the damaged entry was recomputed"
    assert _without_created(fresh / "scores.json") == expected
    assert json.loads(path.read_text())["sha256"] == doc["sha256"], "and written again"


def test_a_change_of_metric_code_or_settings_recomputes(fresh, computed, monkeypatch):
    score_run(fresh, _options())
    computed.clear()
    score_run(fresh, ScoringOptions(metrics=METRICS, n_resamples=60, progress=False))
    assert len(computed) == 2 * (len(METRICS) + 1) + len(HUMAN_METRICS), "other bootstrap settings: every system again"
    computed.clear()
    monkeypatch.setattr(score_cache, "code_version", lambda: "an edited metric module")
    score_run(fresh, ScoringOptions(metrics=METRICS, n_resamples=60, progress=False))
    assert len(computed) == 2 * (len(METRICS) + 1) + len(HUMAN_METRICS), "other metric code: every system again"


def test_code_version_follows_the_metric_sources(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    before = score_cache.source_digest([a, b])
    b.write_text("y = 3\n")
    assert score_cache.source_digest([a, b]) != before
    names = {p.name for p in score_cache.metric_sources()}
    assert {"reference.py", "diversity.py", "perplexity.py", "stats.py", "base.py"} <= names
    assert score_cache.code_version() == score_cache.source_digest(score_cache.metric_sources())


@pytest.mark.parametrize("damage", ["garbage", "edited statistics"])
def test_damaged_baseline_statistics_are_computed_again_never_trusted(fresh, tmp_path, damage):
    import numpy as np

    score_run(fresh, _options())
    # the baseline's statistics (the human row's, beside them, hold no reference metric)
    (stats,) = [
        p
        for p in (fresh / "score-cache").glob("*.stats.npz")
        if "bleu-2" in score_cache.ScoreCache(fresh).get_stats(p.name.split(".")[0])
    ]
    key = stats.name.split(".")[0]
    good = score_cache.ScoreCache(fresh).get_stats(key)
    assert good and all(v is None or v[0] for v in good.values())
    if damage == "garbage":
        stats.write_bytes(b"PK\x03\x04 not a zip")
    else:  # a valid file whose numbers no longer give the cached scores
        with np.load(stats) as z:
            arrays = {k: z[k] for k in z.files}
        dense = next(k for k in arrays if k.count(".") == 1 and not k.endswith(".ids"))
        arrays[dense] = arrays[dense] + 1.0
        np.savez(stats, **arrays)
    # the other system's texts change: its comparison with the baseline is computed again
    gen = fresh / "generations.jsonl"
    rows = [json.loads(line) for line in gen.read_text().splitlines()]
    next(r for r in rows if "sparsemax" in r["system"])["text"] = "an edited text"
    gen.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    score_run(fresh, _options())
    plain = tmp_path / "plain"
    shutil.copytree(fresh, plain, ignore=shutil.ignore_patterns("scores.json", "score-cache"))
    score_run(plain, _options(), use_cache=False)
    assert _without_created(fresh / "scores.json") == _without_created(plain / "scores.json")
    assert score_cache.ScoreCache(fresh).get_stats(key) is not None, "and written again"


def test_rescoring_without_a_baseline_keeps_the_one_the_run_was_scored_against(fresh):
    """A lineup's baseline (or an earlier --baseline) is not the default one softmax: a plain
    `maxbench score RUN` later must not drop its paired tests or swap its baseline."""
    sparse = "tiny-random/sparsemax/top_p=0.9,max_new_tokens=16"
    first = score_run(fresh, _options(), baseline=sparse)
    assert first["comparisons"]["baseline"] == sparse
    again = score_run(fresh, _options())
    assert again["comparisons"]["baseline"] == sparse
    assert list(again["comparisons"]["systems"]) == ["tiny-random/softmax/top_p=0.9,max_new_tokens=16"]
    (fresh / "scores.json").unlink()
    assert score_run(fresh, _options())["comparisons"]["baseline"] == "tiny-random/softmax/top_p=0.9,max_new_tokens=16"


def test_scores_json_records_each_score_s_declared_range_and_a_cached_rescore_adds_it(fresh, computed):
    """The frontier statistics clip normal draws to a score's range, which scores.json carries (the
    metric's score_ranges; an unbounded end is null); a rescoring served from the cache records it too."""
    doc = score_run(fresh, _options())
    for name, entry in doc["metrics"].items():
        want = {s: [b if math.isfinite(b) else None for b in r] for s, r in get_metric(name).score_ranges.items()}
        assert entry["ranges"] == want, name
    assert doc["metrics"]["self-bleu"]["ranges"]["self-bleu-4"] == [0.0, 1.0]
    assert doc["metrics"]["kld"]["ranges"]["kld"] == [0.0, None]  # a divergence has no upper end
    for entry in doc["metrics"].values():  # a file scored before ranges were recorded
        entry.pop("ranges")
    (fresh / "scores.json").write_text(json.dumps(doc))
    before = len(computed)
    again = score_run(fresh, _options())
    assert len(computed) == before  # from the cache: nothing computed again
    assert again["metrics"]["self-bleu"]["ranges"]["self-bleu-4"] == [0.0, 1.0]
