"""Adapters (systems/adapters): the grammar MODEL[@rev][+ADAPTER(k=v)]/LAYER/DECODING, the registry and
its plugins, prefix-tuning decoded by maxbench's own loop token-exact with peft's generate, LoRA,
the adapter cache keyed by the base model's identity, and adapted systems in a run."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch

from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import ADAPTERS, AdapterFitContext, TrainingExample
from maxbench.systems.adapters.lora import LoraAdapter
from maxbench.systems.adapters.prefix import PrefixAdapter
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.system_strings import parse_system
from tests.support.corpora import tiny_adapter_corpus
from tests.support.paths import ROOT

PROMPTS = ["I have bought these cookies twice and", "The soup", "My dog loves this food because"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _ctx(lm, corpus=None):
    corpus = corpus or tiny_adapter_corpus()
    return AdapterFitContext(
        model=lm,
        examples=[TrainingExample("", t) for t in corpus.fit],
        data={"corpus": corpus.name, "sha256": corpus.sha256, "split": "fit"},
        options={"progress": False},
    )


# --------------------------------------------------------------------------- the grammar
def test_adapted_system_names_are_canonical_and_read_back():
    spec = parse_system("smollm2-135m+prefix(n=10,steps=50,lr=0.005)/softmax/top_k=40")
    assert (spec.model, spec.adapter, spec.adapter_params) == ("smollm2-135m", "prefix", ())
    assert spec.name == "smollm2-135m+prefix/softmax/top_k=40" and spec.model_key == "smollm2-135m+prefix"
    spec = parse_system("org/name@abc123+lora(modules=all-linear,r=4)/sparsemax/greedy")
    assert spec.name == "org/name@abc123+lora(r=4,modules=all-linear)/sparsemax/greedy"
    assert (spec.model_name, spec.revision, spec.adapter) == ("org/name", "abc123", "lora")
    assert parse_system(spec.name) == spec
    assert parse_system("tiny-random+prefix(n=4,lr=1)/softmax/greedy").adapter_params == (("n", 4), ("lr", 1.0))
    # a system without an adapter is what it always was
    plain = parse_system("smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9")
    assert plain.adapter is None and plain.model_key == plain.model == "smollm2-135m"
    assert plain.name == "smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9"


@pytest.mark.parametrize(
    "system, message",
    [
        ("tiny-random+prefx(n=4)/softmax/greedy", "unknown adapter 'prefx': did you mean 'prefix'?"),
        ("tiny-random+prefix(nn=4)/softmax/greedy", "adapter 'prefix' has no option 'nn': did you mean 'n'?"),
        ("tiny-random+lora(modules=all-linar)/softmax/greedy", "did you mean 'all-linear'?"),
        ("tiny-random+prefix(n=0)/softmax/greedy", "n must be >= 1"),
        ("tiny-random+prefix(n=2.5)/softmax/greedy", "n=2.5 must be int"),
        ("tiny-random+prefix(n=4,n=5)/softmax/greedy", "given twice"),
        ("tiny-random+prefix(projection=true)/softmax/greedy", "init=random"),
    ],
)
def test_bad_adapters_are_one_line_exit_2(cli, tmp_path, system, message):
    rc, _, err = cli("generate", "--system", system, "--suite", "smoke", "--runs-dir", tmp_path, "--no-progress")
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_adapters_are_a_registry_and_a_plugin_group(cli, tmp_path):
    assert ADAPTERS.group == "maxbench.adapters" and ADAPTERS.names()[:2] == ["prefix", "lora"]
    assert ADAPTERS.get("prefix") is PrefixAdapter
    path = tmp_path / "my_adapter.py"
    path.write_text(
        textwrap.dedent(
            """
            import maxbench
            from maxbench.systems.adapters.prefix import PrefixAdapter


            class Prefix2(PrefixAdapter):
                name = "prefix2"


            maxbench.register_adapter(Prefix2)
            """
        )
    )
    rc, out, err = cli("plugins", "--include", path)
    assert rc == 0, err
    assert "maxbench.adapters: 1" in out and "prefix2" in out and str(path) in out
    assert parse_system("tiny-random+prefix2(n=3)/softmax/greedy").name == "tiny-random+prefix2(n=3)/softmax/greedy"
    with pytest.raises(MaxbenchError, match="collides with the built-in adapter 'lora'"):
        ADAPTERS.add_plugin("lora", "x:y", {"source": "session", "sha256": "0"})


# --------------------------------------------------------------------------- prefix-tuning
def _peft_generate(alm, prompt, seed, **kw):
    enc = alm.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(seed)
    ids = alm.model.peft.generate(**enc, max_new_tokens=16, pad_token_id=alm.tokenizer.pad_token_id, **kw)
    ids = ids[0, enc["input_ids"].shape[1] :].tolist()
    eos = alm.tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


def test_prefix_decoded_by_maxbench_is_token_exact_with_peft_generate(tiny, home):
    """A randomly initialised prefix (no training) on the tiny model: maxbench's batched loop (left
    padding, its own KV cache) gives peft's own generate's tokens, greedy and seeded sampling."""
    alm = PrefixAdapter(n=5, init="random", steps=0, seed=3).prepare(_ctx(tiny))
    greedy = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=16), [0] * 3)
    for prompt, row in zip(PROMPTS, greedy):
        assert row["token_ids"] == _peft_generate(alm, prompt, 0, do_sample=False, top_k=None, top_p=None)
    seeds = [11, 12, 13]
    sampled = decode(alm, SoftmaxLayer(), PROMPTS, DecodingSetting(top_k=40, max_new_tokens=16), seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, sampled):
        assert row["token_ids"] == _peft_generate(alm, prompt, seed, do_sample=True, top_k=40, top_p=1.0)
    # and the prefix is not a no-op: the base model continues otherwise
    base = decode(tiny, SoftmaxLayer(), PROMPTS, DecodingSetting(top_k=40, max_new_tokens=16), seeds)
    assert [r["token_ids"] for r in base] != [r["token_ids"] for r in sampled]


def test_prefix_initialised_from_text_is_that_text_in_front(tiny, home):
    """init=text: the untrained prefix is the base model's keys and values of the first training
    text's first n tokens, so the adapted model's logits are the base model's after that text."""
    corpus = tiny_adapter_corpus()
    alm = PrefixAdapter(n=6, steps=0).prepare(_ctx(tiny, corpus))
    from maxbench.systems.adapters.base import training_order

    examples = [TrainingExample("", t) for t in corpus.fit]
    first = examples[training_order(examples)[0]].text
    head = tiny.tokenizer(first)["input_ids"][:6]
    ids = tiny.tokenizer(" and the")["input_ids"]
    with torch.no_grad():
        mask = torch.ones(1, len(ids), dtype=torch.long)
        got = alm.model(input_ids=torch.tensor([ids]), attention_mask=mask, position_ids=torch.arange(len(ids))[None])
        want = tiny.model(input_ids=torch.tensor([head + ids])).logits[:, 6:]
    torch.testing.assert_close(got.logits, want, rtol=0, atol=1e-5)
    assert alm.model.config.max_position_embeddings == tiny.model.config.max_position_embeddings - 6


