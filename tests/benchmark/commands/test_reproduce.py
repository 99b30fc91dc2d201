"""maxbench reproduce: fold views and suites, the claim table, bad input, resume after kill -9, and
the report (tiny corpora and the tiny random model). The verdict rules themselves are tested on
constructed numbers in tests/benchmark/reproduce/test_verdicts.py."""

import hashlib
import html
import json
import math
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maxbench.benchmark.data.corpora import fold_of, fold_view, load_corpus
from maxbench.benchmark.reproduce.papers import load_paper, paper_names
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE, VERDICTS, ratio_interval
from maxbench.errors import MaxbenchError
from tests.support.paths import ROOT

WORDS = (
    "the soup was good bad great bread tea coffee taste sweet salty fresh stale price box bag my dog loved it".split()
)


def tiny_texts(n=60, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(22, 40))) + f" review {i}." for i in range(n)]


def write_corpus(home: Path, name: str, texts: list[str]) -> None:
    """A corpus in load_corpus's cache format, so no registry is needed (also in a subprocess)."""
    from maxbench.benchmark.data.corpora import CORPUS_VERSION, is_test

    root = home / "corpora"
    root.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps({"text": t, "split": "test" if is_test(t) else "fit"}) + "\n" for t in texts).encode()
    (root / f"{name}.jsonl").write_bytes(body)
    meta = {"name": name, "version": CORPUS_VERSION, "sha256": hashlib.sha256(body).hexdigest(), "texts": len(texts)}
    (root / f"{name}.json").write_text(json.dumps(meta))


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("MAXBENCH_HOME", str(h))
    write_corpus(h, "food-reviews", tiny_texts())
    return h


PAPER = """
paper = "toy"
title = "A toy paper"
source = "tests"
[protocol]
models = ["tiny-random"]
corpora = ["food-reviews"]
suite_kind = "review"
folds = 2
seed = 3
prompts = 3
batch_size = 2
baseline = "softmax"
metrics = ["bleu-n", "heldout-bleu", "ref-ppl"]
[protocol.systems]
softmax = "softmax/top_p=0.9,max_new_tokens=6"
graphmax = "graphmax(lam=1.0,solver=exact)/top_p=0.9,max_new_tokens=6"
[protocol.first_fold_systems]
sparsemax = "sparsemax/top_p=0.9,max_new_tokens=6"
[differences]
all = ["a toy protocol"]
[[claims]]
id = "bleu"
where = "Table 1"
statement = "graphmax raises BLEU-4"
methods = ["graphmax"]
baseline = "softmax"
scores = ["bleu-4"]
also = ["bleu-2"]
direction = "higher"
paper_baseline = [0.5]
paper_method = [0.6]
[[claims]]
id = "ppl"
where = "Figure 3"
statement = "graphmax lowers the reference's perplexity"
methods = ["graphmax"]
baseline = "softmax"
scores = ["ref-ppl"]
direction = "lower"
[[claims]]
id = "vs-sparsemax"
where = "Figure 5"
statement = "graphmax has higher BLEU-2 than sparsemax"
methods = ["graphmax"]
baseline = "sparsemax"
scores = ["bleu-2"]
also = ["bleu-3"]
direction = "higher"
[[claims]]
id = "time"
where = "Table 3"
statement = "graphmax is slower per token"
methods = ["graphmax"]
baseline = "softmax"
scores = ["time-per-token-ratio"]
kind = "ratio"
direction = "higher"
paper_effect = 14.0
hardware = true
[[claims]]
id = "bleu-again"
where = "Figure 5"
statement = "graphmax raises BLEU-4 (the same evidence as Table 1's)"
methods = ["graphmax"]
baseline = "softmax"
scores = ["bleu-4"]
direction = "higher"
[[claims]]
id = "corr"
where = "Table 3"
kind = "correlation"
statement = "BLEU-3 goes with BLEU-2 across text sources"
scores = ["bleu-3"]
against = ["bleu-2"]
direction = "higher"
paper_method = [0.99]
[[claims]]
id = "mt"
where = "Table 6"
statement = "translation"
runnable = false
reason = "no translation corpus offline"
"""


