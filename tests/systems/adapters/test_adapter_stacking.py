"""A system names at most one adapter: stacked adapters on a base (``MODEL+A+B``) are one line naming
them, never "unknown base model 'MODEL+A'"; and ``fit``, which trains a head on a base model, refuses a
model with an adapter by naming it."""

from __future__ import annotations

import pytest

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters import split_adapter, stacked_adapters
from maxbench.systems.system_strings import parse_system
from tests.support.cli import assert_one_line_exit_2


@pytest.mark.parametrize(
    ("system", "adapters"),
    [
        ("tiny-random+prefix+lora/softmax/greedy", "(prefix, lora)"),
        ("tiny-random+prefix(n=4)+lora(r=2)/softmax/greedy", "(prefix, lora)"),
        ("tiny-random+lora+prefix+lora/softmax/greedy", "(lora, prefix, lora)"),
    ],
)
def test_stacked_adapters_are_refused_naming_them_not_as_an_unknown_base_model(system, adapters):
    with pytest.raises(MaxbenchError) as info:
        parse_system(system)
    msg = str(info.value)
    assert f"adapters {adapters} on 'tiny-random'" in msg and "stacking is not supported" in msg
    assert "unknown base model" not in msg and "\n" not in msg


def test_one_adapter_still_parses_and_a_plus_in_a_model_name_is_no_adapter():
    assert split_adapter("tiny-random+lora(r=2)") == ("tiny-random", "lora", (("r", "2"),))
    assert stacked_adapters("tiny-random+lora") == (["lora"], "tiny-random")
    assert stacked_adapters("my+model+lora") == (["lora"], "my+model")  # 'model' is no adapter


def test_generate_with_stacked_adapters_is_one_line_exit_2(cli, tmp_path):
    result = cli(
        "generate", "--system", "tiny-random+prefix+lora/softmax/greedy", "--suite", "smoke",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress", "--threads", "1",
    )  # fmt: skip
    assert_one_line_exit_2(result, "stacks 2 adapters (prefix, lora)")
    assert not (tmp_path / "runs" / "r").exists()


def test_fit_on_a_model_with_an_adapter_names_the_adapter_and_the_base(cli):
    result = cli("fit", "--model", "tiny-random+lora", "--layer", "kerbs", "--corpus", "food-reviews")
    err = assert_one_line_exit_2(result, "base model 'tiny-random' with adapter 'lora'", "--model tiny-random")
    assert "unknown base model" not in err
    assert_one_line_exit_2(
        cli("fit", "--model", "tiny-random+prefix+lora", "--layer", "kerbs", "--corpus", "food-reviews"),
        "stacks 2 adapters (prefix, lora)",
    )
