"""A built-in GGUF model is converted to fp32 safetensors once (maxbench.systems.models.gguf_cache), with the
file parsed once (``parsed_once``): the same bytes as transformers' loaders called plainly, which
parse it three times, and the weights every committed run of the embedded model records."""

import json
from pathlib import Path

import gguf
import pytest

from maxbench.systems import models
from tests.support.paths import ROOT


@pytest.fixture
def parses(monkeypatch):
    """How many GGUFReader objects were built (the parses of a GGUF file) since the last reset."""
    count = [0]
    reader = gguf.GGUFReader

    def counting(*args, **kwargs):
        count[0] += 1
        return reader(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    return count


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_parsed_once_converts_the_same_bytes_from_one_parse(tiny_gguf, tmp_path, parses):
    plain, once = tmp_path / "plain", tmp_path / "once"
    plain.mkdir()
    once.mkdir()
    models.convert_gguf(tiny_gguf, plain)
    assert parses[0] == 3  # transformers' config, tokenizer and model loaders
    parses[0] = 0
    counting = gguf.GGUFReader
    with models.parsed_once():
        assert models.fp32_bytes(tiny_gguf) == 4 * (32 * 32 * 3 + 16 * 32 * 2 + 64 * 32 * 3 + 32 * 3)
        models.convert_gguf(tiny_gguf, once)
    assert parses[0] == 1
    assert gguf.GGUFReader is counting and not hasattr(gguf.get_tensor_name_map, "cache_info")  # put back
    written = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(_files(once)) == written
    assert _files(once) == _files(plain)


def test_parsed_once_puts_the_readers_back_after_an_error(tiny_gguf, parses):
    counting = gguf.GGUFReader
    with pytest.raises(RuntimeError), models.parsed_once():
        gguf.GGUFReader(tiny_gguf)
        raise RuntimeError("interrupted")
    assert gguf.GGUFReader is counting
    gguf.GGUFReader(tiny_gguf)
    assert parses[0] == 2


@pytest.mark.slow
def test_the_embedded_model_converts_from_one_parse_to_the_weights_the_committed_runs_record(
    tmp_path, monkeypatch, parses
):
    asset = models.fetch(models.GGUF_MODELS["smollm2-135m"].asset)
    parses[0] = 0
    monkeypatch.setattr(models, "fetch", lambda name: asset)
    monkeypatch.setattr(models, "maxbench_home", lambda: tmp_path)
    out = models.gguf_cache("smollm2-135m")
    assert parses[0] == 1
    manifest = ROOT / "results/decoding-baselines/runs/decoding-baselines-food-reviews/manifest.json"
    recorded = json.loads(manifest.read_text())["models"]["smollm2-135m"]["hash"]
    assert json.loads((out / "maxbench.json").read_text())["weights_sha256"] == recorded
