"""Issue 41 items 4 and 9: suites read as written (only \\n ends a line; ids, prompts and references
of the wrong kind refused with one line), and references longer than the model's context scored with
strided (sliding-window) perplexity, the stride recorded in ref-ppl's signature."""

import json
import math

import pytest
import torch

from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.metrics.base import TextBatch
from maxbench.benchmark.metrics.perplexity import ReferencePPL
from maxbench.errors import MaxbenchError
from maxbench.systems.decoding import reference_logprobs, reference_states, reference_windows
from maxbench.systems.layers.softmax import SoftmaxLayer


def _suite(tmp_path, name, body: str, extra=""):
    (tmp_path / name).write_bytes(body.encode("utf-8"))
    m = tmp_path / "s.toml"
    m.write_text(f'name = "mine"\nfile = "{name}"\n{extra}')
    return str(m)


# ---------------------------------------------------------------- item 4: suites read as written
def test_txt_splits_only_on_newline(tmp_path):
    body = "one\u2028two\x85three\x0cfour\x0bfive\x1csix\x1dseven\x1eeight\r\nsecond line\n"
    suite = load_suite(_suite(tmp_path, "p.txt", body))
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
    suite = load_suite(_suite(tmp_path, "p.jsonl", body))
    assert [(it.id, it.prompt, it.reference) for it in suite.items] == [
        ("a", "x\u2028y", "r\u2029s\x85t"),
        ("b", "z", ""),  # a null reference is no reference
    ]


def test_integer_ids_are_kept_zero_included(tmp_path):
    body = '{"id": 0, "prompt": "a"}\n{"id": 7, "prompt": "b"}\n{"prompt": "c"}\n'
    suite = load_suite(_suite(tmp_path, "p.jsonl", body))
    assert [it.id for it in suite.items] == ["0", "7", "mine-00003"]
    with pytest.raises(MaxbenchError, match="duplicate item id '0'"):
        load_suite(_suite(tmp_path, "p.jsonl", '{"id": 0, "prompt": "a"}\n{"id": "0", "prompt": "b"}\n'))


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
        load_suite(_suite(tmp_path, "p.jsonl", body))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "value, kind", [("[]", "a list"), ("0", "the number 0"), ("false", "a boolean"), ("{}", "an object")]
)
def test_non_text_references_are_refused(tmp_path, value, kind):
    body = '{"prompt": "a", "reference": "fine"}\n\n{"prompt": "b", "reference": ' + value + "}\n"
    with pytest.raises(MaxbenchError, match=r"p\.jsonl:3: reference \('reference'\) is " + kind):
        load_suite(_suite(tmp_path, "p.jsonl", body))


@pytest.mark.parametrize("value, kind", [('["a"]', "a list"), ("3", "the number 3"), ('{"t": "a"}', "an object")])
def test_non_text_prompts_are_refused_by_kind(tmp_path, value, kind):
    with pytest.raises(MaxbenchError, match=r"p\.jsonl:1: prompt \('prompt'\) is " + kind):
        load_suite(_suite(tmp_path, "p.jsonl", '{"prompt": ' + value + "}\n"))


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
    m = _suite(tmp_path, "p.jsonl", '{"prompt": "a"}\n', extra)
    with pytest.raises(MaxbenchError, match=f"'{key}' must be"):
        load_suite(m)
    rc, _, err = cli("suites", m)
    assert rc == 2 and err.startswith("maxbench: error:") and "Traceback" not in err


def test_bad_suite_is_one_cli_line(tmp_path, cli):
    rc, _, err = cli("suites", _suite(tmp_path, "p.jsonl", '{"prompt": "a", "id": [1]}\n'))
    assert rc == 2 and err.strip().count("\n") == 0 and "p.jsonl:1: id ('id') is a list" in err


