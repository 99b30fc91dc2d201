"""``maxbench suites``: the built-ins listed with their hashes, a user suite checked."""

import json

import pytest

from maxbench.benchmark.data.suites import load_suite
from maxbench.errors import MaxbenchError
from tests.support.suites import write_suite_file


def test_suites_command_lists_hashes(cli):
    rc, out, _ = cli("suites", "--json")
    rows = json.loads(out)
    assert rc == 0 and {r["name"] for r in rows} >= {"smoke", "food-reviews"}
    assert all(len(r["sha256"]) == 64 for r in rows)


@pytest.mark.parametrize(
    "extra, key",
    [
        ("prompt_field = 1", "prompt_field"),
        ('id_field = ["id"]', "id_field"),
        ("sha256 = 5", "sha256"),
        ("version = [1]", "version"),
    ],
)
def test_manifest_fields_of_the_wrong_kind_are_one_line(tmp_path, cli, extra, key):
    m = write_suite_file(tmp_path, "p.jsonl", '{"prompt": "a"}\n', extra)
    with pytest.raises(MaxbenchError, match=f"'{key}' must be"):
        load_suite(m)
    rc, _, err = cli("suites", m)
    assert rc == 2 and err.startswith("maxbench: error:") and "Traceback" not in err


def test_bad_suite_is_one_cli_line(tmp_path, cli):
    rc, _, err = cli("suites", write_suite_file(tmp_path, "p.jsonl", '{"prompt": "a", "id": [1]}\n'))
    assert rc == 2 and err.strip().count("\n") == 0 and "p.jsonl:1: id ('id') is a list" in err
