"""A model is loaded as its files say or refused: weights that do not match config.json (missing,
unexpected, of another shape), a truncated weight file, and plugin loaders that fail or return no
identity are each one line naming the model."""

from __future__ import annotations

import json
import shutil

import pytest

import maxbench
from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.systems.models import load_model, tiny_random_model


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model, tok, _ = tiny_random_model()
    path = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _edited(folder, tmp_path, **config):
    path = tmp_path / "edited"
    shutil.copytree(folder, path)
    data = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(data | config))
    return path


def test_a_folder_whose_weights_match_its_config_loads(folder):
    assert load_model(str(folder), device="cpu").vocab_size == 257


def test_a_config_naming_more_layers_than_the_weights_hold_is_refused_naming_the_missing_weights(folder, tmp_path):
    path = _edited(folder, tmp_path, num_hidden_layers=4)
    with pytest.raises(MaxbenchError, match=r"lack \(model\.layers\.2\..*would be random") as exc:
        load_model(str(path), device="cpu")
    assert "\n" not in str(exc.value)


def test_a_config_naming_fewer_layers_than_the_weights_hold_is_refused_naming_the_extra_weights(folder, tmp_path):
    path = _edited(folder, tmp_path, num_hidden_layers=1)
    with pytest.raises(MaxbenchError, match=r"no place for \(model\.layers\.1\."):
        load_model(str(path), device="cpu")


@pytest.mark.parametrize(("key", "value"), [("hidden_size", 64), ("vocab_size", 300)])
def test_a_size_in_config_that_contradicts_the_weights_is_one_line(folder, tmp_path, key, value):
    path = _edited(folder, tmp_path, **{key: value})
    with pytest.raises(MaxbenchError, match=r"another shape than config\.json gives, e\.g\. model\.") as exc:
        load_model(str(path), device="cpu")
    assert "\n" not in str(exc.value)


def test_a_truncated_weight_file_is_one_line(folder, tmp_path, cli):
    path = tmp_path / "cut"
    shutil.copytree(folder, path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(MaxbenchError, match="truncated or damaged"):
        load_model(str(path), device="cpu")


def _tiny():
    model, tok, digest = tiny_random_model()
    return model, tok, digest


@pytest.mark.parametrize(
    ("loader", "said"),
    [
        (lambda: (*_tiny()[:2], ""), "weights hash ''"),
        (lambda: (*_tiny()[:2], None), "weights hash None"),
        (lambda: _tiny()[:2], "returned tuple of 2 items"),
        (lambda: None, "returned NoneType"),
        (lambda: _tiny()[0], "returned LlamaForCausalLM"),
        (lambda: (object(), _tiny()[1], "abc"), "not a transformers causal LM"),
        (lambda: 1 / 0, "loader failed: ZeroDivisionError"),
    ],
)
def test_a_plugin_model_loader_that_fails_or_returns_no_identity_is_one_line(loader, said):
    maxbench.register_model("mine", loader)
    with pytest.raises(MaxbenchError, match=r"plugin base model 'mine' from a session") as exc:
        load_model("mine", device="cpu")
    assert said in str(exc.value) and "\n" not in str(exc.value)


def test_a_plugin_model_loader_with_a_real_hash_loads():
    maxbench.register_model("mine", _tiny)
    assert load_model("mine", device="cpu").hash == _tiny()[2]
