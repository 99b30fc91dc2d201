"""What a new user broke (issue 19): the command line, the runner and the leaderboard refuse bad
input before any work, in one line with exit status 2, write files others can read, and never put
numbers that must not be compared into one ranking."""

import csv
import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write
from tests.support.paths import ROOT

TINY = "tiny-random/softmax/greedy,max_new_tokens=4"


def _suite(tmp_path, n=6, prompt="Review {i}: the soup was", reference="cold and salty {i}", name="six"):
    rows = [{"id": f"p{i:02d}", "prompt": prompt.format(i=i), "reference": reference.format(i=i)} for i in range(n)]
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\nfile = "{name}.jsonl"\n')
    return tmp_path / f"{name}.toml"


def _lineup(tmp_path, systems, **extra):
    body = {"name": "t", "suite": str(_suite(tmp_path)), "batch_size": 4, "metrics": ["distinct"], "systems": systems}
    body |= extra
    path = tmp_path / "lineup.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items()))
    return path


def _one_line_exit_2(result, *words):
    rc, _, err = result
    assert rc == 2 and err.startswith("maxbench: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ---------------------------------------------------------------- files others can read
def test_atomic_write_gives_the_mode_the_umask_gives_not_0600(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.json", "{}\n")
        os.umask(0o022)
        atomic_write(tmp_path / "b.json", b"{}\n")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.json") == 0o640 and _mode(tmp_path / "b.json") == 0o644
    assert (tmp_path / "b.json").read_bytes() == b"{}\n"
    assert [p.name for p in tmp_path.iterdir()] != [] and not list(tmp_path.glob(".*.tmp"))


def test_atomic_write_keeps_an_asked_for_private_mode(tmp_path, umask_022):
    atomic_write(tmp_path / "secret", "k", mode=0o600)
    assert _mode(tmp_path / "secret") == 0o600


def test_atomic_write_never_replaces_a_device_or_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    for path in (tmp_path / "d", Path("/dev/null")):
        with pytest.raises(MaxbenchError, match="exists and is not a regular file"):
            atomic_write(path, "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and (tmp_path / "d").is_dir()


def test_run_and_leaderboard_files_are_readable_by_colleagues(tmp_path, cli, umask_022):
    """manifest.json, generations.jsonl (rewritten atomically when complete) and the leaderboard
    files were 0600 (tempfile.mkstemp's mode) before."""
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--decoding", "greedy,max_new_tokens=2",
        "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    for name in ("manifest.json", "generations.jsonl"):
        assert _mode(tmp_path / "runs" / "r" / name) == 0o644, name
    _scored_run(tmp_path / "runs", "s", ["m/softmax/greedy"])
    rc, _, err = cli("leaderboard", tmp_path / "runs" / "s", "--out", tmp_path / "lb")
    assert rc == 0, err
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html"):
        assert _mode(tmp_path / "lb" / name) == 0o644, name


# ---------------------------------------------------------------- the leaderboard
def _scored_run(
    root,
    run_id,
    systems,
    suite="six",
    n_items=6,
    seed=1234,
    covered=None,
    new_format=True,
    value=0.5,
    extra_scores=None,
):
    """A scored run directory as `maxbench run` leaves it (manifest.json, scores.json, generations):
    the leaderboard reads only these files."""
    d = Path(root) / run_id
    d.mkdir(parents=True)
    ident = {
        "suite": {"name": suite, "version": "1", "sha256": (suite * 64)[:64], "n_items": n_items, "path": None},
        "systems": systems,
        "samples": 1,
        "seed": seed,
        "registry": "t",
    }
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "identity": ident}))
    covered = n_items if covered is None else covered
    entries = {}
    for k, s in enumerate(systems):
        v = value + k / 10
        scores = {"bleu-4": {"value": v, "ci_low": v - 0.01, "ci_high": v + 0.01, "higher_is_better": True}}
        scores |= extra_scores or {}
        entries[s] = {"n_texts": covered, "n_prompts": covered, "scores": scores}
        if new_format:
            entries[s] |= {"suite_prompts": n_items, "partial": covered < n_items}
    doc = {"suite": ident["suite"], "systems": entries, "comparisons": {"baseline": systems[0], "systems": {}}}
    (d / "scores.json").write_text(json.dumps(doc))
    rows = [
        {"system": s, "prompt_id": f"p{i:02d}", "sample": 0, "prompt": "P", "reference": "R", "text": "T"}
        | {"stats": {"entropy": [1.0, 2.0], "support": [3, 2]}}
        for s in systems
        for i in range(covered)
    ]
    (d / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _table(md: str) -> list[list[str]]:
    """The full table of a leaderboard.md (after the compact one, when there is one)."""
    lines = [ln for ln in md.split("## All metrics")[-1].splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


SYS = ["m/softmax/greedy", "m/sparsemax/greedy"]


def test_same_system_in_two_runs_is_refused(tmp_path, cli):
    a = _scored_run(tmp_path, "a", SYS)
    b = _scored_run(tmp_path, "b", SYS[:1], value=0.9)
    _one_line_exit_2(cli("leaderboard", a, b, "--out", tmp_path / "lb"), "'m/softmax/greedy' is in both", "--mixed")
    assert not (tmp_path / "lb").exists()


def test_same_system_in_two_runs_with_mixed_is_one_row_per_run(tmp_path, cli):
    a = _scored_run(tmp_path, "a", SYS)
    b = _scored_run(tmp_path, "b", SYS[:1], value=0.9)
    rc, _, err = cli("leaderboard", a, b, "--out", tmp_path / "lb", "--mixed")
    assert rc == 0, err
    table = _table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert table[0][:2] == ["system", "run"]
    assert [row[:2] for row in table[1:]] == [
        ["`m/softmax/greedy`", "`a`"],
        ["`m/sparsemax/greedy`", "`a`"],
        ["`m/softmax/greedy`", "`b`"],
    ]
    with open(tmp_path / "lb" / "leaderboard.csv") as f:
        assert [r[:2] for r in csv.reader(f)][1:] == [[s, r] for s, r in zip(SYS + SYS[:1], "aab")]


@pytest.mark.parametrize(
    "other, words",
    [
        ({"suite": "three", "n_items": 3}, ["suite six v1", "three v1", "prompts 6", "but 3"]),
        ({"seed": 99}, ["seed 1234", "but 99"]),
    ],
)
def test_runs_on_different_prompts_or_seeds_are_refused_naming_the_difference(tmp_path, cli, other, words):
    a = _scored_run(tmp_path, "a", SYS[:1])
    b = _scored_run(tmp_path, "b", SYS[1:], **other)
    _one_line_exit_2(cli("leaderboard", a, b, "--out", tmp_path / "lb"), "not comparable", *words)


def test_mixed_suites_show_a_suite_column_and_the_best_per_suite(tmp_path, cli):
    a = _scored_run(tmp_path, "a", SYS, value=0.5)  # best bleu-4 in six: sparsemax 0.6
    b = _scored_run(tmp_path, "b", ["m/graphmax/greedy"], suite="three", n_items=3, value=0.1)
    rc, _, err = cli("leaderboard", a, b, "--out", tmp_path / "lb", "--mixed")
    assert rc == 0, err
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    table = _table(md)
    assert table[0][:3] == ["system", "run", "suite"]
    assert [row[2] for row in table[1:]] == ["six (6 prompts, seed 1234, samples 1)"] * 2 + [
        "three (3 prompts, seed 1234, samples 1)"
    ]
    bleu = [row[table[0].index("bleu-4")] for row in table[1:]]
    assert bleu == ["50.00 [49.00, 51.00]", "**60.00** [59.00, 61.00]", "**10.00** [9.00, 11.00]"]
    assert md.startswith("# maxbench leaderboard: runs on several suites\n")


@pytest.mark.parametrize("new_format", [True, False], ids=["scores-say-partial", "derived-from-generations"])
def test_rows_say_how_many_prompts_they_cover_and_mark_partial_runs(tmp_path, cli, new_format):
    a = _scored_run(tmp_path, "a", SYS, covered=3, new_format=new_format)
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    table = _table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert table[0][:2] == ["system", "prompts"] and [r[1] for r in table[1:]] == ["3 of 6 (partial)"] * 2
    with open(tmp_path / "lb" / "leaderboard.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["prompts"], r["partial"]) for r in rows] == [("3", "true")] * 2


def test_scores_marked_not_available_print_n_a(tmp_path, cli):
    na = {"sacrebleu": {"value": None, "reason": "the suite has no references"}}  # no interval either
    a = _scored_run(tmp_path, "a", SYS, extra_scores=na)
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    table = _table((tmp_path / "lb" / "leaderboard.md").read_text())
    assert [row[table[0].index("sacrebleu")] for row in table[1:]] == ["n/a", "n/a"]
    assert ">n/a<" in (tmp_path / "lb" / "leaderboard.html").read_text()


def test_system_strings_are_escaped_in_the_html_page(tmp_path, cli):
    a = _scored_run(tmp_path, "a", ["m<img src=x onerror=alert(1)>/softmax/greedy"])
    rc, _, err = cli("leaderboard", a, "--out", tmp_path / "lb")
    assert rc == 0, err
    page = (tmp_path / "lb" / "leaderboard.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t: [t / "nosuch"], ["is not a run directory", "maxbench run"]),
        (lambda t: [_scored_run(t, "a", SYS)] * 2, ["is given twice"]),
        (lambda t: [Path(t / "e").mkdir() or t / "e"], ["has no scores.json"]),
    ],
)
def test_leaderboard_bad_run_directories(tmp_path, cli, make, words):
    _one_line_exit_2(cli("leaderboard", *make(tmp_path), "--out", tmp_path / "lb"), *words)


@pytest.mark.parametrize("body", ["[1, 2]", '{"systems": {"s": 5}}', '{"systems": {"s": {"scores": {"x": 1}}}}'])
def test_leaderboard_malformed_scores_file(tmp_path, cli, body):
    a = _scored_run(tmp_path, "a", SYS)
    (a / "scores.json").write_text(body)
    _one_line_exit_2(cli("leaderboard", a, "--out", tmp_path / "lb"), "rescore")


def _committed_run(tmp_path, folder: Path) -> Path:
    """The scored run behind a committed leaderboard, rebuilt from the numbers its csv holds (12
    significant digits, which print the same at the 2 decimals shown) and its md (baseline, n/a)."""
    md = (folder / "leaderboard.md").read_text()
    with open(folder / "leaderboard.csv") as f:
        rows = list(csv.reader(f))
    cols = [c for c in rows[0][1:] if not c.endswith(("_ci_low", "_ci_high", "_p_vs_baseline"))]
    lower = {"kld", "ppl", "ref-eps-ppl", "ref-ppl", "rep", "seq-rep-4", "ref-zero-frac"}
    md_rows = {r[0].strip("`"): r[1:] for r in _table(md)[1:]}
    baseline = re.search(r"against the baseline `([^`]*)`", md).group(1)
    source = re.search(r"^Sources: `([^`]*)`$", md, re.M).group(1)
    num = lambda x: None if x == "" else float(x)  # noqa: E731
    systems, comps = {}, {}
    for row in rows[1:]:
        scores, ps = {}, {}
        for i, col in enumerate(cols):
            v, lo, hi, p = row[1 + 4 * i : 5 + 4 * i]
            if v == lo == hi == p == "" and md_rows[row[0]][i] != "n/a":
                continue
            hib = not (col in lower or col.startswith("self-bleu"))
            scores[col] = {"value": num(v), "ci_low": num(lo), "ci_high": num(hi), "higher_is_better": hib}
            if p:
                ps[col] = {"p_value": float(p)}
        systems[row[0]] = {"n_prompts": 96, "scores": scores}
        comps[row[0]] = ps
    registry, suite = re.match(r"# maxbench leaderboard: (\S+) on (\S+)\n", md).groups()
    run = _scored_run(tmp_path, source, list(systems), suite=suite, n_items=96)
    ident = json.loads((run / "manifest.json").read_text())
    ident["identity"]["registry"] = registry
    (run / "manifest.json").write_text(json.dumps(ident))
    doc = {"systems": systems, "comparisons": {"baseline": baseline, "systems": comps}}
    (run / "scores.json").write_text(json.dumps(doc))
    return Path(source)


@pytest.mark.parametrize("folder", ["results", "results/lambda-sweep"])
def test_committed_leaderboards_render_byte_identically_through_the_document_model(tmp_path, monkeypatch, folder):
    from maxbench.benchmark.present.leaderboard import render

    committed = ROOT / folder
    monkeypatch.chdir(tmp_path)  # the md names its source as given: results/runs/<run>
    source = _committed_run(tmp_path, committed)
    render([source], tmp_path / "out")
    for name in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (committed / name).read_bytes(), name


# ---------------------------------------------------------------- checked before work starts
def _run(cli, tmp_path, lineup, *extra):
    return cli(
        "run", "--lineup", lineup, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "lb",
        "--no-progress", "--n-resamples", "10", *extra,
    )  # fmt: skip


def test_misspelled_model_in_the_second_system_answers_at_once(tmp_path, cli):
    lineup = _lineup(tmp_path, [TINY, "tiny-rando/softmax/greedy"])
    t0 = time.monotonic()
    _one_line_exit_2(_run(cli, tmp_path, lineup), "unknown base model 'tiny-rando'", "did you mean 'tiny-random'")
    assert time.monotonic() - t0 < 20
    assert not (tmp_path / "runs").exists()


def test_hub_model_offline_in_the_second_system_fails_before_the_first_generates(tmp_path, cli, monkeypatch):
    """Before, the first system generated in full and the hub was tried for a minute; the run
    directory was left half made."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    lineup = _lineup(tmp_path, [TINY, "no-org/no-such-model/softmax/greedy"])
    _one_line_exit_2(_run(cli, tmp_path, lineup), "cannot load model 'no-org/no-such-model'", "HF_HUB_OFFLINE")
    assert not (tmp_path / "runs").exists()


def test_unknown_corpus_is_refused_before_any_work(tmp_path, cli):
    lineup = _lineup(tmp_path, [TINY], corpus="food-revews")
    _one_line_exit_2(_run(cli, tmp_path, lineup), "unknown corpus 'food-revews'", "did you mean 'food-reviews'")
    assert not (tmp_path / "runs").exists()


def test_leaderboard_folder_that_cannot_be_written_is_refused_before_generating(tmp_path, cli):
    (tmp_path / "afile").write_text("x")
    lineup = _lineup(tmp_path, [TINY])
    rc, _, err = cli(
        "run", "--lineup", lineup, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "afile", "--no-progress"
    )
    _one_line_exit_2((rc, "", err), "--out", "is a file")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "where, words",
    [
        ("/dev/null", "/dev/null is not a folder"),
        ("afile", "afile is a file"),
        ("afile/below", "afile is a file"),
    ],
)
def test_output_folders_that_cannot_be_folders(tmp_path, cli, where, words):
    (tmp_path / "afile").write_text("x")
    target = where if where.startswith("/") else tmp_path / where
    gen = cli(
        "generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--runs-dir", target, "--no-progress",
    )  # fmt: skip
    _one_line_exit_2(gen, "run directory", words)
    _scored_run(tmp_path / "runs", "r", SYS)
    _one_line_exit_2(cli("leaderboard", tmp_path / "runs" / "r", "--out", target), "--out", words)
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("command", ["generate", "run"])
@pytest.mark.parametrize("run_id", ["../../escaped", "/ABS", ".hidden", "a/b"])
def test_run_id_that_is_not_one_plain_folder_name_is_refused(tmp_path, cli, command, run_id):
    (tmp_path / "runs").mkdir()
    run_id = run_id.replace("/ABS", str(tmp_path / "abs"))  # an absolute path replaces --runs-dir
    if command == "generate":
        argv = ["generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--runs-dir", tmp_path / "runs"]
    else:
        argv = [
            "run",
            "--lineup",
            _lineup(tmp_path, [TINY]),
            "--runs-dir",
            tmp_path / "runs",
            "--out",
            tmp_path / "lb",
        ]
    _one_line_exit_2(cli(*argv, "--run-id", run_id), "--run-id", "plain folder name")
    assert not (tmp_path / "runs" / run_id).exists()
    assert not list((tmp_path / "runs").iterdir())


def test_derived_run_ids_stay_one_plain_name():
    from maxbench.benchmark.commands.options import run_id

    assert run_id(None, "smoke", "tiny-random/softmax/top_p=0.9") == "smoke-tiny_random_softmax_top_p=0.9"
    long = run_id(
        None, "smoke", *[f"org/very-long-model-name/graphmax(lam={i}.0,solver=exact)/top_p=0.9" for i in range(5)]
    )
    assert len(long) <= 100 and "/" not in long and long.startswith("run-smoke-")
    assert run_id(None, "ünïcode", "m/softmax/greedy").isascii()


def test_free_disk_space_is_checked_before_the_first_token(tmp_path, cli, monkeypatch):
    import maxbench.benchmark.run.runner

    monkeypatch.setattr(maxbench.benchmark.run.runner, "free_bytes", lambda path: 1 << 20)
    lineup = _lineup(tmp_path, [TINY])
    _one_line_exit_2(_run(cli, tmp_path, lineup), "MiB are free there")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "prompt, reference, decoding, words",
    [
        ("Hello {i}", "x", "greedy,max_new_tokens=100000000", "max_new_tokens=100000000 needs 100000"),
        ("a" * 10_000_000 + "{i}", "x", "greedy,max_new_tokens=4", "at least"),
    ],
    # a reference past the context is scored in strided windows now (tests/test_new_user_suites.py)
    ids=["max_new_tokens=1e8", "10-MB-prompt"],
)
def test_positions_past_the_models_context_are_refused_before_generating(
    tmp_path, cli, prompt, reference, decoding, words
):
    suite = _suite(tmp_path, n=2, prompt=prompt, reference=reference)
    rc = cli(
        "generate", "--model", "tiny-random", "--suite", suite, "--decoding", decoding, "--runs-dir", tmp_path / "runs",
        "--no-progress",
    )  # fmt: skip
    _one_line_exit_2(rc, words, "tiny-random's context of 512")
    assert not (tmp_path / "runs").exists()


def test_a_batch_that_cannot_fit_in_memory_is_refused_before_generating(tmp_path, cli, monkeypatch):
    import maxbench.systems.decoding

    monkeypatch.setattr(maxbench.systems.decoding, "available_memory", lambda device: 1 << 16)
    rc = cli("generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--runs-dir", tmp_path / "runs")
    _one_line_exit_2(rc, "GiB free", "lower the batch size")
    assert not (tmp_path / "runs").exists()


def test_decode_itself_refuses_positions_past_the_context(tiny):
    from maxbench.systems.decoding import DecodingSetting, decode
    from maxbench.systems.system_strings import parse_system

    layer = parse_system("tiny-random/softmax/greedy").build_layer()
    with pytest.raises(MaxbenchError, match="context of 512"):
        decode(tiny, layer, ["x" * 500], DecodingSetting(do_sample=False, max_new_tokens=20), [0])


def test_memory_estimate_grows_with_batch_and_squared_length(tiny):
    from maxbench.systems.decoding import memory_estimate

    small, batch, long = (memory_estimate(tiny, b, t, False) for b, t in ((1, 100), (4, 100), (1, 400)))
    assert batch > 3 * small and long > 4 * small


# ---------------------------------------------------------------- score keeps its work
def test_score_refuses_before_computing_when_scores_json_cannot_be_written(tmp_path, cli):
    rc, _, err = cli(
        "generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--decoding", "greedy,max_new_tokens=2",
        "--runs-dir", tmp_path, "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    (tmp_path / "r" / "scores.json").mkdir()
    err = _one_line_exit_2(cli("score", tmp_path / "r", "--metrics", "distinct"), "scores.json", "not a regular file")
    assert "scoring" not in err


# ---------------------------------------------------------------- generate: several systems, max new tokens
def test_generate_takes_several_layers_and_systems_into_one_run(tmp_path, cli):
    rc, out, err = cli(
        "generate", "--model", "tiny-random", "--suite", _suite(tmp_path, n=2), "--decoding", "greedy",
        "--layer", "softmax", "--layer", "sparsemax", "--system", "tiny-random/softmax/top_p=0.9",
        "--max-new-tokens", "3", "--runs-dir", tmp_path / "runs", "--run-id", "r", "--no-progress",
    )  # fmt: skip
    assert rc == 0, err
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    assert list(manifest["systems"]) == [
        "tiny-random/softmax/greedy,max_new_tokens=3",
        "tiny-random/sparsemax/greedy,max_new_tokens=3",
        "tiny-random/softmax/top_p=0.9,max_new_tokens=3",
    ]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "r" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 and all(r["n_tokens"] <= 3 for r in rows)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--system", "tiny-random/softmax/greedy,max_new_tokens=9", "--max-new-tokens", "3"], "give it in one place"),
        (["--layer", "softmax", "--layer", "softmax"], "is given twice"),
        (["--max-new-tokens", "0"], "max_new_tokens must be >= 1"),
    ],
)
def test_generate_conflicting_systems_are_refused(tmp_path, cli, argv, words):
    rc = cli("generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--runs-dir", tmp_path / "r", *argv)
    _one_line_exit_2(rc, words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--samples", "100000000"], "600,000,000 rows (prompts x samples x systems)"),
        (["--decoding", "temp=1e400"], "temperature must be a finite number"),
    ],
)
def test_out_of_range_numbers_are_refused_before_any_work(tmp_path, cli, argv, words):
    rc = cli("generate", "--model", "tiny-random", "--suite", _suite(tmp_path), "--runs-dir", tmp_path / "r", *argv)
    _one_line_exit_2(rc, words)
    assert not (tmp_path / "r").exists()


def test_negative_resamples_are_refused_before_any_work(tmp_path, cli):
    _one_line_exit_2(
        _run(cli, tmp_path, _lineup(tmp_path, [TINY]), "--n-resamples", "-1"), "--n-resamples must be >= 0"
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("model", ["a/b..c", "a/b--c"])
def test_model_that_is_not_a_valid_hub_id_is_one_line(tmp_path, cli, model):
    rc = cli("generate", "--model", model, "--suite", _suite(tmp_path), "--runs-dir", tmp_path / "r")
    _one_line_exit_2(rc, "is not a valid Hugging Face hub id")
    assert not (tmp_path / "r").exists()


def test_an_operating_system_error_no_command_expected_is_one_line(cli, monkeypatch):
    import maxbench.benchmark.commands.suites

    def refused(args):
        raise PermissionError(13, "Permission denied", "/some/where")

    monkeypatch.setattr(maxbench.benchmark.commands.suites, "cmd_suites", refused)
    _one_line_exit_2(cli("suites"), "cannot use /some/where: permission denied")


def test_run_directory_names_are_those_earlier_versions_gave():
    # Resuming an existing run, and the README's examples, depend on these names staying put.
    from maxbench.benchmark.commands.options import lineup_run_id, run_id

    assert lineup_run_id(None, "default", "food-reviews") == "default-food-reviews"
    assert run_id(None, "food-reviews", "smollm2-135m/softmax/top_p=0.9") == (
        "food_reviews-smollm2_135m_softmax_top_p=0.9"
    )
