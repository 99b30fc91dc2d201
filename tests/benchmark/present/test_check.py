"""``maxbench leaderboard RUN... --check DIR``: the contract between a leaderboard made again and the
committed one (docs/reproducibility.md): the same texts, every number within its relative tolerance.

First on constructed pairs of leaderboards (``leaderboard_check.compare``), then end to end on a small
scored run (tiny-random) against its own rendered folder, with one number or one text changed."""

import csv
import io
import json
import re
import shutil

import pytest

from maxbench.benchmark.present import check as lc
from tests.support.explorer_fixtures import make_scored_run

HEADER = "system,bleu-4,bleu-4_ci_low,bleu-4_ci_high,bleu-4_p_vs_baseline,ref-eps-ppl,ref-eps-ppl_ci_low,ref-eps-ppl_ci_high,ref-eps-ppl_p_vs_baseline\n"
ROWS = {
    "m/softmax/top_p=0.9": [
        "0.0709471271312",
        "0.0621408279321",
        "0.0794155616503",
        "",
        "43.8072912223",
        "39.66",
        "48.46",
        "",
    ],
    "m/graphmax(lam=1.0,solver=paper)/top_p=0.9": [
        "0.00943",
        "0.00861",
        "0.0103",
        "0.001998001998",
        "4488.01",
        "4212.90",
        "4781.26",
        "0.001998001998",
    ],
}
TEXTS = {("m/softmax/top_p=0.9", "p0"): " watery.", ("m/graphmax(lam=1.0,solver=paper)/top_p=0.9", "p0"): " thin"}


def board(**changes) -> str:
    """The constructed leaderboard.csv, with ``changes`` {(row index, column index): cell}."""
    lines = [HEADER]
    for i, (system, cells) in enumerate(ROWS.items()):
        cells = [changes.get(f"c{i}_{j}", cell) for j, cell in enumerate(cells)]
        lines.append(",".join([f'"{system}"' if "," in system else system, *cells]) + "\n")
    return "".join(lines)


def test_the_same_leaderboard_and_texts_hold_the_contract():
    result = lc.compare(board(), board(), dict(TEXTS), dict(TEXTS))
    assert result.holds and result.numbers == [] and result.cells == 14
    assert result.fresh_hash == result.committed_hash


def test_numbers_within_their_tolerance_hold_it_and_are_listed_largest_first():
    # bleu-4 in its 7th digit (1.4e-7), graphmax paper's ref-eps-ppl in its 5th (2.9e-5: as an Intel Xeon moved it)
    fresh = board(c0_0="0.0709471371312", c1_4="4488.14")
    result = lc.compare(fresh, board(), TEXTS, TEXTS)
    assert result.holds, result.problems
    assert [(r[0], r[1]) for r in result.numbers] == [
        ("m/graphmax(lam=1.0,solver=paper)/top_p=0.9", "ref-eps-ppl"),
        ("m/softmax/top_p=0.9", "bleu-4"),
    ]
    assert result.numbers[0][4] == pytest.approx(0.13 / 4488.14)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"c0_0": "0.0709571271312"},
            r"bleu-4: 0.0709571271312 here, 0.0709471271312 committed \(relative 0.00014 > 1e-05\)",
        ),
        ({"c1_4": "4493.0"}, r"ref-eps-ppl: 4493.0 here, 4488.01 committed \(relative 0.0011 > 0.001\)"),
        ({"c1_3": "0.003996003996"}, r"bleu-4_p_vs_baseline"),  # a p-value is held to the numbers' tolerance
        ({"c0_3": "0.5"}, r"bleu-4_p_vs_baseline: 0.5 here, \(empty\) committed"),  # the baseline has no test
        ({"c1_6": "nan"}, r"ref-eps-ppl_ci_high: nan here, 4781.26 committed"),
    ],
)
def test_one_number_outside_its_tolerance_breaks_the_contract(change, message):
    result = lc.compare(board(**change), board(), TEXTS, TEXTS)
    assert not result.holds
    assert len(result.problems) == 1 and re.search(message, result.problems[0]), result.problems


def test_a_changed_or_missing_text_breaks_it_though_every_number_agrees():
    changed = {**TEXTS, ("m/softmax/top_p=0.9", "p0"): " watery!"}
    result = lc.compare(board(), board(), changed, TEXTS)
    assert not result.holds and result.fresh_hash != result.committed_hash
    assert result.problems == ["1 text(s) differ (of 2 systems): m/softmax/top_p=0.9 on prompt p0"]
    missing = {k: v for k, v in TEXTS.items() if k[0] == "m/softmax/top_p=0.9"}
    assert "1 text(s) are not in the runs" in lc.compare(board(), board(), missing, TEXTS).problems[0]


