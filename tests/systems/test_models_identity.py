"""A model's identity (systems/models.py): every weight shard, the config and the tokenizer files,
and the non-default model options; what keys hidden-state caches and trained heads."""

import json
import shutil
from types import SimpleNamespace

import pytest

from maxbench.errors import MaxbenchError
from maxbench.fileio import maxbench_home
from maxbench.systems import hidden_cache as hc
from maxbench.systems.assets import sha256_file
from maxbench.systems.layers.head_cache import head_identity
from maxbench.systems.layers.kerbs import fit as kerbs_fit
from maxbench.systems.models import (
    folder_identity,
    load_model,
    model_files,
    model_identity,
    parse_model_args,
    tiny_random_model,
)
from maxbench.systems.system_strings import parse_system

TINY_RANDOM_HASH = "e3d629ecbd12b842e145f684c989fd63a22a54dd18287bc734871a3c6ed952ea"
CORPUS = SimpleNamespace(name="food-reviews", sha256="c" * 64)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The tiny random Llama saved as a sharded checkpoint with its tokenizer."""
    model, tok, _ = tiny_random_model()
    folder = tmp_path_factory.mktemp("models") / "a"
    model.save_pretrained(folder, max_shard_size="20KB", safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _shards(folder):
    return sorted(folder.glob("*.safetensors"))


def test_every_shard_counts(sharded, tmp_path):
    shards = _shards(sharded)
    assert len(shards) >= 2
    assert model_files(sharded)[0].name == "config.json"  # sorted by name, config and tokenizer included
    assert {p.name for p in model_files(sharded)} >= {"config.json", "tokenizer.json", *(p.name for p in shards)}
    same = _copy(sharded, tmp_path / "same")
    assert folder_identity(same) == folder_identity(sharded)  # where a folder is does not count
    other = _copy(sharded, tmp_path / "other")
    from safetensors.torch import load_file, save_file

    second = _shards(other)[1]
    tensors = load_file(second)
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 1e-3
    save_file(tensors, second, metadata={"format": "pt"})
    assert sha256_file(_shards(other)[0]) == sha256_file(shards[0])  # the first shard is the same
    assert folder_identity(other) != folder_identity(sharded)


def test_config_counts(sharded, tmp_path):
    other = _copy(sharded, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"maxbench_note": "harmless"}, indent=2))
    assert folder_identity(other) != folder_identity(sharded)
    tok = _copy(sharded, tmp_path / "tok")
    cfg = json.loads((tok / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps(cfg | {"model_max_length": 77}))
    assert folder_identity(tok) != folder_identity(sharded)


def test_a_sharded_folder_loads_with_its_identity_and_keys_caches_apart(sharded, tmp_path):
    lm = load_model(str(sharded), device="cpu")
    assert lm.hash == folder_identity(sharded) == model_identity(sharded)
    assert lm.options == {} and "options" not in lm.describe()
    other = _copy(sharded, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"maxbench_note": "harmless"}))
    lm2 = load_model(str(other), device="cpu")
    assert lm2.hash != lm.hash and lm2.tokenizer_hash == lm.tokenizer_hash
    assert hc.cache_key(lm, CORPUS, 1000)[0] != hc.cache_key(lm2, CORPUS, 1000)[0]
    cfg = kerbs_fit.KerBSConfig()
    one = hc.head_directory("kerbs", head_identity("kerbs", kerbs_fit.KERBS_VERSION, lm, CORPUS, 1000, cfg))
    two = hc.head_directory("kerbs", head_identity("kerbs", kerbs_fit.KERBS_VERSION, lm2, CORPUS, 1000, cfg))
    assert one != two


def test_non_default_options_join_the_identity_defaults_do_not(sharded):
    base = folder_identity(sharded)
    assert model_identity(sharded, {"dtype": "fp32", "trust_remote_code": False}) == base
    ids = {
        model_identity(sharded, o)
        for o in ({"dtype": "bf16"}, {"dtype": "fp16"}, {"trust_remote_code": True}, {"revision": "abc123"})
    }
    assert len(ids) == 4 and base not in ids
    # the same options keep the same cache keys; a different one moves them
    lm = SimpleNamespace(hash=model_identity(sharded, {"dtype": "bf16"}), tokenizer_hash="t" * 64)
    lm0 = SimpleNamespace(hash=base, tokenizer_hash="t" * 64)
    assert hc.cache_key(lm, CORPUS, 1000)[0] != hc.cache_key(lm0, CORPUS, 1000)[0]


def test_parse_model_args():
    assert parse_model_args("") == {}
    assert parse_model_args("dtype=bfloat16, trust_remote_code=true,revision=v1.0") == {
        "dtype": "bf16",
        "trust_remote_code": True,
        "revision": "v1.0",
    }
    with pytest.raises(MaxbenchError, match="did you mean 'dtype'"):
        parse_model_args("dtyp=bf16")
    with pytest.raises(MaxbenchError, match="unknown model dtype 'int3'"):
        parse_model_args("dtype=int3")
    with pytest.raises(MaxbenchError, match="key=value"):
        parse_model_args("dtype")
    with pytest.raises(MaxbenchError, match="true or false"):
        parse_model_args("trust_remote_code=maybe")
    with pytest.raises(MaxbenchError) as info:
        parse_model_args("dtyp=bf16")
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


def test_half_precision_is_refused_on_the_cpu_in_one_line():
    for dtype in ("bf16", "fp16"):
        with pytest.raises(MaxbenchError) as info:
            load_model("tiny-random", device="cpu", options={"dtype": dtype})
        msg = str(info.value)
        assert "\n" not in msg and f"dtype={dtype} is refused on the CPU" in msg and "not bit-stable" in msg


def test_revision_in_system_strings():
    spec = parse_system("org/name@abc123/softmax/greedy")
    assert (spec.model, spec.model_name, spec.revision, spec.layer) == (
        "org/name@abc123",
        "org/name",
        "abc123",
        "softmax",
    )
    assert parse_system(spec.name) == spec and spec.name.startswith("org/name@abc123/softmax/")
    plain = parse_system("org/name/softmax/greedy")
    assert plain.revision is None and plain.model == "org/name"
    with pytest.raises(MaxbenchError, match="MODEL@REVISION"):
        parse_system("org/name@/softmax/greedy")


def test_revisions_only_for_hub_ids(sharded):
    from maxbench.systems.models import check_model, resolve_options

    assert check_model("org/name@abc123") == "org/name@abc123"
    with pytest.raises(MaxbenchError, match="built-in model has no revisions"):
        check_model("tiny-random@abc")
    with pytest.raises(MaxbenchError, match="local model directory has no revisions"):
        check_model(f"{sharded}@abc")
    with pytest.raises(MaxbenchError, match="has no revisions"):
        load_model(str(sharded), device="cpu", options={"revision": "abc"})
    with pytest.raises(MaxbenchError, match="give one"):
        resolve_options("org/name@abc", {"revision": "def"})
    assert resolve_options("org/name@abc", {"revision": "abc"})["revision"] == "abc"


def test_built_in_identities_are_unchanged():
    assert load_model("tiny-random", device="cpu").hash == TINY_RANDOM_HASH
    # a built-in runs no remote code: the option does not move its identity
    assert load_model("tiny-random", device="cpu", options={"trust_remote_code": True}).hash == TINY_RANDOM_HASH
    meta = maxbench_home() / "models" / "smollm2-135m" / "maxbench.json"
    if not meta.exists():
        pytest.skip("the smollm2-135m cache is not converted here")
    # smollm2's identity is still the sha256 of its converted weights file, as recorded at conversion
    recorded = json.loads(meta.read_text())["weights_sha256"]
    assert recorded == sha256_file(meta.parent / "model.safetensors")
    assert load_model("smollm2-135m", device="cpu").hash == recorded


def test_model_args_reach_the_command_line_and_an_unknown_key_is_refused(cli):
    rc, out, err = cli("generate", "--model", "tiny-random", "--suite", "smoke", "--model-args", "dtyp=bf16")
    assert rc == 2 and "did you mean 'dtype'" in err and len(err.strip().splitlines()) == 1, err


def test_model_args_are_part_of_a_runs_identity(tmp_path):
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.rundir import RunPlan

    suite = load_suite("smoke")
    plain = RunPlan(run_dir=tmp_path, suite=suite, systems=[])
    assert "model_args" not in plain.identity()  # runs made before the option keep their identity
    revised = RunPlan(run_dir=tmp_path, suite=suite, systems=[], model_args={"revision": "abc"})
    assert revised.identity()["model_args"] == {"revision": "abc"} and revised.identity() != plain.identity()
