"""A decoding setting names each key once: a repeated key is refused, never silently won by its last value."""

from __future__ import annotations

import pytest

from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import DecodingSetting


@pytest.mark.parametrize(
    "label,key",
    [
        ("top_p=0.9,top_p=0.5", "top_p"),
        ("temp=0.5,temperature=0.7", "temperature"),
        ("greedy,sample", "greedy or sample"),
        ("greedy,max_new_tokens=8,max_new_tokens=9", "max_new_tokens"),
    ],
)
def test_a_key_given_twice_is_refused(label, key):
    with pytest.raises(MaxbenchError, match=f"gives {key} twice"):
        DecodingSetting.parse(label)


def test_the_cli_refuses_a_repeated_decoding_key_before_any_work(cli, tmp_path):
    argv = ["generate", "--model", "tiny-random", "--layer", "softmax", "--runs-dir", tmp_path / "runs"]
    rc, _, err = cli(*argv, "--decoding", "top_p=0.9,top_p=0.5")
    assert rc == 2 and err.strip().count("\n") == 0 and "gives top_p twice" in err
    assert not (tmp_path / "runs").exists()


def test_each_key_once_still_parses():
    assert DecodingSetting.parse("temp=0.7,top_p=0.9,max_new_tokens=8") == DecodingSetting(
        temperature=0.7, top_p=0.9, max_new_tokens=8
    )
