"""Base models: the embedded model is the real one, tiny-random is deterministic, names checked
before any download, the device chosen."""

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer
from maxbench.systems.models import load_model


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
    with pytest.raises(MaxbenchError, match="local model folder '.' has no config.json"):  # its files, not the hub
        check_model_reachable(".")


def test_device_choice():
    from maxbench.systems.models import choose_device

    assert choose_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert choose_device(None) == "cpu"
        with pytest.raises(MaxbenchError, match="no CUDA GPU"):
            choose_device("cuda")
    with pytest.raises(MaxbenchError, match="unknown device"):
        choose_device("tpu")
