"""A read-only SQLite URI (``sqlite:///file:PATH?mode=ro&uri=true``) names the file PATH: it is read,
and protected from an output as the plain URL's file is."""

from __future__ import annotations

import hashlib

import pytest

from maxbench.human_eval.store.db import database_inputs
from maxbench.human_eval.testing.participants import SYSTEMS, write_run


@pytest.fixture
def study(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "runs" / "r1", SYSTEMS, 5)
    db = tmp_path / "R.sqlite3"
    argv = ["study", "create", run, "--items-per-system", 2, "--raters-per-item", 1, "--rubric", "fluency"]
    rc, out, err = cli(*argv, "--db", f"sqlite:///{db}")
    assert rc == 0, err
    return db, out.split("study: ")[1].split()[0]


@pytest.mark.parametrize("spelling", ["absolute", "relative"])
def test_a_read_only_uri_opens_the_database_it_names(cli, study, spelling):
    db, slug = study
    path = db if spelling == "absolute" else db.name
    uri = f"sqlite:///file:{path}?mode=ro&uri=true"
    rc, out, err = cli("study", "list", "--db", uri)
    assert rc == 0 and out.startswith(slug), err
    rc, out, err = cli("study", "export", slug, "--db", uri)
    assert rc == 0 and out.startswith("study,item,system"), err


def test_a_read_only_uri_of_a_missing_file_names_the_file(cli, tmp_path):
    rc, _, err = cli("study", "list", "--db", f"sqlite:///file:{tmp_path / 'none.sqlite3'}?mode=ro&uri=true")
    assert rc == 2 and f"no rating database at {tmp_path / 'none.sqlite3'}" in err


def test_an_output_over_the_file_of_a_uri_is_refused(cli, study):
    db, slug = study
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    uri = f"sqlite:///file:{db}?mode=ro&uri=true"
    assert database_inputs(uri)[0][0] == db
    rc, _, err = cli("study", "participants", slug, "--db", uri, "--out", db)
    assert rc == 2 and "is the ratings database" in err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
