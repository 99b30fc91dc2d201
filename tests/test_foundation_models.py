"""Base models and the decoding loop: token-exact with transformers' generate."""

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.models import load_model

PROMPTS = [
    "I have bought these cookies twice and",
    "The soup arrived cold, but the",
    "My dog loves this food because",
    "After three weeks of using it,",
]


def _hf_generate(lm, prompt, seed, **kw):
    enc = lm.tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(seed)
    ids = lm.model.generate(**enc, max_new_tokens=24, pad_token_id=lm.tokenizer.pad_token_id, **kw)
    ids = ids[0, enc["input_ids"].shape[1] :].tolist()
    eos = lm.tokenizer.eos_token_id
    return ids[: ids.index(eos)] if eos in ids else ids


@pytest.mark.slow
def test_greedy_batch_equals_generate(smollm2):
    res = decode(smollm2, SoftmaxLayer(), PROMPTS, DecodingSetting(do_sample=False, max_new_tokens=24), [0] * 4)
    for prompt, row in zip(PROMPTS, res):
        assert row["token_ids"] == _hf_generate(
            smollm2, prompt, 0, do_sample=False, top_k=None, top_p=None, temperature=None
        )


@pytest.mark.slow
def test_seeded_top_p_equals_generate(smollm2):
    seeds = [11, 12, 13, 14]
    res = decode(smollm2, SoftmaxLayer(), PROMPTS, DecodingSetting(top_p=0.9, max_new_tokens=24), seeds)
    for prompt, seed, row in zip(PROMPTS, seeds, res):
        assert row["token_ids"] == _hf_generate(
            smollm2, prompt, seed, do_sample=True, top_p=0.9, top_k=0, temperature=1.0
        )
    # and each row is independent of its batch: decoding it alone gives the same tokens
    alone = decode(smollm2, SoftmaxLayer(), PROMPTS[2:3], DecodingSetting(top_p=0.9, max_new_tokens=24), seeds[2:3])
    assert alone[0]["token_ids"] == res[2]["token_ids"]


@pytest.mark.slow
def test_temperature_and_top_k_equal_generate(smollm2):
    res = decode(
        smollm2, SoftmaxLayer(), PROMPTS[:1], DecodingSetting(temperature=0.7, top_k=40, max_new_tokens=24), [5]
    )
    assert res[0]["token_ids"] == _hf_generate(
        smollm2, PROMPTS[0], 5, do_sample=True, temperature=0.7, top_k=40, top_p=1.0
    )


@pytest.mark.slow
def test_embedded_model_is_the_real_smollm2(smollm2):
    d = smollm2.describe()
    assert d["parameters"] == 134_515_008 and d["vocab_size"] == 49_152 and d["dtype"] == "torch.float32"
    assert smollm2.tokenizer.eos_token_id == 2
    text = decode(
        smollm2, SoftmaxLayer(), ["The capital of France is"], DecodingSetting(do_sample=False, max_new_tokens=4), [0]
    )
    assert "Paris" in text[0]["text"]


def test_tiny_random_is_deterministic():
    a, b = load_model("tiny-random"), load_model("tiny-random")
    assert a.hash == b.hash and a.tokenizer_hash == b.tokenizer_hash
    ids = a.tokenizer(["héllo"], add_special_tokens=False)["input_ids"][0]
    assert a.tokenizer.decode(ids) == "héllo"