def test_trained_prefix_is_cached_by_identity_and_rebuilt_for_another_base_model(tiny, home):
    adapter = PrefixAdapter(n=4, steps=3, batch=4, max_len=32)
    a = adapter.prepare(_ctx(tiny))
    meta = adapter.meta
    assert meta["loaded_from_cache"] is False and meta["steps"] == 3 and meta["loss_first"] is not None
    assert meta["model_hash"] == tiny.hash and meta["options"]["n"] == 4
    b = PrefixAdapter(n=4, steps=3, batch=4, max_len=32)
    b_lm = b.prepare(_ctx(tiny))
    assert b.meta["loaded_from_cache"] is True and b.meta["path"] == meta["path"] and b_lm.hash == a.hash
    assert a.hash != tiny.hash and a.name == "tiny-random+prefix(n=4,steps=3,batch=4,max_len=32)"
    # the same adapter for another base model (another identity) is trained again, never reused
    other = dataclasses.replace(tiny, hash="0" * 64)
    c = PrefixAdapter(n=4, steps=3, batch=4, max_len=32)
    c_lm = c.prepare(_ctx(other))
    assert c.meta["loaded_from_cache"] is False and c.meta["path"] != meta["path"] and c_lm.hash != a.hash
    # other training data: another adapter
    d = PrefixAdapter(n=4, steps=3, batch=4, max_len=32)
    d.prepare(_ctx(tiny, tiny_adapter_corpus(seed=1)))
    assert d.meta["path"] not in (meta["path"], c.meta["path"])


