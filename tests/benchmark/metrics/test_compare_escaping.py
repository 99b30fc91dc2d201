"""``compare``'s Markdown table escapes system and metric names as the leaderboard does (one escaping,
``maxbench.document``'s): a name holding a backtick and a pipe stays one cell of one code span."""

from __future__ import annotations

from maxbench.benchmark.metrics.compare import compare_markdown
from maxbench.document import Cell, Section, Table, render_markdown

EVIL = "tiny-random+peft(path=/tmp/a`b|c)/softmax"
SCORE = {"value_a": 1.0, "value_b": 0.5, "difference": 0.5, "ci_low": 0.1, "ci_high": 0.9, "p_value": 0.01}


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of each table row, split as GFM does: at every '|' not escaped by a backslash."""
    import re

    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows]


def test_a_system_name_with_a_backtick_and_a_pipe_stays_one_code_span_in_one_cell():
    doc = {
        "level": 0.95,
        "pairs": [{"system_a": EVIL, "system_b": "tiny-random/softmax", "scores": {"r|ep": SCORE | {"n_prompts": 4}}}],
    }
    md = compare_markdown(doc)
    header, _, row = table_rows(md)
    assert len(row) == len(header) == 9  # the pipe did not split the row
    assert row[0] == "``tiny-random+peft(path=/tmp/a`b\\|c)/softmax``"  # a fence longer than the backtick inside
    assert row[2] == "r\\|ep"


def test_compare_and_the_leaderboard_write_a_system_name_the_same_way():
    leaderboard_cell = render_markdown([Section("", tables=[Table(("system",), ((Cell(EVIL, code=True),),))])])
    doc = {"level": 0.95, "pairs": [{"system_a": EVIL, "system_b": EVIL, "scores": {"rep": SCORE | {"n_prompts": 4}}}]}
    assert table_rows(compare_markdown(doc))[2][0] == table_rows(leaderboard_cell)[2][0]
