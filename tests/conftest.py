import os
from pathlib import Path

import pytest

import core  # noqa: F401  (pins the CPU arithmetic before any test loads NumPy or torch)

ROOT = Path(__file__).resolve().parents[1]


def run_cli(argv, capsys):
    """Run the maxbench CLI in-process; returns (exit code, stdout, stderr)."""
    from benchmark.cli import main

    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def cli(capsys):
    return lambda *argv: run_cli(argv, capsys)


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded model, loaded once per test session."""
    from systems.models import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def tiny():
    from systems.models import load_model

    return load_model("tiny-random", device="cpu")


@pytest.fixture
def artifacts_dir():
    d = ROOT / os.environ.get("MAXBENCH_TEST_ARTIFACTS", "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def bbc_paragraphs():
    """``bbc_paragraphs(k)``: paragraphs 2-4 (after the headline) of the first k BBC articles of each
    topic (the ``bbc`` asset), real text for the metric tests."""
    from systems.assets import fetch

    def paragraphs(per_topic: int) -> list[str]:
        root = fetch("bbc")
        out = []
        for topic in sorted(p for p in root.iterdir() if p.is_dir()):
            for path in sorted(topic.glob("*.txt"))[:per_topic]:
                try:
                    text = path.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    continue
                out += [p.strip() for p in text.split("\n\n")[1:4] if p.strip()]
        return out

    return paragraphs


@pytest.fixture(scope="session")
def postgres_cluster():
    """One throwaway PostgreSQL server (Debian's, on a private unix socket) per test session."""
    from human_eval.pgcluster import PostgresCluster

    cluster = PostgresCluster().start()
    yield cluster
    from human_eval.db import dispose_engines

    dispose_engines()
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty rating database on each backend the app supports: a SQLite file and a
    PostgreSQL database on the session's throwaway server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    else:
        yield request.getfixturevalue("postgres_cluster").new_database()
    from human_eval.db import dispose_engines

    dispose_engines()