@pytest.fixture
def paper_file(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(PAPER)
    return p


# ---------------------------------------------------------------- folds


def test_folds_are_disjoint_covering_deterministic_and_seeded(home):
    whole = load_corpus("food-reviews")
    texts = set(whole.fit + whole.test)
    views = [load_corpus(fold_view("food-reviews", i, 4, 7)) for i in range(4)]
    tests = [set(v.test) for v in views]
    assert set().union(*tests) == texts and sum(map(len, tests)) == len(texts)
    for v in views:
        assert set(v.fit) | set(v.test) == texts and not set(v.fit) & set(v.test)
    assert [load_corpus(fold_view("food-reviews", i, 4, 7)).test for i in range(4)] == [v.test for v in views]
    other = [set(load_corpus(fold_view("food-reviews", i, 4, 8)).test) for i in range(4)]
    assert other != tests  # another seed, another split
    assert all(fold_of(t, 4, 7) == i for i, v in enumerate(views) for t in v.test)


def test_fold_views_have_their_own_identity_and_leave_the_corpus_alone(home):
    whole = load_corpus("food-reviews")
    before = (home / "corpora" / "food-reviews.jsonl").read_bytes()
    a, b = load_corpus(fold_view("food-reviews", 0, 2, 1)), load_corpus(fold_view("food-reviews", 1, 2, 1))
    assert len({whole.sha256, a.sha256, b.sha256}) == 3 and len({whole.name, a.name, b.name}) == 3
    assert load_corpus("food-reviews").sha256 == whole.sha256
    assert (home / "corpora" / "food-reviews.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "name, message",
    [
        ("food-reviews@fold=0/1,seed=1", "at least 2"),
        ("food-reviews@fold=2/2,seed=1", "between 0 and 1"),
        ("food-reviews@fold=x", "malformed"),
        ("food-reveiws@fold=0/2,seed=1", "did you mean 'food-reviews'"),
    ],
)
def test_bad_fold_views_are_one_line(name, message):
    from maxbench.benchmark.data.corpora import check_corpus
    from maxbench.errors import MaxbenchError

    with pytest.raises(MaxbenchError, match=message):
        check_corpus(name)


# ---------------------------------------------------------------- verdict rules (tests/benchmark/reproduce/test_verdicts.py)


def test_ratio_interval_is_geometric_with_t():
    c = ratio_interval([10.0, 10.0, 10.0])
    assert c.estimate == pytest.approx(10.0) and c.low == pytest.approx(10.0)
    assert ratio_interval([10.0]).low is None
    c = ratio_interval([8.0, 12.0, 10.0])
    assert c.low < c.estimate < c.high and c.low > 1


# ---------------------------------------------------------------- papers


def test_the_three_papers_load_with_their_numbers():
    assert paper_names() == ["fctg", "graphmax", "kerbs", "posg"]
    g = load_paper("graphmax")
    t2 = next(c for c in g.claims if c.id == "table2-bleu")
    assert t2.paper_method[3] == 0.660 and t2.paper_baseline[3] == 0.615
    assert t2.paper_difference(3) == pytest.approx(0.045)
    assert [c.id for c in g.claims if not c.runnable] == ["table6-bart-mt", "table7-mbart-mt"]
    assert any("stand-in" in d for d in g.differences)
    # issue 39's corrections: Table 3's ratio of sums, 6.43 / 0.450; 13 of Table 7's 14 directions
    t3 = next(c for c in g.claims if c.id == "table3-time")
    assert t3.paper_effect == pytest.approx(6.43 / 0.450, abs=0.005) and t3.hardware
    assert "13 of 14" in next(c for c in g.claims if c.id == "table7-mbart-mt").statement
    assert g.diagnostic_roles == ("graphmax-paper",) and "x^1 = 0" in g.diagnostics
    fig2 = next(c for c in g.claims if c.id == "figure2-convergence")
    assert fig2.kind == "convergence" and fig2.diagnostic and fig2.paper_method == (20,)
    assert any("original corpus" in d for d in g.differences) and any("top_p = 0.9" in d for d in g.differences)
    k = load_paper("kerbs")
    assert next(c for c in k.claims if c.runnable).paper_method == (102.17,)
    p = load_paper("posg")
    assert next(c for c in p.claims if c.id == "table2-self-bleu-4").paper_baseline == (0.469,)
    assert "posg-self-bleu" in p.protocol["metrics"] and "texygen-bleu" in g.protocol["metrics"]
    assert any("12-layer Transformer decoder" in d for d in p.differences)
    assert not any("16-layer" in d for d in p.differences)
    t9 = next(c for c in p.claims if c.id == "table9-adjectives")
    assert "ParaNMT-50M" in t9.reason and "SGCP" in t9.reason and "Quora" not in t9.reason
    for paper in (g, k, p):  # every claim names its table, figure or section
        assert all(any(w in c.where for w in ("Table", "Figure", "section")) for c in paper.claims)


def test_the_fctg_paper_has_numbers_per_baseline_and_corpus_and_roles_per_corpus(home, tmp_path):
    """FCTG's tables give each baseline its own numbers on each dataset (paper_values), the news
    suite generates 160 tokens and only food-attrs carries the ablation rows (corpus_systems), an
    adapter role joins its base model with '+', and --roles plans a first piece."""
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs, system_string

    f = load_paper("fctg")
    bleu = next(c for c in f.claims if c.id == "main-bleu-4")
    assert bleu.baselines == ("finetuned", "prefix", "nrp") and bleu.scores == ("sacrebleu",)
    assert bleu.numbers(0, "fctg", "nrp", "news") == (0.11, 0.14)
    assert bleu.numbers(0, "fctg", "finetuned", "food-reviews") == (0.12, 0.26)
    assert bleu.relative_for(0, "fctg", "finetuned", "food-reviews") == pytest.approx(0.14 / 0.12)
    time = next(c for c in f.claims if c.id == "training-time")
    assert time.kind == "ratio" and time.measure == "training" and time.flags[0].startswith("hardware-dependent")
    assert time.relative_for(0, "fctg", "prefix", "food-reviews") == pytest.approx(3.5 / 6.8 - 1)
    assert next(c for c in f.claims if c.id == "main-fluency").runnable is False
    assert system_string("m", "+fctg(mu=0.5)/softmax/greedy") == "m+fctg(mu=0.5)/softmax/greedy"
    assert system_string("m", "softmax/greedy") == "m/softmax/greedy"
    food, news = plan_runs(f, Options(), tmp_path / "out")
    assert (food.corpus, news.corpus) == ("food-reviews", "news")
    assert food.plan.suite.name == "food-attrs" and news.plan.suite.name == "news-attrs"
    # FCTG keeps the base model frozen (fctg(r=0)): without MVA it is the base model, the zero-shot system
    assert food.roles["fctg-no-mva"] == food.roles["zero-shot"] == "smollm2-135m/softmax/top_k=40,max_new_tokens=96"
    assert food.roles["fctg-lora"] == "smollm2-135m+fctg(r=8)/softmax/top_k=40,max_new_tokens=96"
    seeds = {r: food.roles[r] for r in ("fctg-seed1", "fctg-seed2", "finetuned-seed1", "finetuned-seed2")}
    assert seeds == {
        "fctg-seed1": "smollm2-135m+fctg(seed=1)/softmax/top_k=40,max_new_tokens=96",
        "fctg-seed2": "smollm2-135m+fctg(seed=2)/softmax/top_k=40,max_new_tokens=96",
        "finetuned-seed1": "smollm2-135m+lora(seed=1)/softmax/top_k=40,max_new_tokens=96",
        "finetuned-seed2": "smollm2-135m+lora(seed=2)/softmax/top_k=40,max_new_tokens=96",
    }
    assert not any(r.endswith(("-seed1", "-seed2")) or r == "fctg-lora" for r in news.roles)
    assert (
        "fctg-no-mva" not in news.roles and news.roles["nrp"] == "smollm2-135m+nrp/softmax/top_k=40,max_new_tokens=160"
    )
    (piece,) = plan_runs(f, Options(roles=["fctg", "zero-shot"], corpora=["news"]), tmp_path / "out")
    assert sorted(piece.roles) == ["fctg", "zero-shot"] and piece.baseline == piece.roles["zero-shot"]
    with pytest.raises(MaxbenchError, match="did you mean 'fctg'"):
        plan_runs(f, Options(roles=["fctgg"]), tmp_path / "out")


def test_model_systems_add_roles_on_one_base_model_and_leave_the_seed_0_heads_as_they_were(tmp_path):
    """KerBS's protocol measures the fine-tuned-softmax control in every cell and seeds 1-2 of both heads
    on SmolLM2 only (model_systems); seed 0 keeps the system name, hence the head, each run has; each
    seed is its own fit in the estimate; a model_systems key that is not a protocol model is one line."""
    from maxbench.benchmark.reproduce.protocol import Options, estimate_seconds, plan_runs

    k = load_paper("kerbs")
    runs = {(r.model, r.corpus): r for r in plan_runs(k, Options(), tmp_path / "out")}
    assert len(runs) == 6
    for (model, _corpus), run in runs.items():
        assert run.roles["kerbs"] == f"{model}/kerbs/greedy,max_new_tokens=1"
        assert run.roles["ft-softmax"] == f"{model}/ft-softmax/greedy,max_new_tokens=1"
        seeds = ["kerbs-seed1", "kerbs-seed2", "ft-softmax-seed1", "ft-softmax-seed2"]
        assert all((r in run.roles) == (model == "smollm2-135m") for r in seeds)
    assert runs[("smollm2-135m", "news")].roles["ft-softmax-seed2"] == (
        "smollm2-135m/ft-softmax(seed=2)/greedy,max_new_tokens=1"
    )
    (one,) = plan_runs(k, Options(models=["smollm2-135m"], corpora=["news"]), tmp_path / "out")
    (two,) = plan_runs(
        k, Options(models=["smollm2-135m"], corpora=["news"], roles=["kerbs", "kerbs-seed1"]), tmp_path / "out"
    )
    # five fits more with seeds 1-2 of each head than with seed 0 of KerBS alone
    fits = estimate_seconds([one]) - estimate_seconds([two])
    assert fits > 4 * 300
    bad = tmp_path / "bad.toml"
    bad.write_text(
        PAPER.replace(
            "[protocol.first_fold_systems]",
            '[protocol.model_systems.gemma]\nx = "softmax/greedy"\n[protocol.first_fold_systems]',
        )
    )
    with pytest.raises(MaxbenchError, match="model_systems: model 'gemma' is not one of the protocol's models"):
        load_paper(str(bad))


def test_a_runs_trained_heads_leave_their_fit_meta_beside_the_runs(home, tmp_path):
    """After generation each head a run's manifest records is copied from the head cache (found by its
    sha256) to heads/<run>/<layer>[-options].json without the machine's cache path; a head that is not in
    the cache is a warning line naming it, nothing is written for it."""
    from maxbench.benchmark.reproduce.protocol import Options, head_meta_file, plan_runs, record_heads

    k = load_paper("kerbs")
    (run,) = plan_runs(k, Options(models=["smollm2-135m"], corpora=["food-reviews"]), tmp_path / "out")
    names = run.roles
    history = [{"epoch": 0, "valid_ppl": 55.0}, {"epoch": 1, "train_loss": 4.0, "valid_ppl": 49.0}]
    for layer, sha in (("kerbs", "1" * 64), ("ft-softmax", "2" * 64)):
        d = home / "heads" / layer / f"key-{layer}"
        d.mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps({"layer": layer, "sha256": sha, "training": {"history": history}}))
    run.run_dir.mkdir(parents=True)
    resources = {
        names["kerbs-seed1"]: {"kerbs_head": "1" * 64},
        names["ft-softmax"]: {"ft_softmax_head": "2" * 64},
        names["kerbs"]: {"kerbs_head": "3" * 64},
    }
    (run.run_dir / "manifest.json").write_text(json.dumps({"resources": resources}))
    warnings = record_heads(run)
    assert len(warnings) == 1 and names["kerbs"] in warnings[0] and "333333333333" in warnings[0]
    by = {s.name: s for s in run.plan.systems}
    seed1 = head_meta_file(tmp_path / "out", run.run_dir.name, by[names["kerbs-seed1"]])
    assert seed1 == tmp_path / "out" / "heads" / "smollm2-135m-food-reviews" / "kerbs-seed1.json"
    doc = json.loads(seed1.read_text())
    assert doc["sha256"] == "1" * 64 and doc["still_improving"] is True and "path" not in doc
    assert doc["training"]["history"][1]["train_loss"] == 4.0
    control = head_meta_file(tmp_path / "out", run.run_dir.name, by[names["ft-softmax"]])
    assert control.name == "ft-softmax.json" and json.loads(control.read_text())["sha256"] == "2" * 64
    assert not head_meta_file(tmp_path / "out", run.run_dir.name, by[names["kerbs"]]).exists()