# --------------------------------------------------------------------------- LoRA
def test_lora_untrained_is_the_base_model_and_trained_is_deterministic(home):
    from maxbench.systems.models import load_model

    ids = torch.tensor([[5, 6, 7, 8]])
    base = load_model("tiny-random")
    with torch.no_grad():
        want = base.model(input_ids=ids).logits
    untrained = LoraAdapter(steps=0).prepare(_ctx(load_model("tiny-random")))
    with torch.no_grad():
        torch.testing.assert_close(untrained.model(input_ids=ids).logits, want, rtol=0, atol=1e-6)
    first = LoraAdapter(steps=3, batch=4, max_len=32, lr=0.01)
    trained = first.prepare(_ctx(load_model("tiny-random")))
    again = LoraAdapter(steps=3, batch=4, max_len=32, lr=0.01)
    cached = again.prepare(_ctx(load_model("tiny-random")))
    assert first.meta["loaded_from_cache"] is False and again.meta["loaded_from_cache"] is True
    with torch.no_grad():
        got = trained.model(input_ids=ids).logits
        assert not torch.allclose(got, want)
        torch.testing.assert_close(cached.model(input_ids=ids).logits, got, rtol=0, atol=0)
    assert type(trained.model).__name__ == "LlamaForCausalLM"  # merged: a plain model
    # trained again from nothing (retrain): the same tensors
    third = LoraAdapter(steps=3, batch=4, max_len=32, lr=0.01)
    ctx = _ctx(load_model("tiny-random"))
    ctx.options["retrain"] = True
    retrained = third.prepare(ctx)
    assert third.meta["sha256"] == first.meta["sha256"]
    with torch.no_grad():
        torch.testing.assert_close(retrained.model(input_ids=ids).logits, got, rtol=0, atol=0)


# --------------------------------------------------------------------------- adapted systems in a run
def test_adapted_and_base_systems_in_one_run_never_share_rows(cli, tmp_path, home, monkeypatch):
    import maxbench.benchmark.data.corpora as corpora

    monkeypatch.setattr(corpora, "load_corpus", lambda name: tiny_adapter_corpus())
    monkeypatch.setattr(corpora, "check_corpus", lambda name: name)
    rows = [{"id": f"p{i}", "prompt": p, "reference": "good food"} for i, p in enumerate(PROMPTS)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    adapted = "tiny-random+prefix(n=4,init=random,steps=2,batch=4,max_len=32)"
    argv = [
        "generate",
        "--system",
        "tiny-random/softmax/top_k=40,max_new_tokens=6",
        "--system",
        f"{adapted}/softmax/top_k=40,max_new_tokens=6",
        "--system",
        f"{adapted}/sparsemax/greedy,max_new_tokens=6",
        "--suite",
        tmp_path / "s.toml",
        "--corpus",
        "tiny",
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        "r",
        "--no-progress",
        "--threads",
        "1",
    ]
    rc, _, err = cli(*argv)
    assert rc == 0, err
    run = tmp_path / "runs" / "r"
    manifest = json.loads((run / "manifest.json").read_text())
    assert list(manifest["models"]) == ["tiny-random", adapted]
    assert manifest["models"][adapted]["hash"] != manifest["models"]["tiny-random"]["hash"]
    assert manifest["models"][adapted]["options"]["adapter"]["base_hash"] == manifest["models"]["tiny-random"]["hash"]
    entry = manifest["systems"][f"{adapted}/softmax/top_k=40,max_new_tokens=6"]
    assert (
        entry["model"] == "tiny-random"
        and entry["adapter"] == "prefix"
        and entry["code"]["adapter"]["source"] == "maxbench"
    )
    assert "adapter" not in manifest["systems"]["tiny-random/softmax/top_k=40,max_new_tokens=6"]
    gens = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    by = {}
    for g in gens:
        by.setdefault(g["system"], []).append(g)
    assert len(by) == 3 and all(len(v) == 3 for v in by.values())
    base_rows = by["tiny-random/softmax/top_k=40,max_new_tokens=6"]
    prefix_rows = by[f"{adapted}/softmax/top_k=40,max_new_tokens=6"]
    assert [r["token_ids"] for r in base_rows] != [r["token_ids"] for r in prefix_rows]
    assert [r["reference_logprobs"] for r in base_rows] != [r["reference_logprobs"] for r in prefix_rows]
    timings = [json.loads(line)["phase"] for line in (run / "timings.jsonl").read_text().splitlines()]
    assert f"fit {adapted}" in timings
    # run again: nothing to do, the file unchanged; the adapter is not trained again
    before = (run / "generations.jsonl").read_bytes()
    rc, _, err = cli(*argv)
    assert rc == 0, err
    assert (run / "generations.jsonl").read_bytes() == before
    assert len(list((home / "adapters" / "prefix").iterdir())) == 2  # the adapter and its lock
    # the run is scored and ranked with its adapted systems (the manifest's model part joins them)
    rc, _, err = cli("score", run, "--metrics", "distinct", "--bootstrap", "0", "--quiet")
    assert rc == 0, err
    scored = json.loads((run / "scores.json").read_text())["systems"]
    assert f"{adapted}/softmax/top_k=40,max_new_tokens=6" in scored


def test_adapter_needing_attributes_on_a_suite_without_them_is_refused_before_loading(cli, tmp_path, home):
    path = tmp_path / "conditional.py"
    path.write_text(
        textwrap.dedent(
            """
            import maxbench
            from maxbench.systems.adapters.prefix import PrefixAdapter


            class Conditional(PrefixAdapter):
                name = "conditional"
                needs_attributes = True


            maxbench.register_adapter(Conditional)
            """
        )
    )
    argv = ["generate", "--system", "tiny-random+conditional/softmax/greedy", "--suite", "smoke"]
    rc, _, err = cli(*argv, "--runs-dir", tmp_path / "runs", "--include", path)
    assert rc == 2 and "is conditional (it generates from attributes), but suite 'smoke' has no attributes" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "runs").exists() and not home.exists()


