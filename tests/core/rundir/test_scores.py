"""A run's scores file (``maxbench.rundir.scores``): the typed ``ScoresFile``, its shape check and its
writer."""

import json

import pytest

from maxbench.errors import MaxbenchError
from maxbench.rundir import SCORES, ScoresFile, read_scores, write_generations, write_scores
from tests.support.rundir import row as _row
from tests.support.rundir import scores_doc as _scores_doc


def test_scores_file_gives_back_the_document_it_was_read_from(tmp_path):
    write_generations(tmp_path, [_row("s", "p")])
    doc = _scores_doc(tmp_path, ["s"]) | {"comparisons": {"baseline": "s", "systems": {}}, "note": "kept"}
    (tmp_path / SCORES).write_text(json.dumps(doc))
    scores = read_scores(tmp_path)
    assert isinstance(scores, ScoresFile) and scores.comparisons == {"baseline": "s", "systems": {}}
    assert scores.to_dict() == doc and list(scores.to_dict()) == list(doc)
    assert scores.stale() is None


@pytest.mark.parametrize(
    "doc,problem",
    [
        ({"systems": []}, "'systems' is a list, expected an object of system -> entry"),
        ({"systems": {"s": {"scores": {"rep": 1}}}}, "systems['s']['scores']['rep'] is a number"),
        ({"systems": {}, "metrics": []}, "'metrics' is a list, expected an object"),
        ({"run_id": "x"}, "has no 'systems' table of scores"),
    ],
)
def test_a_scores_file_of_the_wrong_shape_is_refused_with_what_to_run(tmp_path, doc, problem):
    (tmp_path / SCORES).write_text(json.dumps(doc))
    with pytest.raises(MaxbenchError) as exc:
        read_scores(tmp_path)
    assert problem in str(exc.value) and f"rescore the run (maxbench score {tmp_path})" in str(exc.value)


def test_write_scores_keeps_the_file_when_only_its_time_would_change(tmp_path):
    write_generations(tmp_path, [_row("s", "p")])
    doc = _scores_doc(tmp_path, ["s"])
    write_scores(tmp_path, doc)
    before = (tmp_path / SCORES).read_bytes()
    again = write_scores(tmp_path, doc | {"created": "2027-01-01T00:00:00Z"})
    assert again["created"] == doc["created"] and (tmp_path / SCORES).read_bytes() == before
    write_scores(tmp_path, doc | {"run_id": "other"})
    assert read_scores(tmp_path).run_id == "other"