def test_the_flipped_attribute_runs_mirror_each_conditional_run(tmp_path):
    """Each conditional run gets a '-flipped' twin: the same systems of the protocol's flipped roles,
    seed and batches, on the suite with each prompt's attribute set to the opposite, without references."""
    from maxbench.benchmark.reproduce.flipped import plan_flipped, wilson
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    f = load_paper("fctg")
    runs = plan_runs(f, Options(), tmp_path / "out")
    flips = plan_flipped(f, runs, tmp_path / "out")
    assert [x.run_dir.name for x in flips] == ["smollm2-135m-food-reviews-flipped", "smollm2-135m-news-flipped"]
    food = flips[0]
    assert sorted(food.roles) == sorted(["zero-shot", "finetuned", "prefix", "fctg", "nrp"])
    assert [s.name for s in food.plan.systems] == [
        food.original.roles[r] for r in food.original.roles if r in food.roles
    ]
    assert food.plan.seed == food.original.plan.seed and food.plan.batch_size == food.original.plan.batch_size
    assert not food.plan.reference_ppl
    items = {it.id: it for it in food.original.plan.suite.items}
    for it in food.plan.suite.items:
        assert it.attributes["score"] != items[it.id].attributes["score"] and it.prompt != items[it.id].prompt
    assert plan_flipped(load_paper("kerbs"), [], tmp_path / "out") == []
    lo, hi = wilson(40, 80)
    assert lo == pytest.approx(0.3930, abs=1e-4) and hi == pytest.approx(0.6070, abs=1e-4)
    assert wilson(0, 0) == (None, None) and wilson(0, 10)[0] == 0.0


def test_paper_values_and_measures_are_checked(tmp_path):
    bad = tmp_path / "bad.toml"
    extra = '[claims.paper_values]\ngrapmax = { "food-reviews" = [0.6] }\n'
    bad.write_text(PAPER.replace('[[claims]]\nid = "ppl"', extra + '[[claims]]\nid = "ppl"'))
    with pytest.raises(MaxbenchError, match="paper_values: unknown system role 'grapmax': did you mean 'graphmax'"):
        load_paper(str(bad))
    bad.write_text(PAPER.replace('kind = "ratio"', 'kind = "ratio"\nmeasure = "trainng"'))
    with pytest.raises(MaxbenchError, match="did you mean 'training'"):
        load_paper(str(bad))
    bad.write_text(
        PAPER.replace(
            "[protocol.first_fold_systems]",
            '[protocol.corpus_systems.news]\nx = "softmax/greedy"\n[protocol.first_fold_systems]',
        )
    )
    with pytest.raises(MaxbenchError, match="corpus 'news' is not one of the protocol's corpora"):
        load_paper(str(bad))


