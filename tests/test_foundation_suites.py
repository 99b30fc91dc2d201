"""Suites: committed built-ins match their hashes; user suites from TOML; malformed files rejected."""

import hashlib
import json
import tomllib

import pytest

from maxbench.benchmark.data.suites import builtin_suites, load_suite
from maxbench.errors import MaxbenchError


def test_builtin_suites_match_their_manifests():
    names = set(builtin_suites())
    assert {"smoke", "food-reviews", "movie-reviews", "news-prefix"} <= names
    for name, manifest in builtin_suites().items():
        spec = tomllib.loads(manifest.read_text())
        data = manifest.parent / spec["file"]
        assert hashlib.sha256(data.read_bytes()).hexdigest() == spec["sha256"]
        suite = load_suite(name)
        assert len({it.id for it in suite.items}) == len(suite.items)
        assert all(it.prompt.strip() and it.reference.strip() for it in suite.items)
    assert len(load_suite("smoke").items) == 4
    assert len(load_suite("food-reviews").items) == 96


def test_prefix_suite_is_50_plus_100_words():
    for it in load_suite("news-prefix").items:
        assert len(it.prompt.split()) == 50 and len(it.reference.split()) == 100


def _write(tmp_path, name, body, manifest_extra=""):
    (tmp_path / name).write_text(body)
    m = tmp_path / "s.toml"
    m.write_text(f'name = "mine"\nversion = "2"\nfile = "{name}"\n{manifest_extra}')
    return m


@pytest.mark.parametrize(
    "name, body",
    [
        (
            "p.jsonl",
            '{"id": "a", "prompt": "Hello there", "reference": "friend"}\n{"prompt": "Second", "reference": "x"}\n',
        ),
        ("p.csv", "id,prompt,reference\na,Hello there,friend\n,Second,x\n"),
        ("p.txt", "Hello there\n\nSecond\n"),
    ],
)
def test_user_suite_formats(tmp_path, name, body):
    suite = load_suite(str(_write(tmp_path, name, body)))
    assert suite.name == "mine" and suite.version == "2"
    assert [it.prompt for it in suite.items] == ["Hello there", "Second"]
    if not name.endswith(".txt"):
        assert suite.items[0].id == "a" and suite.items[0].reference == "friend"


@pytest.mark.parametrize(
    "name, body, words",
    [
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "   "}\n', "p.jsonl:2: empty or missing prompt"),
        ("p.jsonl", '{"prompt": "ok"}\nnot json\n', "p.jsonl:2: not valid JSON"),
        ("p.csv", "text\nhello\n", "no 'prompt' column"),
        ("p.jsonl", '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n', "duplicate item id 'a'"),
        ("p.xml", "<x/>", "unknown format 'xml'"),
    ],
)
def test_malformed_user_suites(tmp_path, name, body, words):
    with pytest.raises(MaxbenchError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_suite(str(_write(tmp_path, name, body)))


def test_changed_file_fails_hash_check(tmp_path):
    m = _write(tmp_path, "p.txt", "Hello\n", 'sha256 = "' + hashlib.sha256(b"Hello\n").hexdigest() + '"\n')
    assert load_suite(str(m)).items[0].prompt == "Hello"
    (tmp_path / "p.txt").write_text("Changed\n")
    with pytest.raises(MaxbenchError, match="the file changed"):
        load_suite(str(m))


def test_non_utf8_and_bad_toml(tmp_path):
    (tmp_path / "p.txt").write_bytes(b"\xff\xfe bad")
    m = tmp_path / "s.toml"
    m.write_text('name = "x"\nfile = "p.txt"\n')
    with pytest.raises(MaxbenchError, match="not UTF-8"):
        load_suite(str(m))
    m.write_text('name = "x\nfile = ')
    with pytest.raises(MaxbenchError, match="malformed"):
        load_suite(str(m))


def test_suites_command_lists_hashes(cli):
    rc, out, _ = cli("suites", "--json")
    rows = json.loads(out)
    assert rc == 0 and {r["name"] for r in rows} >= {"smoke", "food-reviews"}
    assert all(len(r["sha256"]) == 64 for r in rows)


def test_spreadsheet_csv_and_toml_with_a_byte_order_mark_read(tmp_path):
    """Spreadsheet programs (and Windows editors) start UTF-8 files with a BOM; it is not part of the
    first column's name or the first TOML key."""
    (tmp_path / "p.csv").write_bytes("id,prompt,reference\na,Hello there,friend\n".encode("utf-8-sig"))
    m = tmp_path / "s.toml"
    m.write_bytes('name = "bom"\nfile = "p.csv"\n'.encode("utf-8-sig"))
    suite = load_suite(str(m))
    assert [(it.id, it.prompt, it.reference) for it in suite.items] == [("a", "Hello there", "friend")]


def test_utf16_suite_file_says_to_save_it_as_utf8(tmp_path):
    (tmp_path / "p.txt").write_text("Hello there\n", encoding="utf-16")
    m = tmp_path / "s.toml"
    m.write_text('name = "x"\nfile = "p.txt"\n')
    with pytest.raises(MaxbenchError, match=r"not UTF-8 text \(it starts like UTF-16\); save it as UTF-8"):
        load_suite(str(m))


def test_lone_surrogate_in_a_prompt_is_refused_with_its_line(tmp_path):
    """A JSON escape naming half a character cannot be written back as UTF-8 (nor tokenised)."""
    m = _write(tmp_path, "p.jsonl", '{"prompt": "fine"}\n{"prompt": "bad \\ud800 half"}\n')
    with pytest.raises(MaxbenchError, match=r"p.jsonl:2: 'prompt' holds an invalid character"):
        load_suite(str(m))


def test_csv_prompt_longer_than_the_csv_modules_field_limit_reads(tmp_path):
    """The csv module stops at 128 KiB per field by default; the model's context is the real limit,
    checked before generating (tests/test_new_user.py)."""
    m = _write(tmp_path, "p.csv", "prompt,reference\n" + "a" * 200_000 + ",x\n")
    assert len(load_suite(str(m)).items[0].prompt) == 200_000


def test_manifest_naming_a_folder_says_so(tmp_path):
    m = tmp_path / "s.toml"
    m.write_text('name = "x"\nfile = "."\n')
    with pytest.raises(MaxbenchError, match="names ., which is not a file"):
        load_suite(str(m))
