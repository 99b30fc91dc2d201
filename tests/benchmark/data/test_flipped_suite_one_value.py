"""``flipped_suite`` on an attribute of one value refuses in one line (it has no opposite), instead of
returning the suite again under a flipped name; two values still flip."""

from __future__ import annotations

import json

import pytest

from maxbench.benchmark.data.suites import flipped_suite, load_suite
from maxbench.errors import MaxbenchError


def _suite(tmp_path, values: list[str]):
    (tmp_path / "s.jsonl").write_text(json.dumps({"id": "a", "attributes": {"score": values[0]}, "reference": "Nice."}))
    (tmp_path / "s.toml").write_text(
        'name = "one"\nfile = "s.jsonl"\ntemplate = "Score: {score}. Review:"\n'
        f"[attributes.score]\nvalues = {json.dumps(values)}\n"
    )
    return load_suite(str(tmp_path / "s.toml"))


@pytest.mark.parametrize("attribute", [None, "score"])
def test_an_attribute_of_one_value_is_refused_naming_it_not_copied_unflipped(tmp_path, attribute):
    suite = _suite(tmp_path, ["great"])
    with pytest.raises(MaxbenchError) as info:
        flipped_suite(suite, attribute)
    msg = str(info.value)
    assert "attribute 'score' has one value ('great'), nothing to flip to" in msg and "\n" not in msg


def test_an_attribute_of_two_values_still_flips(tmp_path):
    flipped = flipped_suite(_suite(tmp_path, ["great", "other"]))
    assert [it.attributes for it in flipped.items] == [{"score": "other"}]
    assert flipped.items[0].prompt == "Score: other. Review:"
