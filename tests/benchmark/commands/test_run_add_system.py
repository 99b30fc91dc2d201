"""A system added to the lineup of an existing run costs only that system's work: only its rows are
decoded (the others' bytes untouched), only its texts are scored (the others' scores, and the
baseline's statistics for its paired test, come from the score cache), and the run ends as a fresh
run of the new lineup would. A system dropped from the lineup keeps its rows aside, unscored, and
gets them back when it is listed again (core/rundir/lineup.py: apply_lineup)."""

import json

import pytest

import maxbench.systems.decoding as decoding
from maxbench.benchmark.metrics.base import Metric

OLD = ["tiny-random/softmax/top_p=0.9,max_new_tokens=8", "tiny-random/sparsemax/top_p=0.9,max_new_tokens=8"]
NEW = "tiny-random/softmax/top_k=50,max_new_tokens=8"


def _lineup(tmp_path, name, systems):
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "t"\nsuite = "smoke"\nsamples = 1\nbatch_size = 2\nbaseline = "{systems[0]}"\n'
        f'metrics = ["bleu-n", "distinct", "rep"]\nsystems = {json.dumps(systems)}\n'
    )
    return path


@pytest.fixture
def run(tmp_path, cli):
    def run(lineup, run_id="r", out="lb"):
        rc, _, err = cli(
            "run",
            "--lineup",
            lineup,
            "--runs-dir",
            tmp_path / "runs",
            "--run-id",
            run_id,
            "--out",
            tmp_path / out,
            "--n-resamples",
            "50",
            "--threads",
            "1",
            "--workers",
            "1",
            "--no-progress",
        )
        assert rc == 0, err
        return err

    return run


@pytest.fixture
def spies(monkeypatch):
    """What each invocation decodes (decoding label, texts) and scores (metric, texts)."""
    seen = {"decode": [], "score": []}
    real_decode, real_compute = decoding.decode, Metric.compute

    def decode(lm, layer, prompts, setting, seeds, **kw):
        seen["decode"].append((setting.label, len(prompts)))
        return real_decode(lm, layer, prompts, setting, seeds, **kw)

    def compute(self, batch):
        seen["score"].append((self.name, tuple(batch.texts)))
        return real_compute(self, batch)

    monkeypatch.setattr(decoding, "decode", decode)
    monkeypatch.setattr(Metric, "compute", compute)
    return seen


