"""The row rule and the readers of a run's rows (``maxbench.rundir.rows``)."""

import pytest

from maxbench.errors import MaxbenchError
from maxbench.rundir import GENERATIONS, read_generations, row_problem, write_generations
from tests.support.rundir import row as _row


@pytest.mark.parametrize(
    "row,problem",
    [
        ([1, 2], "is not a JSON object"),
        ({"system": "s", "prompt_id": "p", "text": "t"}, "lacks field 'reference'"),
        (_row("s", "p", text=3), "has a non-string 'text' (int)"),
        (_row("s", "p", prompt=None), "has a non-string 'prompt' (NoneType)"),
        (_row("s", "p", sample=-1), "has a 'sample' that is not a whole number >= 0 (-1)"),
        (_row("s", "p", sample=True), "has a 'sample' that is not a whole number >= 0 (true)"),
    ],
)
def test_a_row_is_refused_for_what_makes_it_no_row(row, problem):
    assert row_problem(row) == problem


def test_a_row_without_prompt_or_sample_is_a_row():
    assert row_problem({"system": "s", "prompt_id": "p", "text": "t", "reference": ""}) is None


def test_read_generations_refuses_a_missing_file_an_empty_one_and_a_key_twice(tmp_path):
    with pytest.raises(MaxbenchError, match="is not a run directory"):
        read_generations(tmp_path / "none")
    with pytest.raises(MaxbenchError, match=f"has no {GENERATIONS}; generate first"):
        read_generations(tmp_path)
    assert read_generations(tmp_path, missing_ok=True) == []
    (tmp_path / GENERATIONS).write_text("\n")
    with pytest.raises(MaxbenchError, match="holds no generations"):
        read_generations(tmp_path)
    write_generations(tmp_path, [_row("s", "p"), _row("s", "p", text="other")])
    with pytest.raises(MaxbenchError, match="lines 1 and 2 hold two different rows for system 's', prompt 'p'"):
        read_generations(tmp_path)


def test_read_generations_ignores_a_line_cut_by_a_crash_and_numbers_rows(tmp_path):
    write_generations(tmp_path, [_row("s", "p"), _row("s", "q")])
    with open(tmp_path / GENERATIONS, "a") as f:
        f.write('{"system": "s", "prompt_id": "r", "te')
    assert read_generations(tmp_path, numbered=True) == [(1, _row("s", "p")), (2, _row("s", "q"))]
