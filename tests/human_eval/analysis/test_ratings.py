"""Reading a ratings file: another delimiter and missing columns named."""

import pytest

from maxbench.errors import MaxbenchError
from tests.support.ratings import RATINGS_HEADER


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_ratings_csv_with_another_delimiter_says_so(tmp_path, delimiter):
    from maxbench.human_eval.analysis.ratings import load_ratings

    f = tmp_path / "ratings.csv"
    f.write_text(
        delimiter.join(RATINGS_HEADER) + "\n" + delimiter.join(["s", "p1", "a", "r1", "fluency", "3,5"]) + "\n"
    )
    with pytest.raises(MaxbenchError) as err:
        load_ratings(f)
    msg = str(err.value)
    assert "seems to use" in msg and "as its delimiter" in msg and "save it with commas" in msg
    assert ("';'" if delimiter == ";" else "tab") in msg


def test_a_comma_csv_lacking_columns_still_names_them(tmp_path):
    from maxbench.human_eval.analysis.ratings import load_ratings

    f = tmp_path / "ratings.csv"
    f.write_text("study,item,system,annotator,value\ns,p1,a,r1,3\n")
    with pytest.raises(MaxbenchError, match="lacks required column.*criterion") as err:
        load_ratings(f)
    assert "delimiter" not in str(err.value)