def _entries(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def _texts(gen, system):
    return {json.loads(line)["text"] for line in gen.read_text().splitlines() if json.loads(line)["system"] == system}


def test_adding_a_system_generates_and_scores_only_that_system(tmp_path, run, spies):
    run(_lineup(tmp_path, "a", OLD))
    r = tmp_path / "runs" / "r"
    gen, cache = r / "generations.jsonl", r / "score-cache"
    before, cached = gen.read_bytes(), _entries(cache)
    spies["decode"].clear(), spies["score"].clear()

    b = _lineup(tmp_path, "b", [*OLD, NEW])
    err = run(b)
    assert "added " + NEW in err
    # decoded: the new system's two batches of two prompts, nothing else
    assert spies["decode"] == [("top_k=50,max_new_tokens=8", 2)] * 2
    after = gen.read_bytes()
    assert after.startswith(before) and after[len(before) :].count(b"\n") == 4, "the old rows' bytes are untouched"
    # scored: the new system's texts in full; the baseline only on a probe of its first prompts (what
    # turns its cached statistics into scores), the other system not at all
    new_texts, base_texts = _texts(gen, NEW), _texts(gen, OLD[0])
    full = {texts for _, texts in spies["score"] if len(texts) == 4}
    assert full and all(set(texts) == new_texts for texts in full)
    # (and the human row's probe of the references, which are no system's texts)
    generated = new_texts | base_texts | _texts(gen, OLD[1])
    assert all(set(texts) <= base_texts or not set(texts) & generated for _, texts in spies["score"] if len(texts) < 4)
    assert not any(set(texts) & _texts(gen, OLD[1]) for _, texts in spies["score"])
    assert _entries(cache).items() >= cached.items(), "the old systems' cache entries were served, not rewritten"
    manifest = json.loads((r / "manifest.json").read_text())
    assert manifest["identity"]["systems"] == [*OLD, NEW] and list(manifest["systems"]) == [*OLD, NEW]
    assert [(c["added"], c["removed"]) for c in manifest["lineup_changes"]] == [([NEW], [])]
    assert NEW in (tmp_path / "lb" / "leaderboard.csv").read_text()

    # the same files as a fresh run of the new lineup
    run(b, "fresh", "lb-fresh")
    fresh = tmp_path / "runs" / "fresh"
    assert (fresh / "generations.jsonl").read_bytes() == after
    scores, fresh_scores = (json.loads((d / "scores.json").read_text()) for d in (r, fresh))
    assert scores | {"created": 0, "run_id": 0} == fresh_scores | {"created": 0, "run_id": 0}
    assert (tmp_path / "lb" / "leaderboard.csv").read_bytes() == (
        tmp_path / "lb-fresh" / "leaderboard.csv"
    ).read_bytes()


def test_a_dropped_system_keeps_its_rows_aside_and_gets_them_back(tmp_path, run, spies, cli):
    b = _lineup(tmp_path, "b", [*OLD, NEW])
    run(b)
    r = tmp_path / "runs" / "r"
    gen = r / "generations.jsonl"
    full = gen.read_bytes()
    spies["decode"].clear()

    err = run(_lineup(tmp_path, "c", [OLD[0], NEW]))
    assert "removed " + OLD[1] in err and spies["decode"] == []
    assert OLD[1] not in gen.read_text() and OLD[1] not in (tmp_path / "lb" / "leaderboard.csv").read_text()
    assert OLD[1] not in json.loads((r / "scores.json").read_text())["systems"]
    aside = (r / "generations.removed.jsonl").read_bytes()
    assert aside and all(line in full.splitlines() for line in aside.splitlines())
    assert list(json.loads((r / "manifest.json").read_text())["removed_systems"]) == [OLD[1]]

    err = run(b)
    assert "listed again " + OLD[1] in err and spies["decode"] == []
    assert gen.read_bytes() == full and not (r / "generations.removed.jsonl").exists()

    # a lineup that shares no system with the run is another run: refused, nothing moved
    rc, _, err = cli(
        "run", "--lineup", _lineup(tmp_path, "d", ["tiny-random/softmax/greedy,max_new_tokens=8"]),
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--out", tmp_path / "lb", "--no-progress",
    )  # fmt: skip
    assert rc == 2 and "was made by a different run" in err and "shares none" in err
    assert gen.read_bytes() == full


def _sweep_lineup(tmp_path, name, temps):
    path = tmp_path / f"{name}.toml"
    path.write_text(
        'name = "t"\nsuite = "smoke"\nsamples = 1\nbatch_size = 2\nmetrics = ["distinct", "rep"]\nsystems = [\n'
        f'  {{ system = "{OLD[0]}", sweep = {{ temp = {json.dumps(temps)} }} }},\n]\n'
    )
    return path


def test_a_sweep_point_added_to_a_finished_run_decodes_only_that_point(tmp_path, run, spies):
    run(_sweep_lineup(tmp_path, "a", [0.7, 1.3]))
    r = tmp_path / "runs" / "r"
    gen = r / "generations.jsonl"
    before = gen.read_bytes()
    name = "tiny-random/softmax/temp=*,top_p=0.9,max_new_tokens=8"
    manifest = json.loads((r / "manifest.json").read_text())
    assert manifest["sweeps"][name]["values"] == [0.7, 1.3]
    spies["decode"].clear()

    err = run(_sweep_lineup(tmp_path, "b", [0.7, 1.0, 1.3]))
    point = "tiny-random/softmax/top_p=0.9,max_new_tokens=8"  # temp=1.0: the base system itself
    assert "added " + point in err
    # decoded: the new point's two batches of two prompts, nothing else
    assert spies["decode"] == [("top_p=0.9,max_new_tokens=8", 2)] * 2
    # the other points' rows kept byte for byte (the file in the lineup's order: the new point in the middle)
    old_lines, new_lines = before.splitlines(), gen.read_bytes().splitlines()
    assert set(old_lines) <= set(new_lines) and len(new_lines) == len(old_lines) + 4
    assert [json.loads(line)["system"] for line in new_lines][4:8] == [point] * 4
    manifest = json.loads((r / "manifest.json").read_text())
    assert manifest["sweeps"] == {
        name: {
            "knob": "temp",
            "values": [0.7, 1.0, 1.3],
            "systems": [
                "tiny-random/softmax/temp=0.7,top_p=0.9,max_new_tokens=8",
                point,
                "tiny-random/softmax/temp=1.3,top_p=0.9,max_new_tokens=8",
            ],
        }
    }
    assert [(c["added"], c["removed"]) for c in manifest["lineup_changes"]] == [([point], [])]
    assert set(json.loads((r / "scores.json").read_text())["systems"]) == set(manifest["sweeps"][name]["systems"])
