"""Suites: committed built-ins match their hashes; user suites from TOML, jsonl, csv and txt read as
written; malformed files rejected in one line."""

import hashlib
import json
import tomllib

import pytest

from maxbench.benchmark.data.suites import builtin_suites, load_suite
from maxbench.errors import MaxbenchError
from tests.support.cli import assert_one_line_exit_2
from tests.support.suites import write_suite_file


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
    checked before generating (tests/benchmark/commands/test_generate.py)."""
    m = _write(tmp_path, "p.csv", "prompt,reference\n" + "a" * 200_000 + ",x\n")
    assert len(load_suite(str(m)).items[0].prompt) == 200_000


def test_manifest_naming_a_folder_says_so(tmp_path):
    m = tmp_path / "s.toml"
    m.write_text('name = "x"\nfile = "."\n')
    with pytest.raises(MaxbenchError, match="names ., which is not a file"):
        load_suite(str(m))


# ---------------------------------------------------------------- suites read as written
def test_txt_splits_only_on_newline(tmp_path):
    body = "one\u2028two\x85three\x0cfour\x0bfive\x1csix\x1dseven\x1eeight\r\nsecond line\n"
    suite = load_suite(write_suite_file(tmp_path, "p.txt", body))
    assert [it.prompt for it in suite.items] == [
        "one\u2028two\x85three\x0cfour\x0bfive\x1csix\x1dseven\x1eeight",
        "second line",
    ]


def test_jsonl_keeps_raw_line_separators_inside_strings(tmp_path):
    rows = [
        {"id": "a", "prompt": "x\u2028y", "reference": "r\u2029s\x85t"},
        {"id": "b", "prompt": "z", "reference": None},
    ]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    suite = load_suite(write_suite_file(tmp_path, "p.jsonl", body))
    assert [(it.id, it.prompt, it.reference) for it in suite.items] == [
        ("a", "x\u2028y", "r\u2029s\x85t"),
        ("b", "z", ""),  # a null reference is no reference
    ]


def test_integer_ids_are_kept_zero_included(tmp_path):
    body = '{"id": 0, "prompt": "a"}\n{"id": 7, "prompt": "b"}\n{"prompt": "c"}\n'
    suite = load_suite(write_suite_file(tmp_path, "p.jsonl", body))
    assert [it.id for it in suite.items] == ["0", "7", "mine-00003"]
    with pytest.raises(MaxbenchError, match="duplicate item id '0'"):
        load_suite(write_suite_file(tmp_path, "p.jsonl", '{"id": 0, "prompt": "a"}\n{"id": "0", "prompt": "b"}\n'))


@pytest.mark.parametrize(
    "value, kind",
    [
        ("null", "null"),
        ("[1]", "a list"),
        ('{"a": 1}', "an object"),
        ("true", "a boolean"),
        ("1.5", "1.5"),
        ('""', "empty"),
    ],
)
def test_bad_ids_are_refused(tmp_path, value, kind):
    body = '{"id": "ok", "prompt": "a"}\n{"id": ' + value + ', "prompt": "b"}\n'
    with pytest.raises(MaxbenchError, match=r"p\.jsonl:2: id \('id'\) is .*" + kind) as exc:
        load_suite(write_suite_file(tmp_path, "p.jsonl", body))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "value, kind", [("[]", "a list"), ("0", "the number 0"), ("false", "a boolean"), ("{}", "an object")]
)
def test_non_text_references_are_refused(tmp_path, value, kind):
    body = '{"prompt": "a", "reference": "fine"}\n\n{"prompt": "b", "reference": ' + value + "}\n"
    with pytest.raises(MaxbenchError, match=r"p\.jsonl:3: reference \('reference'\) is " + kind):
        load_suite(write_suite_file(tmp_path, "p.jsonl", body))


@pytest.mark.parametrize("value, kind", [('["a"]', "a list"), ("3", "the number 3"), ('{"t": "a"}', "an object")])
def test_non_text_prompts_are_refused_by_kind(tmp_path, value, kind):
    with pytest.raises(MaxbenchError, match=r"p\.jsonl:1: prompt \('prompt'\) is " + kind):
        load_suite(write_suite_file(tmp_path, "p.jsonl", '{"prompt": ' + value + "}\n"))


# ---------------------------------------------------------------- a suite CSV with another delimiter
def _delimited_suite(tmp_path, body: str):
    (tmp_path / "p.csv").write_text(body, encoding="utf-8")
    (tmp_path / "s.toml").write_text('name = "mine"\nfile = "p.csv"\n')
    return str(tmp_path / "s.toml")


@pytest.mark.parametrize("delimiter, named", [(";", "';'"), ("\t", "tab"), ("|", "'|'")])
def test_a_suite_csv_with_another_delimiter_is_named(tmp_path, cli, delimiter, named):
    body = delimiter.join(["id", "prompt", "reference"]) + "\n" + delimiter.join(["1", "Hello there", "a ref"]) + "\n"
    err = assert_one_line_exit_2(cli("suites", _delimited_suite(tmp_path, body)))
    assert f"uses {named} as the delimiter" in err or f"use {named} as the delimiter" in err, err
    assert "save it with commas" in err, err
    # a comma-separated file without the column: the columns it has, no delimiter hint
    with pytest.raises(MaxbenchError, match=r"no 'prompt' column \(columns: \['id', 'text'\]\)"):
        load_suite(_delimited_suite(tmp_path, "id,text\n1,a\n"))
    with pytest.raises(MaxbenchError, match="CSV is empty"):
        load_suite(_delimited_suite(tmp_path, ""))
    assert [it.prompt for it in load_suite(_delimited_suite(tmp_path, "id,prompt\n1,Hello; there\n")).items] == [
        "Hello; there"
    ]
