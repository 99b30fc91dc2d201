"""Opening the ratings database: concurrent first starts, missing files, the write gate."""

import multiprocessing
import sys
import threading

import pytest
from sqlalchemy import func, select, update

from maxbench.errors import MaxbenchError
from maxbench.human_eval.store.db import (
    DatabaseBusy,
    WriteGate,
    dispose_engines,
    engine_for,
    session_for,
    write_transaction,
)
from maxbench.human_eval.store.models import Study
from maxbench.human_eval.testing.participants import free_port
from tests.support.cli import assert_one_line_exit_2


def _open_new_database(url, barrier, results):
    barrier.wait()
    try:
        with session_for(url, create=True) as s:
            results.put(s.scalar(select(func.count(Study.id))))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(repr(exc))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_starting_together_on_a_new_database(tmp_path, backend, request):
    """gunicorn workers each run create_app(): the first creates the tables, none fails."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'new' / 'ratings.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_cluster").new_database()
    # Forked from a fresh single-threaded server, as gunicorn forks workers from its master:
    # a plain fork here would copy this process's background threads' locks mid-use.
    ctx = multiprocessing.get_context("forkserver")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_new_database, args=(url, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [results.get(timeout=5) for _ in procs] == [0, 0, 0, 0]
    dispose_engines()


def test_readers_never_create_a_database(tmp_path):
    with pytest.raises(MaxbenchError, match="no rating database"):
        session_for(f"sqlite:///{tmp_path / 'none.sqlite3'}")
    assert not (tmp_path / "none.sqlite3").exists()
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    with pytest.raises(MaxbenchError, match="no rating tables"):
        session_for(f"sqlite:///{empty}")
    with pytest.raises(MaxbenchError, match="not a valid SQLAlchemy URL"):
        session_for("not a url")


def test_sqlite_runs_wal_with_full_sync(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    engine = engine_for(url, create=True)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    dispose_engines()


def test_write_gate_serialises_writers_and_times_out(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    engine_for(url, create=True)
    with session_for(url) as s:
        s.add(
            Study(
                slug="s",
                title="t",
                rubric={},
                consent_text="c",
                admin_token_hash="h",
                run_dir="/r",
                run_id="r",
                design={},
            )
        )
        s.commit()

    # Read-modify-write from many threads: with BEGIN IMMEDIATE under the gate, none is lost.
    def bump():
        with session_for(url) as s:
            for _ in range(10):
                with write_transaction(s):
                    title = s.scalar(select(Study.title))
                    s.execute(update(Study).values(title=title + "x"))
                    s.commit()

    threads = [threading.Thread(target=bump) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with session_for(url) as s:
        assert s.scalar(select(Study.title)) == "t" + "x" * 60
    gate = WriteGate(engine_for(url), tmp_path / "r.sqlite3", timeout_s=0.1)
    with gate.held():
        other = WriteGate(engine_for(url), tmp_path / "r.sqlite3", timeout_s=0.1)  # another "process"
        with pytest.raises(DatabaseBusy, match="busy"):
            with other.held():
                pass
    dispose_engines()


def test_wal_is_checkpointed_in_the_background(tmp_path):
    """Commits never checkpoint (wal_autocheckpoint=0); the gate's thread copies them into
    the database file soon after, so a copy of the main file alone holds the write."""
    import shutil
    import sqlite3
    import time

    from maxbench.human_eval.store.db import WriteGate

    url = f"sqlite:///{tmp_path / 'c.sqlite3'}"
    engine_for(url, create=True)
    with engine_for(url).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    with session_for(url) as s, write_transaction(s):
        s.add(
            Study(
                slug="ckpt",
                title="t",
                rubric={},
                consent_text="c",
                admin_token_hash="h",
                run_dir="/r",
                run_id="r",
                design={},
            )
        )
        s.commit()

    def slugs_in_main_file():
        shutil.copy(tmp_path / "c.sqlite3", tmp_path / "copy.sqlite3")  # without the -wal file
        con = sqlite3.connect(tmp_path / "copy.sqlite3")
        try:
            return [r[0] for r in con.execute("SELECT slug FROM study")]
        except sqlite3.OperationalError:  # not even the tables are in the main file yet
            return []
        finally:
            con.close()

    deadline = time.monotonic() + 5 * WriteGate.CHECKPOINT_INTERVAL_S
    while "ckpt" not in slugs_in_main_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert slugs_in_main_file() == ["ckpt"]
    dispose_engines()


@pytest.mark.parametrize("driver", ["postgresql", "postgresql+psycopg"])
def test_postgresql_url_without_psycopg_names_the_postgres_extra(cli, monkeypatch, driver):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # no fallback driver either
    url = f"{driver}://rater:secret@127.0.0.1:{free_port()}/ratings"
    rc, out, err = cli("study", "list", "--db", url)
    assert_one_line_exit_2(
        (rc, "", err), "needs the 'postgres' extra (psycopg is not installed): pip install 'maxbench[postgres]'"
    )
    assert "secret" not in err and out == ""
