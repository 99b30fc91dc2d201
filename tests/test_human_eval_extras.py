"""A missing optional dependency is one line and exit 2 naming the extra that installs it:
``maxbench serve`` without gunicorn (the ``server`` extra), a ``postgresql://`` database without
psycopg (the ``postgres`` extra). The packages are hidden by a ``None`` in ``sys.modules``, which
makes their import fail as if they were not installed."""

import sys

import pytest

from maxbench.human_eval.store.db import dispose_engines
from maxbench.human_eval.testing.participants import free_port


def _one_line_exit_2(rc, err, expected):
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err, err


def test_serve_without_gunicorn_names_the_server_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gunicorn", None)
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAXBENCH_DB_URL", "sqlite:///unused")  # serve sets it; restored after the test
    db = tmp_path / "r.sqlite3"
    rc, out, err = cli("serve", "--db", f"sqlite:///{db}", "--port", free_port())
    dispose_engines()
    _one_line_exit_2(
        rc, err, "maxbench serve needs the 'server' extra (gunicorn is not installed): pip install 'maxbench[server]'"
    )
    assert err.startswith("maxbench: error: ") and out == ""
    assert not db.exists()  # said before anything else is checked or made


@pytest.mark.parametrize("driver", ["postgresql", "postgresql+psycopg"])
def test_postgresql_url_without_psycopg_names_the_postgres_extra(cli, monkeypatch, driver):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # no fallback driver either
    url = f"{driver}://rater:secret@127.0.0.1:{free_port()}/ratings"
    rc, out, err = cli("study", "list", "--db", url)
    _one_line_exit_2(rc, err, "needs the 'postgres' extra (psycopg is not installed): pip install 'maxbench[postgres]'")
    assert "secret" not in err and out == ""


def test_serve_on_postgresql_without_psycopg_names_the_postgres_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAXBENCH_DB_URL", "sqlite:///unused")  # serve sets it; restored after the test
    rc, _, err = cli("serve", "--db", f"postgresql://rater@127.0.0.1:{free_port()}/ratings", "--port", free_port())
    _one_line_exit_2(rc, err, "pip install 'maxbench[postgres]'")