PICKY = """
    import maxbench
    from maxbench.errors import MaxbenchError
    from maxbench.systems.adapters.base import Adapter
    from maxbench.systems.adapters.conditional import ConditionalAdapter


    class Picky(Adapter):
        name = "picky"
        needs_attributes = True

        def check_attribute_values(self, suite, examples):
            seen = sorted({e.attributes["score"] for e in examples})
            raise MaxbenchError(f"adapter 'picky' refuses suite '{suite.name}' ({len(suite.items)} items; saw {seen})")


    class Learner(ConditionalAdapter):
        name = "learner"


    maxbench.register_adapter(Picky)
    maxbench.register_adapter(Learner)
"""


@pytest.mark.parametrize(
    "adapter, message",
    [
        ("picky", "adapter 'picky' refuses suite 'food-attrs' ({n} items; saw ['great'])"),
        ("learner", "adapter 'learner' never saw score='other' (suite 'food-attrs', item"),
    ],
)
def test_a_plugin_adapters_check_attribute_values_is_called_in_preflight_with_the_training_data(
    cli, tmp_path, home, monkeypatch, adapter, message
):
    """The runner calls the hook of the adapter contract (``Adapter.check_attribute_values``) on every
    adapter that needs attributes, a plugin's as FCTG's: its own override, or ``ConditionalAdapter``'s
    refusal of a value the training data never carries, before anything loads or trains."""
    import maxbench.benchmark.data.corpora as corpora
    from maxbench.benchmark.data.suites import load_suite

    suite = load_suite("food-attrs")
    assert PrefixAdapter().check_attribute_values(suite, []) is None  # the contract's default accepts
    corpus = tiny_adapter_corpus()
    only_great = {t: corpora.AttributedText(t, t, {"score": "great"}) for t in corpus.fit}
    monkeypatch.setattr(corpora, "load_corpus", lambda name: corpus)
    monkeypatch.setattr(corpora, "load_attributes", lambda name: only_great)
    monkeypatch.setattr(corpora, "check_corpus", lambda name: name)
    path = tmp_path / "picky.py"
    path.write_text(textwrap.dedent(PICKY))
    argv = ["generate", "--system", f"tiny-random+{adapter}/softmax/greedy", "--suite", "food-attrs"]
    rc, _, err = cli(*argv, "--corpus", "food-reviews", "--runs-dir", tmp_path / "runs", "--include", path)
    assert rc == 2 and message.format(n=len(suite.items)) in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "runs").exists() and not home.exists()