def test_a_missing_system_or_column_breaks_it():
    one_row = "".join(board().splitlines(keepends=True)[:2])
    assert "1 system(s) only in the committed" in lc.compare(one_row, board(), TEXTS, TEXTS).problems[0]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(line[:5] for line in csv.reader(io.StringIO(board())))
    fewer = buf.getvalue()
    assert "4 column(s) only in the committed" in lc.compare(fewer, board(), TEXTS, TEXTS).problems[0]


@pytest.mark.parametrize(
    "column, tol", [("ppl", 1e-3), ("ref-eps-ppl_ci_low", 1e-3), ("ref-ppl", 1e-3), ("ppl_p_vs_baseline", 1e-5)]
)
def test_the_perplexities_take_the_looser_tolerance(column, tol):
    assert lc.tolerance(column) == tol
    assert lc.tolerance("self-bleu-4") == lc.tolerance("mauve_ci_low") == 1e-5


# ---- end to end: maxbench leaderboard RUN --check DIR ------------------------------------------


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A scored run and the folder `maxbench run --out` would have written for it (leaderboard and explorer)."""
    from maxbench.cli import main

    root = tmp_path_factory.mktemp("check")
    run = make_scored_run(root)
    out = root / "committed"
    assert main(["leaderboard", str(run), "--out", str(out)]) == 0
    assert main(["view", str(run), "--out", str(out / "explorer")]) == 0
    return run, out


def copy_of(committed, tmp_path):
    shutil.copytree(committed, tmp_path / "c")
    return tmp_path / "c"


def test_a_run_against_its_own_committed_folder_holds_the_contract(committed, cli):
    run, out = committed
    rc, stdout, _ = cli("leaderboard", run, "--check", out)
    assert rc == 0, stdout
    assert "(identical)" in stdout and " 0 differ" in stdout
    assert "the contract holds" in stdout


def test_one_number_moved_past_its_tolerance_exits_1_naming_it(committed, cli, tmp_path):
    run, out = committed
    folder = copy_of(out, tmp_path)
    csv_path = folder / "leaderboard.csv"
    table = list(csv.reader(io.StringIO(csv_path.read_text())))
    j = next(j for j, cell in enumerate(table[1]) if j and cell and float(cell) != 0)  # a score, not 0
    column, value = table[0][j], float(table[1][j])

    def write(cell):
        table[1][j] = cell
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(table)
        csv_path.write_text(buf.getvalue())

    write(f"{value * (1 + 5e-6):.12g}")  # within 1e-5: holds, listed
    rc, stdout, _ = cli("leaderboard", run, "--check", folder)
    assert rc == 0 and f"{column}: " in stdout and " 1 differ" in stdout, stdout
    write(f"{value * (1 + 1e-4):.12g}")  # past it
    rc, stdout, _ = cli("leaderboard", run, "--check", folder)
    assert rc == 1 and "the contract is broken (1 problem(s))" in stdout and f"{column}: " in stdout, stdout
    rc, stdout, _ = cli("leaderboard", run, "--check", folder, "--rtol", "1e-3")
    assert rc == 0, stdout


def test_a_changed_text_exits_1_though_every_number_agrees(committed, cli, tmp_path):
    run, out = committed
    folder = copy_of(out, tmp_path)
    chunk = folder / "explorer" / "data" / "prompts-000.js"
    body = chunk.read_text(encoding="utf-8")
    records = json.loads(body[len("maxbenchChunk(0,") : body.rindex(");")])
    records[2]["texts"][1]["text"] += " (edited)"
    chunk.write_text(f"maxbenchChunk(0,{json.dumps(records)});\n", encoding="utf-8")
    rc, stdout, _ = cli("leaderboard", run, "--check", folder)
    assert rc == 1 and "(different)" in stdout and "1 text(s) differ" in stdout, stdout
    assert records[2]["key"] in stdout


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: (f / "leaderboard.csv").unlink(), "leaderboard.csv does not exist"),
        (lambda f: (f / "leaderboard.csv").write_text("a,b\n1,2\n"), "is not a leaderboard.csv"),
        (lambda f: shutil.rmtree(f / "explorer"), "holds no explorer"),
        (lambda f: (f / "explorer" / "data" / "prompts-000.js").write_text("nonsense"), "prompts-000.js is damaged"),
    ],
)
def test_input_that_cannot_be_compared_is_one_line_and_exit_2(committed, cli, tmp_path, damage, message):
    run, out = committed
    folder = copy_of(out, tmp_path)
    damage(folder)
    rc, stdout, stderr = cli("leaderboard", run, "--check", folder)
    assert rc == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    rc, _, stderr = cli("leaderboard", run, "--check", out, "--rtol", "-1")
    assert rc == 2 and "--rtol must be a relative tolerance" in stderr
    rc, _, stderr = cli("leaderboard", run, "--rtol", "1e-3")
    assert rc == 2 and "go with --check" in stderr
