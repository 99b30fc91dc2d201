"""``maxbench view`` with a study: the export records the run and each rated text's hash, and a
study of other texts or another run is refused in one line."""

import hashlib
import json
import shutil

import pytest

from tests.support.cli import assert_one_line_exit_2
from tests.support.explorer_fixtures import make_scored_run, make_study_export
from tests.support.runs import score_args


def _gen_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "generations.jsonl").read_text().splitlines()]


def test_the_explorer_export_records_each_rated_texts_hash_and_run(studied):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    texts = {(g["prompt_id"], g.get("sample", 0), g["system"]): g["text"] for g in _gen_rows(run_dir)}
    assert doc["ratings"]
    for r in doc["ratings"]:
        assert r["run_id"] == run_id
        text = texts[(r["prompt_id"], r["sample"], r["system"])]
        assert r["text_sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_view_refuses_a_study_whose_texts_the_run_no_longer_holds(cli, studied, tmp_path):
    root, run_dir, study = studied
    doc = json.loads(study.read_text())
    # the run regenerated under its name after the study: one rated text is not the run's any more
    work = tmp_path / "runs" / run_dir.name
    shutil.copytree(run_dir, work)
    rows = _gen_rows(work)
    rated = doc["ratings"][0]
    for g in rows:
        if (g["prompt_id"], g.get("sample", 0), g["system"]) == (rated["prompt_id"], rated["sample"], rated["system"]):
            g["text"] = g["text"] + " and a new ending"
            g["pieces"] = None
    (work / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in rows))
    rc, _, err = cli(*score_args(work))  # scored again: only the study's texts are stale
    assert rc == 0, err
    err = assert_one_line_exit_2(cli("view", work, "--study", study, "--out", tmp_path / "o1"))
    assert f"'{rated['system']}'" in err and f"'{rated['prompt_id']}'" in err and "sha256" in err, err
    assert not (tmp_path / "o1").exists()
    # the study's own run: every text matches, no warning
    rc, _, err = cli("view", run_dir, "--study", study, "--out", tmp_path / "o2")
    assert rc == 0 and "warning" not in err, err


def test_a_row_of_another_run_is_refused(cli, studied, tmp_path):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    first = doc["ratings"][0] | {"run_id": "another-run"}
    (tmp_path / "rows.json").write_text(json.dumps(doc | {"ratings": [first] + doc["ratings"][1:]}))
    err = assert_one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "rows.json", "--out", tmp_path / "o"))
    assert "another-run" in err and f"'{first['system']}'" in err and f"'{first['prompt_id']}'" in err, err


def test_an_export_from_before_the_hashes_opens_with_the_run_check_and_a_warning(cli, studied, tmp_path):
    _, run_dir, study = studied
    doc = json.loads(study.read_text())
    old = [{k: v for k, v in r.items() if k not in ("text_sha256", "run_id")} for r in doc["ratings"]]
    (tmp_path / "old.json").write_text(json.dumps(doc | {"ratings": old}))
    rc, _, err = cli("view", run_dir, "--study", tmp_path / "old.json", "--out", tmp_path / "o")
    assert rc == 0, err
    assert "maxbench: warning:" in err and "no text hashes" in err and "export it again" in err, err
    index = (tmp_path / "o" / "index.html").read_text()
    assert "no text hashes" in index
    # the run check still holds for such an export
    (tmp_path / "other.json").write_text(json.dumps(doc | {"ratings": old, "run_id": "someone-elses"}))
    err = assert_one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "other.json", "--out", tmp_path / "o3"))
    assert "someone-elses" in err


# ---------------------------------------------------------------- a study of another run
@pytest.fixture(scope="module")
def studied(tmp_path_factory):
    root = tmp_path_factory.mktemp("study41")
    from maxbench.cli import main

    run_dir = make_scored_run(root)
    assert main([str(a) for a in score_args(run_dir)]) == 0  # the fixture edits a text after scoring
    return root, run_dir, make_study_export(root, run_dir)


def test_view_refuses_a_study_of_another_run(cli, studied, tmp_path):
    root, run_dir, study = studied
    doc = json.loads(study.read_text())
    own = doc["run_id"]
    other = doc | {"run_id": "someone-elses-run"}  # same systems, same prompt ids: only the run differs
    (tmp_path / "other.json").write_text(json.dumps(other))
    err = assert_one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "other.json", "--out", tmp_path / "o1"))
    assert "someone-elses-run" in err and own in err, err
    assert not (tmp_path / "o1" / "index.html").exists()
    # the run regenerated under the same name: the export's rated text is not the run's text
    rated = doc["ratings"][0]
    (tmp_path / "texts.json").write_text(
        json.dumps(doc | {"ratings": [rated | {"text": "a text this run never held"}] + doc["ratings"][1:]})
    )
    err = assert_one_line_exit_2(cli("view", run_dir, "--study", tmp_path / "texts.json", "--out", tmp_path / "o2"))
    assert rated["system"] in err and rated["prompt_id"] in err and "sha256" in err, err
    # the study's own run and texts still join
    texts = [r | {"text_sha256": None} for r in doc["ratings"]]
    (tmp_path / "same.json").write_text(json.dumps(doc | {"ratings": texts}))
    rc, _, err = cli("view", run_dir, "--study", tmp_path / "same.json", "--out", tmp_path / "o3")
    assert rc == 0, err