def test_on_a_conditional_suite_adapters_learn_the_rendered_attributes(monkeypatch, tmp_path):
    """On a conditional suite the training examples are the suite corpus's fitting texts, each with its
    attributes rendered by the suite's template as the prompt and its target as the text."""
    import maxbench.benchmark.data.corpora as corpora
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.run.runner import adapter_training_data
    from maxbench.rundir import RunPlan

    corpus = tiny_adapter_corpus()
    scores = {
        t: corpora.AttributedText(t, t, {"score": "great" if i % 2 else "other"}) for i, t in enumerate(corpus.fit)
    }
    monkeypatch.setattr(corpora, "load_corpus", lambda name: corpus)
    monkeypatch.setattr(corpora, "load_attributes", lambda name: scores)
    suite = load_suite("food-attrs")
    plan = RunPlan(run_dir=tmp_path / "r", suite=suite, systems=[], corpus="food-reviews")
    examples, data = adapter_training_data(plan)
    assert len(examples) == len(corpus.fit)
    assert {e.prompt for e in examples} == {"Rating: 5 stars. Review:", "Rating: 1 to 4 stars. Review:"}
    assert examples[1] == TrainingExample("Rating: 5 stars. Review:", corpus.fit[1], {"score": "great"})
    assert data["template"] == suite.template and data["sha256"] == corpus.sha256 and data["split"] == "fit"
    # the encoding learns the text only: the prompt's tokens are no targets
    from maxbench.systems.adapters.training import encode_examples
    from maxbench.systems.models import load_model

    tok = load_model("tiny-random").tokenizer
    ((ids, labels),) = encode_examples(tok, examples[:1], 512)
    n_prompt = len(tok(examples[0].prompt)["input_ids"])
    assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
    assert ids[-1] == tok.eos_token_id


GENERATE_WITH_TINY_CORPUS = """
import sys
sys.path.insert(0, {root!r})
import maxbench.benchmark.data.corpora as corpora
from tests.support.corpora import tiny_adapter_corpus
corpora.load_corpus = lambda name: tiny_adapter_corpus()
corpora.check_corpus = lambda name: name
from maxbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_adapted_generation_resumes_after_kill_9_byte_identical(tmp_path, monkeypatch):
    """A real process generating an adapted system is killed while writing; the rerun completes the
    file exactly as an uninterrupted run writes it (the adapter trained once, then loaded)."""
    import signal
    import subprocess
    import sys
    import time

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    rows = [{"id": f"p{i:02d}", "prompt": f"Review number {i}: the soup was", "reference": "ok"} for i in range(10)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "ten"\nfile = "p.jsonl"\n')
    script = GENERATE_WITH_TINY_CORPUS.format(root=str(ROOT))
    system = "tiny-random+prefix(n=4,init=random,steps=2,batch=4,max_len=32)/softmax/top_p=0.9,max_new_tokens=48"
    base = [sys.executable, "-c", script, "generate", "--system", system, "--suite", str(tmp_path / "s.toml")]
    base += ["--corpus", "tiny", "--samples", "3", "--batch-size", "2", "--no-progress", "--threads", "1"]
    base += ["--runs-dir", str(tmp_path / "runs")]
    subprocess.run(base + ["--run-id", "clean"], check=True, capture_output=True)
    proc = subprocess.Popen(base + ["--run-id", "killed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = tmp_path / "runs" / "killed" / "generations.jsonl"
    deadline = time.time() + 300  # generous: the process imports torch, transformers and peft first
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 4):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = out.read_bytes().count(b"\n")
    assert 0 < partial < 30, f"the kill must land mid-run ({partial} of 30 rows written)"
    subprocess.run(base + ["--run-id", "killed"], check=True, capture_output=True)
    assert out.read_bytes() == (tmp_path / "runs" / "clean" / "generations.jsonl").read_bytes()