def test_training_seconds_are_cpu_seconds_when_every_adapter_has_them(tmp_path):
    """The training-time claim reads each adapter's 'train MODEL' row; CPU seconds where every row has
    them, else wall seconds for all (never one kind against the other)."""
    from types import SimpleNamespace

    from maxbench.benchmark.reproduce.evidence import training_seconds
    from maxbench.systems.system_strings import parse_system

    systems = [
        parse_system(s)
        for s in ("tiny-random/softmax/greedy", "tiny-random+lora/softmax/greedy", "tiny-random+prefix/softmax/greedy")
    ]
    run = SimpleNamespace(run_dir=tmp_path, plan=SimpleNamespace(systems=systems))
    rows = [
        {"phase": "train tiny-random+lora", "seconds": 700.0, "cpu_seconds": 600.0},
        {"phase": "train tiny-random+prefix", "seconds": 500.0, "cpu_seconds": 300.0},
        {"phase": "generate tiny-random+lora/softmax/greedy", "seconds": 9.0, "cpu_seconds": 9.0},
    ]
    (tmp_path / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert training_seconds(run) == {
        "tiny-random+lora/softmax/greedy": 600.0,
        "tiny-random+prefix/softmax/greedy": 300.0,
    }
    from maxbench.benchmark.reproduce.evidence import training_steps

    assert training_steps(run) == {}
    rows[0]["step_cpu_seconds"] = [11.0, 12.0]
    (tmp_path / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert training_steps(run) == {"tiny-random+lora/softmax/greedy": [11.0, 12.0]}
    del rows[1]["cpu_seconds"]
    (tmp_path / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert training_seconds(run) == {
        "tiny-random+lora/softmax/greedy": 700.0,
        "tiny-random+prefix/softmax/greedy": 500.0,
    }


def test_a_claim_naming_an_unknown_role_is_refused(tmp_path):
    from maxbench.errors import MaxbenchError

    bad = tmp_path / "bad.toml"
    bad.write_text(
        PAPER.replace('methods = ["graphmax"]\nbaseline = "sparsemax"', 'methods = ["grapmax"]\nbaseline = "sparsemax"')
    )
    with pytest.raises(MaxbenchError, match="did you mean 'graphmax'"):
        load_paper(str(bad))


# ---------------------------------------------------------------- command line


def test_bad_input_is_one_line_exit_2(cli, home, paper_file):
    rc, _, err = cli("reproduce", "graphmaks")
    assert rc == 2 and "did you mean 'graphmax'" in err and err.count("\n") == 1
    rc, _, err = cli("reproduce", paper_file, "--folds", "1")
    assert rc == 2 and "at least 2" in err and err.count("\n") == 1
    rc, _, err = cli("reproduce", paper_file, "--folds", "20", "--prompts", "3")
    assert rc == 2 and "too small for 20 folds" in err and err.count("\n") == 1
    rc, _, err = cli("reproduce", "kerbs", "--folds", "3")
    assert rc == 2 and "drop --folds" in err


def test_a_missing_metric_is_one_line_before_anything_is_written(cli, home, tmp_path, paper_file):
    bad = PAPER.replace('metrics = ["bleu-n", "heldout-bleu", "ref-ppl"]', 'metrics = ["no-such-metric"]')
    assert bad != PAPER  # the toy paper's metrics line, as written above
    paper_file.write_text(bad)
    rc, _, err = cli("reproduce", paper_file, "--out", tmp_path / "out")
    assert rc == 2 and "needs metric 'no-such-metric'" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def _argv(paper_file, out):
    return ["reproduce", str(paper_file), "--out", str(out), "--threads", "1", "--no-progress", "--n-resamples", "200"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """One uninterrupted reproduction of the toy paper (in-process), shared by the tests below."""
    from maxbench.cli import main

    root = tmp_path_factory.mktemp("repro")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAXBENCH_HOME", str(root / "home"))
        write_corpus(root / "home", "food-reviews", tiny_texts())
        (root / "toy.toml").write_text(PAPER)
        assert main(_argv(root / "toy.toml", root / "clean")) == 0
        yield root


RUNS = ("tiny-random-food-reviews-fold0of2-n3", "tiny-random-food-reviews-fold1of2-n3")


def test_reproduction_resumes_after_kill_9_byte_identical(clean, monkeypatch):
    from maxbench.cli import main

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    killed = clean / "killed"
    argv = [sys.executable, "-m", "maxbench", *_argv(clean / "toy.toml", killed)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = killed / "runs" / RUNS[0] / "generations.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not first.exists() or first.read_bytes().count(b"\n") < 2):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "report.md").exists(), "the kill must land before the end"
    assert main(_argv(clean / "toy.toml", killed)) == 0
    for run in RUNS:
        a, b = (d / "runs" / run / "generations.jsonl" for d in (clean / "clean", killed))
        assert a.read_bytes() == b.read_bytes()
    suite = "suites/food-reviews-fold0of2-seed3-n3.jsonl"
    assert (clean / "clean" / suite).read_bytes() == (killed / suite).read_bytes()

    def untimed(path):  # every row but the wall-time ratio, which measures this machine's clock
        return [line for line in path.read_text().splitlines() if "time-per-token-ratio" not in line]

    assert untimed(clean / "clean" / "report.csv") == untimed(killed / "report.csv")


def test_the_report_has_a_verdict_per_cell_the_rows_behind_them_and_provenance(clean):
    out = clean / "clean"
    doc = json.loads((out / "report.json").read_text())
    rows = {(r["claim"], r["score"]): r for r in doc["rows"]}
    bleu = rows[("bleu", "bleu-4")]
    assert bleu["n_folds"] == 2 and bleu["n_prompts"] == 6
    assert (
        bleu["paper_baseline"] == 0.5 and bleu["paper_method"] == 0.6 and bleu["paper_relative"] == pytest.approx(0.2)
    )
    assert rows[("vs-sparsemax", "bleu-2")]["n_folds"] == 1  # sparsemax runs in fold 0 only
    cells = {(c["claim"], c["model"], c["corpus"]): c for c in doc["cells"]}
    mt = next(c for c in doc["cells"] if c["claim"] == "mt")
    assert mt["verdict"] == NOT_COMPARABLE and mt["why"] == "no translation corpus offline"
    time = cells[("time", "tiny-random", "food-reviews")]
    assert time["verdict"] == NOT_COMPARABLE and "hardware" in time["why"]
    assert rows[("time", "time-per-token-ratio")]["difference"] > 0
    # the relative scale: the difference over maxbench's baseline, per fold, combined over folds
    levels = [r for r in doc["rows"] if r["difference"] is not None and r["kind"] == "difference"]
    assert levels and all(r["relative"] is not None or not r["baseline_mean"] for r in levels)
    for c in doc["cells"]:
        assert c["verdict"] in VERDICTS
    # few prompts: every cell of this toy rests on 3 or 6 prompts
    assert all(
        any(f.startswith("few prompts") for f in c["flags"])
        for c in doc["cells"]
        if c["corpus"] and c["kind"] != "correlation"
    )
    # the same evidence as an earlier cell is counted once
    again = cells[("bleu-again", "tiny-random", "food-reviews")]
    assert not again["counted"] and again["same_as"] == "bleu"
    head = doc["headline"]
    assert head["cells"] == sum(1 for c in doc["cells"] if c["counted"]) and head["repeated_cells"] == 1
    assert head["claims"] == 7
    assert [r["run"] for r in doc["runs"]] == list(RUNS)
    for r in doc["runs"]:
        assert (
            r["manifest_sha256"] == hashlib.sha256((out / "runs" / r["run"] / "manifest.json").read_bytes()).hexdigest()
        )
    md = (out / "report.md").read_text()
    assert "## Verdict rules" in md and "## Verdicts" in md and "## Deviations and reading choices" in md
    assert "## Table 1: bleu" in md and "Total wall time" in md and doc["command"].startswith("maxbench reproduce ")
    assert "a toy protocol" in md and "no translation corpus offline" in md
    # the tiny random model's BLEU is 0 for every system: maxbench's variant is not shown again
    assert "give the same numbers as the paper's here (bleu-2 = bleu-4)" in md
    assert "0.5 -> 0.6 (+20%)" in md and "Claims: 7" in md
    assert "Shown under bleu (the same rows): graphmax vs softmax bleu-4" in md
    from maxbench.benchmark.reproduce.fmt import pct

    assert pct(bleu["relative"]) in md
    html = (out / "report.html").read_text()
    assert "<table" in html and "data:image/png;base64," in html
    # report.csv: one line per cell; pairs.json keeps the comparisons with sparsemax
    assert (out / "report.csv").read_text().count("\n") == len(doc["cells"]) + 1
    pairs = json.loads((out / "pairs.json").read_text())
    assert pairs["entries"] and all(e.get("metric") for e in pairs["entries"].values())


def test_heldout_bleu_compares_each_text_with_every_text_of_its_fold(clean, monkeypatch):
    """The fold suites name the fold they came from; heldout-bleu scores each text against all of that
    fold's texts (not the prompts' continuations), as nltk's sentence_bleu does."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    from maxbench.benchmark.metrics.tokenize import word_tokens

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    out = clean / "clean"
    assert (
        'heldout = "food-reviews@fold=0/2,seed=3"' in (out / "suites/food-reviews-fold0of2-seed3-n3.toml").read_text()
    )
    pool = [word_tokens(t) for t in load_corpus(fold_view("food-reviews", 0, 2, 3)).test]
    assert len(pool) > 3  # the whole fold, not the three prompts
    doc = json.loads((out / "runs" / RUNS[0] / "scores.json").read_text())
    rows = [json.loads(x) for x in (out / "runs" / RUNS[0] / "generations.jsonl").read_text().splitlines()]
    for system, entry in doc["systems"].items():
        texts = [word_tokens(r["text"]) for r in rows if r["system"] == system]
        want = sum(
            sentence_bleu(pool, t, weights=(0.25,) * 4, smoothing_function=SmoothingFunction().method1) for t in texts
        ) / len(texts)
        assert entry["scores"]["heldout-bleu-4"]["value"] == pytest.approx(want, rel=1e-9)


def test_the_estimate_counts_what_is_left(clean, monkeypatch, tmp_path):
    """--estimate gives the whole protocol and what is not yet generated: all of it for a fresh folder,
    nothing once every run is complete, and the rest of a run that has some rows."""
    from maxbench.benchmark.reproduce.protocol import Options, estimate_seconds, plan_runs

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    paper = load_paper(str(clean / "toy.toml"))
    done = plan_runs(paper, Options(), clean / "clean")
    assert estimate_seconds(done) > 0 and estimate_seconds(done, remaining=True) == 0
    fresh = plan_runs(paper, Options(), tmp_path / "fresh")
    assert estimate_seconds(fresh, remaining=True) == estimate_seconds(fresh) == estimate_seconds(done)
    part = tmp_path / "part"
    half = plan_runs(paper, Options(), part)
    rows = (clean / "clean" / "runs" / RUNS[0] / "generations.jsonl").read_text().splitlines()
    (part / "runs" / RUNS[0]).mkdir(parents=True)
    (part / "runs" / RUNS[0] / "generations.jsonl").write_text("\n".join(rows[:2]) + "\n")
    assert 0 < estimate_seconds(half, remaining=True) < estimate_seconds(half)


def test_heldout_bleu_without_a_heldout_split_is_one_line():
    from maxbench.benchmark.metrics.base import TextBatch, get_metric

    batch = TextBatch(["a b c"], ["p"], {"p": "a b"})
    with pytest.raises(MaxbenchError, match="'heldout-bleu' needs the held-out split the suite's prompts came from"):
        get_metric("heldout-bleu").compute(batch)


def test_a_report_renders_again_from_pairs_json_without_computing(clean, monkeypatch):
    from maxbench.benchmark.reproduce.evidence import Pairs
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs
    from maxbench.benchmark.reproduce.report import build

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    paper = load_paper(str(clean / "toy.toml"))
    runs = plan_runs(paper, Options(), clean / "clean")
    pairs = Pairs(200, clean / "clean" / "pairs.json")
    assert pairs.stored  # written by the reproduction
    built = build(paper, runs, pairs)
    assert pairs.computed == 0 and built.cells and set(pairs.used) == set(pairs.stored)


def test_a_partial_run_makes_its_cells_say_so(clean, monkeypatch, tmp_path):
    import shutil

    from maxbench.benchmark.reproduce.protocol import Options, plan_runs
    from maxbench.benchmark.reproduce.report import write_report

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    out = tmp_path / "partial"
    shutil.copytree(clean / "clean", out)
    (out / "runs" / RUNS[1] / "scores.json").unlink()  # fold 1 generated, not scored
    paper = load_paper(str(clean / "toy.toml"))
    runs = plan_runs(paper, Options(), out)
    write_report(paper, runs, out, "maxbench reproduce toy", 200)
    md = (out / "report.md").read_text()
    assert "Partial: " in md and f"{RUNS[1]}: not scored" in md
    doc = json.loads((out / "report.json").read_text())
    bleu = next(c for c in doc["cells"] if c["claim"] == "bleu")
    assert any(f.startswith("partial") for f in bleu["flags"])
    assert next(r for r in doc["rows"] if r["claim"] == "bleu" and r["score"] == "bleu-4")["n_folds"] == 1


def test_a_run_missing_its_manifest_is_partial_and_never_complete_beside_a_missing_file(clean, monkeypatch, tmp_path):
    import shutil

    from maxbench.benchmark.reproduce.protocol import Options, plan_runs
    from maxbench.benchmark.reproduce.report import write_report

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    out = tmp_path / "no-manifest"
    shutil.copytree(clean / "clean", out)
    (out / "runs" / RUNS[1] / "manifest.json").unlink()  # generated and scored, its provenance gone
    paper = load_paper(str(clean / "toy.toml"))
    write_report(paper, plan_runs(paper, Options(), out), out, "maxbench reproduce toy", 200)
    md = (out / "report.md").read_text()
    (row,) = [line for line in md.splitlines() if line.startswith(f"| `{RUNS[1]}`")]
    assert "(missing)" in row and "(not run)" not in row and "| complete |" not in row
    assert row.endswith("| its manifest.json is missing (regenerate the run) |")
    assert f"{RUNS[1]}: its manifest.json is missing" in md  # the cells resting on it say so first
    doc = json.loads((out / "report.json").read_text())
    bleu = next(c for c in doc["cells"] if c["claim"] == "bleu")
    assert any(f.startswith("partial") and "manifest.json is missing" in f for f in bleu["flags"])


def test_reproduce_out_an_existing_file_is_refused_before_anything_is_planned(cli, home, paper_file, tmp_path):
    from tests.support.cli import assert_one_line_exit_2

    target = tmp_path / "a-file"
    target.write_text("keep me\n")
    for mode in ("--estimate", "--report-only"):
        assert_one_line_exit_2(cli("reproduce", paper_file, "--out", target, mode), f"--out {target}", "give a folder")
    assert target.read_text() == "keep me\n" and not (tmp_path / "a-file" / "suites").exists()


def test_estimate_refuses_the_claim_score_report_only_refuses(cli, home, paper_file, tmp_path):
    from tests.support.cli import assert_one_line_exit_2

    paper_file.write_text(PAPER.replace('also = ["bleu-2"]', 'also = ["bleu-9"]', 1))
    out = tmp_path / "out"
    errs = [
        assert_one_line_exit_2(
            cli("reproduce", paper_file, "--out", out, mode), "claim 'bleu'", "unknown score 'bleu-9'"
        )
        for mode in ("--estimate", "--report-only")
    ]
    assert errs[0] == errs[1] and not out.exists()


def test_the_paired_difference_against_another_system_matches_a_direct_test(clean, monkeypatch):
    """The claim table's difference against a system that is not the run's baseline is the
    paired test of the two systems' scores (the same as scores.json would hold)."""
    from maxbench.benchmark.metrics.base import get_metric
    from maxbench.benchmark.metrics.scoring import load_batches
    from maxbench.benchmark.metrics.stats import paired_test
    from maxbench.benchmark.reproduce.claims import claim_cells
    from maxbench.benchmark.reproduce.evidence import Evidence, Pairs
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    paper = load_paper(str(clean / "toy.toml"))
    runs = plan_runs(paper, Options(), clean / "clean")
    claim = next(c for c in paper.claims if c.id == "vs-sparsemax")
    (row, _), _ = claim_cells(claim, paper, Evidence.of(runs, Pairs(200)))
    _, batches = load_batches(runs[0].run_dir)
    m = get_metric("bleu-n")
    a = m.compute(batches[runs[0].roles["graphmax"]]).scores["bleu-2"]
    b = m.compute(batches[runs[0].roles["sparsemax"]]).scores["bleu-2"]
    c = paired_test(a.stats, b.stats, 200)
    assert row.diff.estimate == pytest.approx(c.difference)
    assert (row.diff.low, row.diff.high) == pytest.approx(tuple(c.confidence_interval))
    assert row.method_mean == pytest.approx(a.value) and row.baseline_mean == pytest.approx(b.value)


def test_a_correlation_claim_is_pearson_r_over_every_system_and_the_human_references(clean, monkeypatch):
    """Table 3 of POSG: r over the text sources (each system of each run, and each suite's
    references scored as if a system had written them), with Fisher's z interval."""
    from scipy.stats import pearsonr

    from maxbench.benchmark.metrics.base import TextBatch, get_metric
    from maxbench.benchmark.reproduce.claims.correlation import pearson
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    paper = load_paper(str(clean / "toy.toml"))
    runs = plan_runs(paper, Options(), clean / "clean")
    xs, ys = [], []
    for run in runs:  # fold 0: softmax, graphmax, sparsemax; fold 1: softmax, graphmax
        doc = json.loads((run.run_dir / "scores.json").read_text())
        for system in run.roles.values():
            got = doc["systems"][system]["scores"]
            xs.append(got["bleu-2"]["value"])
            ys.append(got["bleu-3"]["value"])
    m = get_metric("bleu-n")
    for run in runs:  # each fold's suite has its own references: one human source each
        refs = {}
        for line in (run.run_dir / "generations.jsonl").read_text().splitlines():
            row = json.loads(line)
            refs.setdefault(row["prompt_id"], row["reference"])
        human = m.compute(TextBatch(list(refs.values()), list(refs), refs)).scores
        xs.append(human["bleu-2"].value)
        ys.append(human["bleu-3"].value)
    want = pearsonr(xs, ys)
    low, high = want.confidence_interval(0.95)
    doc = json.loads((clean / "clean" / "report.json").read_text())
    row = next(r for r in doc["rows"] if r["claim"] == "corr")
    assert row["kind"] == "correlation" and row["n_folds"] == len(xs) == 7
    assert row["difference"] == pytest.approx(want.statistic, abs=1e-12)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-12)
    assert row["paper_method"] == 0.99
    cell = next(c for c in doc["cells"] if c["claim"] == "corr")
    assert cell["relative"] == pytest.approx(want.statistic, abs=1e-9)  # one score: the cell is its r
    assert cell["verdict"] in VERDICTS
    md = (clean / "clean" / "report.md").read_text()
    assert "| text source | bleu-2 | bleu-3 |" in md and "| human (" in md
    assert "bleu-3 vs bleu-2" in md
    # too few sources, or a constant score: no r, and the verdict says why
    assert pearson([("a", 0.1, 0.2), ("b", 0.2, 0.3), ("c", 0.3, 0.5)])[3].startswith("only 3 text sources")
    assert "the same for every" in pearson([(str(i), 0.5, i) for i in range(5)])[3]


def test_the_report_states_each_runs_wall_time(clean):
    """Runs used: each run's wall time is every phase of its timings.jsonl; the total is their sum."""
    doc = json.loads((clean / "clean" / "report.json").read_text())
    md = (clean / "clean" / "report.md").read_text()
    assert "| run | fitting corpus | prompts | systems | wall time (min) |" in md
    total = 0.0
    for run in doc["runs"]:
        lines = (clean / "clean" / "runs" / run["run"] / "timings.jsonl").read_text().splitlines()
        want = sum(json.loads(line)["seconds"] for line in lines if line.strip())
        assert want > 0 and run["wall_seconds"] == pytest.approx(want, abs=0.05)
        assert f"| `{run['run']}` | `{run['corpus']}` | 3 | {run['systems']} | {want / 60:.1f} |" in md
        total += want
    assert f"Total wall time of its runs: {total / 60:.1f} min" in md


def test_a_sensitivity_settings_system_is_no_text_source_of_a_counted_correlation(clean, monkeypatch):
    """A correlation claim's points are the protocol's systems: a ``ROLE@SETTING`` system of the same
    run (POSG's head ablations) would otherwise change the counted claim's evidence."""
    from dataclasses import replace

    from maxbench.benchmark.reproduce.claims.correlation import correlation_points
    from maxbench.benchmark.reproduce.evidence import Evidence, Pairs
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    paper = load_paper(str(clean / "toy.toml"))
    runs = plan_runs(paper, Options(), clean / "clean")
    claim = next(c for c in paper.claims if c.id == "corr")
    before = correlation_points(claim, "food-reviews", 0, Evidence.of(runs, Pairs(200)))
    assert len(before) == 7
    # the same scored system under a setting's role (and under a plain new role, which does count)
    setting = [replace(r, roles=r.roles | {"graphmax@greedy": r.roles["softmax"]}) for r in runs]
    assert correlation_points(claim, "food-reviews", 0, Evidence.of(setting, Pairs(200))) == before
    plain = [replace(r, roles=r.roles | {"other": r.roles["softmax"]}) for r in runs]
    assert len(correlation_points(claim, "food-reviews", 0, Evidence.of(plain, Pairs(200)))) == 9


def test_a_correlation_claim_needs_its_against_scores(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(PAPER.replace('against = ["bleu-2"]\n', ""))
    with pytest.raises(MaxbenchError, match="a correlation claim .and only one. needs 'against'"):
        load_paper(str(p))


# ---------------------------------------------------------------- the POSG protocol's data


def test_window_items_cut_consecutive_50_plus_100_word_windows():
    from maxbench.benchmark.data.suite_build import window_items

    text = " ".join(f"w{i}" for i in range(320))  # two whole windows, 20 words left over
    items = window_items([text, "too short"], "wiki", 10)
    assert len(items) == 2
    assert items[0]["prompt"].split() == [f"w{i}" for i in range(50)]
    assert items[0]["reference"].split() == [f"w{i}" for i in range(50, 150)]
    assert items[1]["prompt"].split()[0] == "w150" and items[1]["reference"].split()[-1] == "w299"
    assert len(window_items([text], "wiki", 1)) == 1


WIKI_ARTICLE = """{{Infobox animal|name=Cat}}
'''Cats''' are [[mammal|small mammals]].<ref name=a>A source.</ref>
== History ==
[[File:Cat.jpg|thumb|A cat]]They live with [[people]].<!-- hidden -->
{| class=wikitable
|-
| cell one || cell two
|}
[[Category:Animals]]"""
WIKI_XML = f"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<page><title>Cat</title><ns>0</ns><id>1</id><revision><text>{html.escape(WIKI_ARTICLE)}</text></revision></page>
<page><title>Kitty</title><ns>0</ns><id>2</id><redirect title="Cat" /><revision><text>#REDIRECT [[Cat]]</text></revision></page>
<page><title>Wikipedia:About</title><ns>4</ns><id>3</id><revision><text>Project page.</text></revision></page>
</mediawiki>"""


def test_wikipedia_articles_lose_their_markup_and_only_articles_are_kept(tmp_path, monkeypatch):
    import bz2

    import maxbench.benchmark.data.corpora as corpora

    path = tmp_path / "wiki.xml.bz2"
    path.write_bytes(bz2.compress(WIKI_XML.encode()))
    monkeypatch.setattr(corpora, "fetch", lambda name: path)
    (text,) = corpora._wikipedia()
    assert corpora.clean_text(text) == "Cats are small mammals. They live with people."
    monkeypatch.setattr(corpora, "WIKI_PASSAGE_WORDS", 3)
    assert corpora._wikipedia() == ["Cats are small", "mammals. They live", "with people."]


def _namespaced_links(code):
    return [x for x in code.filter_wikilinks() if ":" in str(x.title)]


def test_removing_through_one_walk_of_the_page_is_mwparserfromhells_remove():
    import mwparserfromhell

    from maxbench.benchmark.data.corpora import _holders, _remove

    page = (
        WIKI_ARTICLE + "\n<ref>[[File:b.png|thumb]] ''x''</ref> and [[Category:y]] {{t|[[File:c.png]]|k=[[Image:d]]}}"
    )
    ours, theirs = mwparserfromhell.parse(page), mwparserfromhell.parse(page)
    assert len(_namespaced_links(ours)) == 6  # in the page, in a tag, in a template's parameters
    _remove(_holders(ours), _namespaced_links(ours))
    for node in _namespaced_links(theirs):
        theirs.remove(node)
    assert str(ours) == str(theirs) and "File:" not in str(ours) and "[[people]]" in str(ours)
    # a link inside one removed before is no longer in the page: both raise ValueError
    nested = "a [[File:a.jpg|a [[Category:x]] b]] c"
    ours, theirs = mwparserfromhell.parse(nested), mwparserfromhell.parse(nested)
    with pytest.raises(ValueError):
        _remove(_holders(ours), _namespaced_links(ours))
    with pytest.raises(ValueError):
        for node in _namespaced_links(theirs):
            theirs.remove(node)
    assert str(ours) == str(theirs) == "a  c"


def test_time_per_token_counts_cpu_seconds_per_generated_token(tmp_path):
    from maxbench.benchmark.reproduce.evidence import time_per_token
    from maxbench.benchmark.reproduce.fmt import pct

    timings = [
        {"phase": "generate a", "seconds": 100.0, "cpu_seconds": 10.0},  # wall stretched by other processes
        {"phase": "generate a", "seconds": 5.0, "cpu_seconds": 2.0},
        {"phase": "ref-ppl a", "seconds": 50.0, "cpu_seconds": 50.0},  # not generation
        {"phase": "generate b", "seconds": 3.0},  # an old row without CPU time: its wall time
    ]
    (tmp_path / "timings.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timings))
    tokens = [("a", "p1", 4), ("a", "p2", 2), ("b", "p1", 6)]
    rows = [{"system": s, "prompt_id": p, "text": "t", "reference": "r", "n_tokens": n} for s, p, n in tokens]
    (tmp_path / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert time_per_token(tmp_path) == {"a": 2.0, "b": 0.5}
    assert [pct(v) for v in (None, -0.000015, 0.2, -1.0, 11.656)] == ["", "-0.0015%", "+20%", "-100%", "+1,166%"]


def test_the_differences_plot_turns_symmetric_log_when_one_claim_dwarfs_the_others(tmp_path, monkeypatch):
    """A cell can move by +90,000%: on a linear axis every other cell would sit on the null. Past
    SYMLOG_ABOVE_PERCENT the axis is symmetric-logarithmic (linear near 0), and says so."""
    import matplotlib.axes

    from maxbench.benchmark.reproduce import exports
    from maxbench.benchmark.reproduce.verdicts import REPRODUCED, Estimate
    from tests.support.verdicts import toy_cell

    def row(difference, baseline=10.0):
        rel = difference / baseline
        return toy_cell("c", Estimate(rel, rel - 0.1, rel + 0.1, 0.05, None, 1), paper=None, verdict=REPRODUCED)

    scales, labels = [], []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xscale", lambda ax, v, **kw: scales.append((v, kw)), raising=True)
    real_label = matplotlib.axes.Axes.set_xlabel
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xlabel", lambda ax, t, **kw: labels.append(t) or real_label(ax, t))
    assert exports.plot([row(5.0), row(-3.0)], tmp_path / "narrow.png") is not None
    assert scales == [] and "logarithmic" not in labels[-1]
    assert exports.plot([row(5.0), row(9_000.0)], tmp_path / "wide.png") is not None  # +90,000% of 10
    assert scales == [("symlog", {"linthresh": exports.SYMLOG_LINEAR_PERCENT})]
    assert f"linear within ±{exports.SYMLOG_LINEAR_PERCENT}%, logarithmic beyond" in labels[-1]
    assert (tmp_path / "wide.png").read_bytes()[:4] == b"\x89PNG"


def test_a_signature_with_the_data_it_scored_appended_is_the_installed_metrics():
    """attr-acc appends the suite, attribute and classifier it scored to its signature: not stale."""
    from maxbench.benchmark.reproduce.evidence import same_metric

    now = "attr-acc|classifier:x|sklearn:1.9.1"
    assert same_metric(now, now) and same_metric(now + "|suite:food-attrs@4d58|attribute:score", now)
    assert not same_metric("attr-acc|classifier:y|sklearn:1.9.1", now)
    assert not same_metric(now + "0", now) and not same_metric(now + "|smooth:floor", now)


def test_a_piece_keeps_the_systems_a_run_already_has(tmp_path):
    """--roles generates a subset, but a run's systems that are already there stay in its plan (their
    rows are neither moved out of the run nor dropped from its scores)."""
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    f = load_paper("fctg")
    run_dir = tmp_path / "out" / "runs" / "smollm2-135m-news"
    run_dir.mkdir(parents=True)
    zero = "smollm2-135m/softmax/top_k=40,max_new_tokens=160"
    (run_dir / "manifest.json").write_text(json.dumps({"systems": [zero]}))
    (piece,) = plan_runs(f, Options(roles=["fctg"], corpora=["news"]), tmp_path / "out")
    assert piece.roles == {"zero-shot": zero, "fctg": "smollm2-135m+fctg/softmax/top_k=40,max_new_tokens=160"}


def test_sensitivity_settings_add_roles_on_their_model_and_corpus_and_judge_the_claims_again(home, tmp_path):
    """Extra roles ROLE@SETTING in every fold of the settings' model and corpus, one diagnostic claim per
    setting x claim with the replaced roles (graphmax's: greedy, top-k, lambda)."""
    from maxbench.benchmark.reproduce.papers import sensitivity_claims, sensitivity_roles
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    toy = tmp_path / "toy.toml"
    block = (
        '[protocol.sensitivity]\nmodels = ["tiny-random"]\ncorpora = ["food-reviews"]\nclaims = ["bleu", "ppl"]\n'
        "[protocol.sensitivity.settings]\n"
        'greedy = { softmax = "softmax/greedy,max_new_tokens=6", graphmax = "graphmax(lam=1.0,solver=exact)/greedy,max_new_tokens=6" }\n'
        '"lambda 0.5" = { graphmax = "graphmax(lam=0.5,solver=exact)/top_p=0.9,max_new_tokens=6" }\n'
    )
    toy.write_text(PAPER.replace("[protocol.first_fold_systems]", block + "[protocol.first_fold_systems]"))
    paper = load_paper(str(toy))
    runs = plan_runs(paper, Options(), tmp_path / "out")
    assert len(runs) == 2 and all("graphmax@greedy" in r.roles and "softmax@greedy" in r.roles for r in runs)
    assert (
        runs[1].roles["graphmax@lambda 0.5"] == "tiny-random/graphmax(lam=0.5,solver=exact)/top_p=0.9,max_new_tokens=6"
    )
    claims = {c.id: c for _, c in sensitivity_claims(paper)}
    assert sorted(claims) == ["bleu@greedy", "bleu@lambda 0.5", "ppl@greedy", "ppl@lambda 0.5"]
    assert claims["bleu@greedy"].methods == ("graphmax@greedy",) and claims["bleu@greedy"].baselines == (
        "softmax@greedy",
    )
    assert claims["ppl@lambda 0.5"].baselines == ("softmax",) and claims["ppl@lambda 0.5"].diagnostic
    g = {c.id: c for _, c in sensitivity_claims(load_paper("graphmax"))}
    assert len(g) == 2 * 12 + 1 and g["figure3-ppl@lambda 0.01"].models == ("smollm2-135m",)
    assert g["table2-bleu@top-k 10"].corpora == ("food-reviews",)
    # a setting of scores: the same texts against other references; every method but the diagnostic ones
    refs = g["table2-bleu@references: whole held-out fold"]
    assert refs.scores == tuple(f"heldout-bleu-{n}" for n in (2, 3, 4, 5)) and refs.also == ()
    assert refs.methods == ("graphmax",) and refs.baselines == ("softmax",) and refs.diagnostic
    assert "figure3-ppl@references: whole held-out fold" not in g  # ppl has no score it replaces
    assert "softmax@references: whole held-out fold" not in sensitivity_roles(load_paper("graphmax").protocol)


SENS = (
    '[protocol.sensitivity]\nmodels = ["tiny-random"]\ncorpora = ["food-reviews"]\nclaims = ["bleu"]\n'
    '[protocol.sensitivity.settings]\ng = { softmax = "softmax/greedy" }\n'
)


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('claims = ["bleu"]', 'claims = ["no-such"]', "unknown claim 'no-such'"),
        ("g = { softmax", "g = { sofmax", "did you mean 'softmax'"),
        ('models = ["tiny-random"]', 'models = ["gemma"]', "unknown base model 'gemma'"),
        ('corpora = ["food-reviews"]\n', "", "needs 'corpora'"),
        ('g = { softmax = "softmax/greedy" }', 'g = { scores = { "bleu-4" = "rouge-l-f" } }', "score 'rouge-l-f'"),
        ('g = { softmax = "softmax/greedy" }', 'g = { scores = ["bleu-4"] }', "'scores' must map scores"),
    ],
)
def test_bad_sensitivity_settings_are_one_line(tmp_path, old, new, message):
    bad = tmp_path / "bad.toml"
    block = SENS.replace(old, new)
    bad.write_text(PAPER.replace("[protocol.first_fold_systems]", block + "[protocol.first_fold_systems]"))
    with pytest.raises(MaxbenchError, match=message):
        load_paper(str(bad))
    good = tmp_path / "good.toml"
    good.write_text(PAPER.replace("[protocol.first_fold_systems]", SENS + "[protocol.first_fold_systems]"))
    assert load_paper(str(good)).protocol["sensitivity"]["claims"] == ["bleu"]


def test_the_sensitivity_section_says_which_conclusions_survive_every_setting():
    """A claim whose verdict holds under every setting survives; one that changes names the setting and
    its verdict; a setting whose cell is partial is 'not yet judged'."""
    from maxbench.benchmark.reproduce.cells import CellVerdict
    from maxbench.benchmark.reproduce.render import sensitivity_section
    from maxbench.document import render_markdown

    g = load_paper("graphmax")
    names = list(g.protocol["sensitivity"]["settings"])

    def cell(claim, method, verdict, flags=()):
        return CellVerdict(
            claim=claim,
            model="smollm2-135m",
            corpus="food-reviews",
            method=method,
            baselines="softmax",
            scores="x",
            kind="difference",
            n_folds=5,
            n_prompts=80,
            verdict=verdict,
            flags=list(flags),
        )

    cells = [cell("table2-bleu", "graphmax", "not reproduced"), cell("figure3-ppl", "graphmax", "not reproduced")]
    roles = [n for n in names if "scores" not in g.protocol["sensitivity"]["settings"][n]]
    assert len(roles) == len(names) - 1  # the BLEU references: a setting of scores, only for BLEU
    cells += [cell(f"table2-bleu@{n}", f"graphmax@{n}" if n in roles else "graphmax", "not reproduced") for n in names]
    cells += [cell(f"figure3-ppl@{n}", f"graphmax@{n}", "not reproduced") for n in roles]
    cells[-1] = cell(f"figure3-ppl@{roles[-1]}", f"graphmax@{roles[-1]}", "reproduced")
    text = render_markdown([sensitivity_section(g, cells)])
    assert f"| table2-bleu | not reproduced | survives every setting ({len(names)}) |" in text
    assert f"| figure3-ppl | not reproduced | changes under {roles[-1]}: reproduced |" in text
    assert "texygen-bleu-4 → heldout-bleu-4" in text
    cells[2].flags.append("partial: a run")
    text = render_markdown([sensitivity_section(g, cells)])
    assert f"not yet judged under {names[0]} (partial or no run)" in text
    assert sensitivity_section(load_paper("kerbs"), cells) is None


def test_a_piece_keeps_the_baseline_and_marks_the_roles_it_left_out(tmp_path):
    """--roles without the baseline keeps it (every comparison is against it); the runs of a piece know
    the roles the protocol plans, so a cell of a left-out role is partial, not missing."""
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    f = load_paper("fctg")
    (piece,) = plan_runs(f, Options(roles=["fctg"], corpora=["news"]), tmp_path / "fresh")
    assert sorted(piece.roles) == ["fctg", "zero-shot"] and "nrp" in piece.planned
    (whole,) = plan_runs(f, Options(corpora=["news"]), tmp_path / "fresh")
    assert whole.planned == ()
    bad = tmp_path / "bad.toml"
    text = (ROOT / "benchmark" / "reproduce" / "papers" / "fctg.toml").read_text()
    bad.write_text(
        text.replace('fctg = { "food-reviews" = [13.83], news = [2.70] }', 'fctg = { "food-review" = [13.83] }')
    )
    with pytest.raises(MaxbenchError, match="paper_values.fctg: unknown corpus 'food-review'"):
        load_paper(str(bad))


def test_the_committed_kerbs_report_renders_again_byte_identical_from_the_repository(tmp_path, monkeypatch):
    """The report's modules (evidence, claims, judge, render, exports) give the committed report back
    byte for byte from the committed runs and pairs.json, with no cache (--report-only's path)."""
    import shutil

    from maxbench.benchmark.reproduce.evidence import PAIRS
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs
    from maxbench.benchmark.reproduce.report import write_report

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))  # no cached heads: the manifests' records
    committed = ROOT / "results" / "reproductions" / "kerbs"
    out = tmp_path / "kerbs"
    shutil.copytree(committed, out)
    paper = load_paper("kerbs")
    command = json.loads((committed / "report.json").read_text())["command"]
    written = write_report(paper, plan_runs(paper, Options(), out), out, command)
    names = sorted(p.name for p in written)
    # the plot shows counted cells with an interval: none while every cell waits for its control
    plot = ["differences.png"] if (committed / "differences.png").exists() else []
    assert names == sorted(["report.md", "report.html", "report.csv", "report.json", PAIRS, *plot])
    assert (out / "differences.png").exists() == bool(plot)  # never a plot of an earlier rendering
    for name in names:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name


def test_a_comparison_with_seed_replicates_rests_on_the_seed_averaged_scores(clean, monkeypatch, tmp_path):
    """``[protocol.seeds.CORPUS]``: a comparison where either side has replicates is judged on the
    seed-averaged scores (``stats.seed_averaged``, seeds paired by position, a side with one seed
    repeated), each pair's own effect kept beside it; a run without the replicates rests on seed 0."""
    from maxbench.benchmark.metrics.base import get_metric
    from maxbench.benchmark.metrics.scoring import load_batches
    from maxbench.benchmark.metrics.stats import seed_averaged
    from maxbench.benchmark.reproduce.claims import claim_cells, kind_of
    from maxbench.benchmark.reproduce.evidence import Evidence, Pairs
    from maxbench.benchmark.reproduce.protocol import Options, plan_runs

    monkeypatch.setenv("MAXBENCH_HOME", str(clean / "home"))
    # a second "seed" of each side from the systems the run holds, swapped: graphmax's replicate is
    # softmax's system and softmax's is graphmax's, so the two seed pairs' effects cancel exactly
    text = PAPER.replace(
        "[protocol.first_fold_systems]\n",
        "[protocol.first_fold_systems]\n"
        'softmax-seed1 = "graphmax(lam=1.0,solver=exact)/top_p=0.9,max_new_tokens=6"\n'
        'graphmax-seed1 = "softmax/top_p=0.9,max_new_tokens=6"\n',
    )
    text += '\n[protocol.seeds."food-reviews"]\ngraphmax = ["graphmax-seed1"]\nsoftmax = ["softmax-seed1"]\n'
    path = tmp_path / "seeded.toml"
    path.write_text(text)
    paper = load_paper(str(path))
    pairs = [("graphmax", "softmax"), ("graphmax-seed1", "softmax-seed1")]
    assert paper.seed_pairs("food-reviews", "graphmax", "softmax") == pairs
    # a side without replicates is repeated against each of the other's seeds
    assert paper.seed_pairs("food-reviews", "graphmax", "sparsemax") == [
        ("graphmax", "sparsemax"),
        ("graphmax-seed1", "sparsemax"),
    ]
    run = plan_runs(paper, Options(), clean / "clean")[0]  # fold 0: both seed pairs generated
    claim = next(c for c in paper.claims if c.id == "ppl")
    rows, cells = claim_cells(claim, paper, Evidence.of([run], Pairs(200)))
    (row,) = rows
    _, batches = load_batches(run.run_dir)
    m = get_metric("ref-ppl")
    g, s = (m.compute(batches[run.roles[role]]).scores["ref-ppl"] for role in ("graphmax", "softmax"))
    want = seed_averaged([g.stats, s.stats], [s.stats, g.stats], 200)
    assert want.a == pytest.approx(want.b) and want.log_ratio[0] == pytest.approx(0.0)
    assert row.method_mean == pytest.approx((g.value + s.value) / 2) == row.baseline_mean
    assert (row.diff.estimate, row.diff.low, row.diff.high, row.diff.se) == pytest.approx(want.difference[:4])
    assert row.rel.estimate == pytest.approx(0.0, abs=1e-12) and row.rel.low < 0 < row.rel.high
    assert (row.rel.low, row.rel.high) == pytest.approx(tuple(math.expm1(x) for x in want.log_ratio[1:3]))
    assert row.rel.se == pytest.approx(want.log_ratio[3]) and row.n_prompts == want.n_prompts
    assert row.rel.method.startswith(
        "seed-averaged over 2 seed pairs (graphmax vs softmax, graphmax-seed1 vs softmax-seed1)"
    )
    assert cells[0].est.estimate == pytest.approx(row.rel.estimate)
    assert [(x["method"], x["baseline"]) for x in row.seeds] == pairs
    own = [x["relative"] for x in row.seeds]  # each pair's own effect: g / s - 1 and its reciprocal
    assert own[0] == pytest.approx(g.value / s.value - 1) and own[1] == pytest.approx(s.value / g.value - 1)
    assert row.to_dict()["seeds"] == row.seeds
    tables = kind_of(claim.kind).tables(claim, rows, None)
    assert len(tables) == 2 and "seed pair (method vs baseline)" in tables[1].columns and len(tables[1].rows) == 2
    # without the table, the same comparison rests on seed 0 alone
    plain = load_paper(str(clean / "toy.toml"))
    (row0,), _ = claim_cells(next(c for c in plain.claims if c.id == "ppl"), plain, Evidence.of([run], Pairs(200)))
    assert not row0.seeds and row0.method_mean == pytest.approx(g.value)
    assert row0.rel.estimate == pytest.approx(own[0])
    # against sparsemax (one seed, repeated): graphmax's seeds averaged, no seed sd for sparsemax
    vs = next(c for c in paper.claims if c.id == "vs-sparsemax")
    rows, _ = claim_cells(vs, paper, Evidence.of([run], Pairs(200)))
    assert all(r.seeds and r.baseline_sd is None and r.method_sd is not None for r in rows)
    assert [x["baseline"] for x in rows[0].seeds] == ["sparsemax", "sparsemax"]
    # a system against itself: no variance at all, infinite degrees of freedom, kept in pairs.json as None
    same = Pairs(200, tmp_path / "same-pairs.json")
    sm = run.roles["softmax"]
    got = same.seeded(run.run_dir, [(sm, sm), (sm, sm)], "ref-ppl", "ref-ppl")
    assert got["difference"][:4] == [0.0, 0.0, 0.0, 0.0] and got["difference"][4] is None
    same.save()  # allow_nan=False: a non-finite number would raise here
    assert json.loads((tmp_path / "same-pairs.json").read_text())["entries"]
    # fold 1 plans no replicates (first-fold roles): its row rests on seed 0 and says so
    fold1 = plan_runs(paper, Options(), clean / "clean")[1]
    (row1,), _ = claim_cells(claim, paper, Evidence.of([fold1], Pairs(200)))
    assert (
        not row1.seeds and f"seeds: 1 of 2 seed pairs generated in {fold1.run_dir.name}: rests on seed 0" in row1.note
    )
    # the seeded entry of pairs.json is keyed by its method: another method computes it afresh
    import maxbench.benchmark.metrics.stats as stats_module

    pairs = Pairs(200)
    claim_cells(claim, paper, Evidence.of([run], pairs))
    done = pairs.computed
    claim_cells(claim, paper, Evidence.of([run], pairs))
    assert pairs.computed == done  # the same key: not computed again
    monkeypatch.setattr(stats_module, "SEED_AVERAGED_METHOD", "another interval")
    again = Pairs(200)
    again.stored = dict(pairs.used)
    claim_cells(claim, paper, Evidence.of([run], again))
    assert again.computed == 1  # the seeded entry, under its new key; the per-pair ones are reused
    # the report says what the seeded rows rest on and lists each seed pair
    import shutil

    from maxbench.benchmark.reproduce.report import write_report

    out = tmp_path / "seeded"
    shutil.copytree(clean / "clean", out)
    write_report(paper, plan_runs(paper, Options(), out), out, "maxbench reproduce seeded", 200)
    md = (out / "report.md").read_text()
    assert "Seeds: where the method or its baseline was trained with several seeds" in md
    assert "| seed pair (method vs baseline) |" in md and "| graphmax-seed1 vs softmax-seed1 |" in md
    doc = json.loads((out / "report.json").read_text())
    ppl = next(r for r in doc["rows"] if r["claim"] == "ppl")
    assert [x["baseline"] for x in ppl["seeds"]] == ["softmax", "softmax-seed1"]


@pytest.mark.parametrize(
    "table, error",
    [
        ('[protocol.seeds."news"]\ngraphmax = ["sparsemax"]\n', "'news' is not one of the protocol's corpora"),
        (
            '[protocol.seeds."food-reviews"]\ngraphmax = "sparsemax"\n',
            "role 'graphmax' needs a list of replicate roles",
        ),
        ('[protocol.seeds."food-reviews"]\ngraphmax = ["nope"]\n', "unknown system role 'nope'"),
        (
            '[protocol.seeds."food-reviews"]\ngraphmax = ["sparsemax"]\nsoftmax = ["sparsemax"]\n',
            "a role is named twice",
        ),
        (
            '[protocol.seeds."food-reviews"]\ngraphmax = ["sparsemax"]\nsoftmax = ["s1", "s2"]\n',
            "every role needs as many replicates",
        ),
        ('[protocol.seeds."food-reviews"]\ngraphmax = []\n', "role 'graphmax' needs a list of replicate roles"),
    ],
)
def test_a_bad_seeds_table_is_one_line_naming_it(tmp_path, table, error):
    path = tmp_path / "bad.toml"
    more = 's1 = "softmax/top_p=0.8,max_new_tokens=6"\ns2 = "softmax/top_p=0.7,max_new_tokens=6"\n'
    path.write_text(PAPER.replace("[protocol.first_fold_systems]\n", "[protocol.first_fold_systems]\n" + more) + table)
    with pytest.raises(MaxbenchError, match=re.escape(error)) as got:
        load_paper(str(path))
    assert "seeds of" in str(got.value) and "\n" not in str(got.value)
