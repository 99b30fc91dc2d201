"""A local model folder that exists but cannot be loaded is refused in one line naming what it lacks or
what is broken in it (config.json, the tokenizer, the weights, the weight index), never as "not a local
model directory" with advice to download the folder's path from the hub."""

from __future__ import annotations

import json
import shutil

import pytest

from maxbench.errors import MaxbenchError
from maxbench.systems.models import check_model_reachable, load_model, tiny_random_model
from tests.support.cli import assert_one_line_exit_2

pytestmark = pytest.mark.usefixtures("no_plugins")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model, tok, _ = tiny_random_model()
    path = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _broken(folder, tmp_path, how):
    path = tmp_path / "broken"
    shutil.copytree(folder, path)
    how(path)
    return path


def _no_tokenizer(path):
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (path / name).unlink(missing_ok=True)


def _index_naming_a_missing_shard(path):
    (path / "model.safetensors").rename(path / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


BROKEN = {
    "no tokenizer": (_no_tokenizer, "has no tokenizer files"),
    "no config": (lambda p: (p / "config.json").unlink(), "has no config.json"),
    "config not json": (lambda p: (p / "config.json").write_text("{bad"), "config.json is not valid JSON"),
    "no weights": (lambda p: (p / "model.safetensors").unlink(), "has no weights"),
    "index naming a missing shard": (_index_naming_a_missing_shard, "names shard files the folder lacks"),
    "index not json": (
        lambda p: (p / "model.safetensors.index.json").write_text("not json"),
        "model.safetensors.index.json is not valid JSON",
    ),
    "index without weight_map": (
        lambda p: (p / "model.safetensors.index.json").write_text("{}"),
        "has no weight_map",
    ),
    "shards without their index": (
        lambda p: (p / "model.safetensors").rename(p / "model-00001-of-00002.safetensors"),
        "are shards without model.safetensors.index.json",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_local_folder_is_refused_naming_what_is_broken_not_as_a_hub_download(folder, tmp_path, case):
    how, words = BROKEN[case]
    path = _broken(folder, tmp_path, how)
    with pytest.raises(MaxbenchError) as info:
        load_model(str(path), device="cpu")
    msg = str(info.value)
    assert words in msg and f"local model folder '{path}'" in msg and "\n" not in msg
    assert "not a local model directory" not in msg and "download" not in msg
    with pytest.raises(MaxbenchError, match=words.replace(".", r"\.")):  # a run refuses it before any work too
        check_model_reachable(str(path))


def test_a_damaged_tokenizer_file_is_blamed_on_the_folder_not_the_hub(folder, tmp_path):
    path = _broken(folder, tmp_path, lambda p: (p / "tokenizer.json").write_text("{}"))
    with pytest.raises(MaxbenchError) as info:
        load_model(str(path), device="cpu")
    msg = str(info.value)
    assert (
        msg.startswith(f"cannot load the local model folder '{path}': its tokenizer cannot be loaded")
        and "\n" not in msg
    )
    assert "not a local model directory" not in msg and "hf download" not in msg


def test_generate_on_a_folder_without_a_tokenizer_is_one_line_exit_2_before_any_work(folder, tmp_path, cli, home):
    path = _broken(folder, tmp_path, _no_tokenizer)
    runs = tmp_path / "runs"
    result = cli(
        "generate", "--model", str(path), "--suite", "smoke", "--samples", "1", "--max-new-tokens", "2",
        "--threads", "1", "--runs-dir", str(runs), "--run-id", "r", "--no-progress",
    )  # fmt: skip
    err = assert_one_line_exit_2(result, "has no tokenizer files", str(path))
    assert "not a local model directory" not in err
    assert not (runs / "r" / "generations.jsonl").exists()


def test_a_whole_folder_still_loads(folder):
    assert load_model(str(folder), device="cpu").vocab_size == 257