def test_a_misspelled_model_fails_before_any_download(monkeypatch):
    import transformers

    from maxbench.systems.models import check_model, load_model

    def no_network(*a, **k):
        raise AssertionError("the hub was asked for a name that cannot be a model")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_network)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_network)
    with pytest.raises(MaxbenchError, match="did you mean 'smollm2-135m'"):
        load_model("smollm2-13m")
    with pytest.raises(MaxbenchError, match="unknown base model './nowhere/model'"):
        load_model("./nowhere/model")
    # a hub id and an existing directory are names a model can have: they pass the check
    assert check_model("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    assert check_model(".") == "."


def test_an_uncached_hub_id_is_refused_at_once_when_offline_and_built_ins_never_ask_the_hub(monkeypatch):
    import socket

    from huggingface_hub import constants

    from maxbench.systems.models import check_model_reachable

    def no_network(*a, **k):
        raise AssertionError("the network was tried")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(MaxbenchError, match="cannot load model 'no-org/no-such-model'.*HF_HUB_OFFLINE is set"):
        check_model_reachable("no-org/no-such-model")
    with pytest.raises(MaxbenchError, match="did you mean 'smollm2-135m'"):
        check_model_reachable("smollm2-13m")
    assert check_model_reachable("tiny-random") == "tiny-random"
    assert check_model_reachable(".") == "."


def test_stats_and_finish(tiny):
    res = decode(tiny, SoftmaxLayer(), ["abc", "a much longer prompt"], DecodingSetting(max_new_tokens=5), [1, 2])
    for row in res:
        assert row["finish"] in ("eos", "length")
        st = row["stats"]
        assert all(0 < s <= tiny.vocab_size for s in st["support"])
        assert all(0 < t <= 1 for t in st["top1"]) and all(e >= 0 for e in st["entropy"])


def test_each_step_records_the_chosen_tokens_probability_and_text_piece(tiny):
    """p_chosen is the layer's probability of the token drawn (greedy: the top-1 mass itself), and the
    pieces join to the text, one per generated token (the explorer shades tokens with them)."""
    greedy = decode(tiny, SoftmaxLayer(), ["abc", "xyz q"], DecodingSetting(do_sample=False, max_new_tokens=6), [1, 2])
    sampled = decode(tiny, SoftmaxLayer(), ["abc", "xyz q"], DecodingSetting(max_new_tokens=6), [1, 2])
    for row in greedy:
        assert row["stats"]["p_chosen"] == row["stats"]["top1"]
    for row in greedy + sampled:
        st = row["stats"]
        assert len(st["p_chosen"]) == len(st["entropy"]) and all(0 < p <= t for p, t in zip(st["p_chosen"], st["top1"]))
        assert len(row["pieces"]) == row["n_tokens"] and "".join(row["pieces"]) == row["text"]
        n = len(row["token_ids"])
        assert row["pieces"] == [
            tiny.tokenizer.decode(row["token_ids"][: k + 1])[len(tiny.tokenizer.decode(row["token_ids"][:k])) :]
            for k in range(n)
        ] or "\ufffd" in tiny.tokenizer.decode(row["token_ids"][:n])


def test_empty_prompt_and_nan_logits_are_refused(tiny):
    with pytest.raises(MaxbenchError, match="prompt 1 is empty"):
        decode(tiny, SoftmaxLayer(), ["ok", "  "], DecodingSetting(), [0, 0])

    class Broken(SoftmaxLayer):
        pass

    model = tiny.model
    orig = model.forward

    def nan_forward(*a, **k):
        out = orig(*a, **k)
        out.logits[:] = float("nan")
        return out

    model.forward = nan_forward
    try:
        with pytest.raises(MaxbenchError, match="logits contain NaN"):
            decode(tiny, Broken(), ["ok"], DecodingSetting(), [0])
    finally:
        model.forward = orig


def test_the_fast_finiteness_check_agrees_with_isfinite_even_when_the_sum_overflows():
    from maxbench.systems.decoding import warp_rows
    from maxbench.systems.layers.base import all_finite, require_finite_logits

    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    huge = torch.full((2, 8), 3e38)  # every entry finite, the float32 sum is inf
    assert not torch.isfinite(huge.sum())
    cases = [logits, huge, huge.double(), torch.empty(0, 5), torch.arange(12).reshape(3, 4)]
    for r, c, v in [(1, 7, float("nan")), (2, 0, float("inf")), (0, 999, float("-inf"))]:
        bad = logits.clone()
        bad[r, c] = v
        cases.append(bad)
    for t in cases:
        assert all_finite(t) == bool(torch.isfinite(t).all()), t
    require_finite_logits(huge, "x")  # finite logits pass, whatever their sum
    dead = logits.clone()
    dead[2, 0] = float("-inf")
    with pytest.raises(MaxbenchError, match=r"x: the model's logits contain infinite values \(batch rows \[2\]\)"):
        require_finite_logits(dead, "x")
    # warp_rows: finite rows go to the warper whole; a row of -inf only is left as it is
    warp = DecodingSetting.parse("top_p=0.9").warpers()
    assert torch.equal(warp_rows(warp, None, logits), warp(None, logits))
    dead[2] = float("-inf")
    out = warp_rows(warp, None, dead)
    assert torch.equal(out[:2], warp(None, logits[:2])) and torch.isneginf(out[2]).all()


def test_device_choice():
    from maxbench.systems.models import choose_device

    assert choose_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert choose_device(None) == "cpu"
        with pytest.raises(MaxbenchError, match="no CUDA GPU"):
            choose_device("cuda")
    with pytest.raises(MaxbenchError, match="unknown device"):
        choose_device("tpu")


def test_reference_logprobs_are_the_layers_teacher_forced_logprobs(tiny):
    from maxbench.systems.decoding import reference_logprobs

    prompt, ref = "the soup", "was cold"
    got = reference_logprobs(tiny, SoftmaxLayer(), [prompt, "x"], [ref, "  "], chunk=3)
    p_ids = tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r_ids = tiny.tokenizer(" " + ref, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = tiny.model(input_ids=torch.tensor([p_ids + r_ids])).logits[0].float()
    want = torch.log_softmax(logits, -1)[len(p_ids) - 1 : -1].gather(1, torch.tensor(r_ids)[:, None])[:, 0]
    assert got[1] == [] and len(got[0]) == len(r_ids)
    assert torch.allclose(torch.tensor(got[0]), want, atol=1e-5)


def test_reference_logprobs_mark_zero_probability_as_none(tiny):
    from maxbench.systems.decoding import reference_logprobs

    class OnlyFirstToken(SoftmaxLayer):
        def scores(self, logits, hidden):
            out = torch.full_like(logits, float("-inf"))
            out[:, 0] = 0.0
            return out

    got = reference_logprobs(tiny, OnlyFirstToken(), ["abc"], ["de"])
    assert got == [[None, None, None]]  # " ", "d", "e": none is token 0


def test_reference_states_are_computed_once_per_model_and_give_the_same_logprobs(tiny):
    from types import SimpleNamespace

    from maxbench.benchmark.run.runner import ReferenceStateCache
    from maxbench.systems.decoding import reference_logprobs
    from maxbench.systems.layers.sparsemax.layer import SparsemaxLayer

    item = SimpleNamespace(id="p0", prompt="the soup", reference="was cold and salty")
    cache = ReferenceStateCache()
    first = cache.get(tiny, "tiny-random", item)
    assert cache.get(tiny, "tiny-random", item) is first and cache.used == first.nbytes
    for layer in (SoftmaxLayer(), SparsemaxLayer()):
        fresh = reference_logprobs(tiny, layer, [item.prompt], [item.reference], chunk=4)
        assert reference_logprobs(tiny, layer, [], [], chunk=4, states=[first]) == fresh
    full = ReferenceStateCache(max_bytes=0)  # over budget: computed again, same values
    again = full.get(tiny, "tiny-random", item)
    assert again is not full.get(tiny, "tiny-random", item) and torch.equal(again.hidden, first.hidden)


def test_workers_share_reference_states_through_the_run_folder(tiny, tmp_path, monkeypatch):
    """A second worker's cache reads the state the first wrote instead of running the forward
    pass again; a file it cannot read (a killed writer, a corrupt disk) is computed again."""
    from types import SimpleNamespace

    import maxbench.systems.decoding
    from maxbench.benchmark.run.runner import ReferenceStateCache

    computed = []
    real = maxbench.systems.decoding.reference_states
    monkeypatch.setattr(maxbench.systems.decoding, "reference_states", lambda *a: computed.append(a[1:]) or real(*a))
    item = SimpleNamespace(id="p0", prompt="the soup", reference="was cold and salty")
    other = SimpleNamespace(id="p1", prompt="the soup", reference="was warm")
    first = ReferenceStateCache(directory=tmp_path).get(tiny, "tiny-random", item)
    assert len(computed) == 1 and len(list(tmp_path.glob("*.pt"))) == 1
    second = ReferenceStateCache(directory=tmp_path)
    shared = second.get(tiny, "tiny-random", item)
    assert len(computed) == 1  # read, not computed
    assert torch.equal(shared.hidden, first.hidden) and torch.equal(shared.targets, first.targets)
    assert shared.hidden.dtype == first.hidden.dtype and shared.hidden.device == first.hidden.device
    second.get(tiny, "tiny-random", other)  # another reference: its own file
    assert len(computed) == 2 and len(list(tmp_path.glob("*.pt"))) == 2
    for path in tmp_path.glob("*.pt"):
        path.write_bytes(path.read_bytes()[:100])  # truncated
    again = ReferenceStateCache(directory=tmp_path).get(tiny, "tiny-random", item)
    assert len(computed) == 3 and torch.equal(again.hidden, first.hidden)