# ---------------------------------------------------------------- item 9: strided reference perplexity
def test_windows_score_each_token_once_with_enough_context():
    assert reference_windows(3, 10, None) == [(0, 10, 3)]
    assert reference_windows(3, 10, 10) == [(0, 10, 3)]
    for n_prompt, n_total, context, stride in [(3, 10, 6, None), (2, 40, 8, 3), (7, 9, 8, 4), (1, 100, 16, 16)]:
        windows = reference_windows(n_prompt, n_total, context, stride)
        scored = [t for _, end, first in windows for t in range(first, end)]
        assert scored == list(range(n_prompt, n_total))
        s = stride or context // 2
        for start, end, first in windows:
            assert end - start <= context and start >= 0
            assert first - start >= (context - s if start else first)
    with pytest.raises(ValueError, match="prompt alone"):
        reference_windows(8, 20, 8)


def test_strided_states_equal_plain_ones_when_everything_fits(tiny):
    prompt, ref = "Hello there", "word " * 40
    plain = reference_states(tiny, prompt, ref)
    n = len(tiny.tokenizer(prompt)["input_ids"]) + len(plain.targets)
    for context in (n, n + 5):
        same = reference_states(tiny, prompt, ref, context=context)
        assert torch.equal(same.hidden, plain.hidden) and torch.equal(same.targets, plain.targets)
    # strided: the first window is the plain prefix, so its positions match; every token is scored
    strided = reference_states(tiny, prompt, ref, context=24)
    assert strided.hidden.shape == plain.hidden.shape and torch.equal(strided.targets, plain.targets)
    first = 24 - (n - len(plain.targets))
    torch.testing.assert_close(strided.hidden[:first], plain.hidden[:first])


def test_a_reference_longer_than_the_context_gets_finite_values_and_the_stride_in_the_signature(tiny):
    context = tiny.model.config.max_position_embeddings
    prompt, ref = "Once upon a time", " ".join(f"w{i}" for i in range(context))  # far more tokens than the context
    layer = SoftmaxLayer()
    (lp,) = reference_logprobs(tiny, layer, [prompt], [ref])
    n_ref = len(tiny.tokenizer(" " + ref, add_special_tokens=False)["input_ids"])
    assert len(lp) == n_ref > context and all(v is not None and math.isfinite(v) and v <= 0 for v in lp)
    refs = {"p": ref}
    metric = ReferencePPL()
    plain_sig = metric.signature
    res = metric.compute(TextBatch(["x"], ["p"], refs, {"p": prompt}, {"p": lp}, tiny.vocab_size, context // 2))
    assert res.signature == plain_sig + f"|stride:{context // 2}"
    assert math.isfinite(res.scores["ref-eps-ppl"].value) and math.isfinite(res.scores["ref-ppl"].value)
    # a batch with no strided reference keeps the signature the committed leaderboards have
    again = metric.compute(TextBatch(["x"], ["p"], {"p": "a b"}, None, {"p": [-1.0, -2.0]}, 10))
    assert again.signature == plain_sig and "stride" not in plain_sig


def test_a_prompt_longer_than_the_context_is_refused_in_one_line(tiny):
    with pytest.raises(MaxbenchError, match="cannot be scored for ref-ppl: the prompt alone") as exc:
        reference_states(tiny, "a b c d e f g h", "more words here", context=4)
    assert "\n" not in str(exc.value)


def test_smoke_suite_generates_on_tiny_random(tmp_path, cli):
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", "smoke", "--runs-dir", tmp_path, "--run-id", "r",
        "--max-new-tokens", "4", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    rows = [json.loads(line) for line in (tmp_path / "r" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["reference_logprobs"] for r in rows)
    long = [r for r in rows if r.get("reference_stride")]
    assert long and all(r["reference_stride"] == 256 and len(r["reference_logprobs"]) > 512 for r in long)
    assert all(v is None or math.isfinite(v) for r in rows for v in r["reference_logprobs"])
    rc, _, err = cli("score", tmp_path / "r", "--metrics", "ref-ppl")
    assert rc == 0, err
    scores = json.loads((tmp_path / "r" / "scores.json").read_text())
    assert "|stride:256" in json.dumps(scores)
