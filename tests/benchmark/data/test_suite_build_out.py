"""The suite builder's ``--out`` goes through the shared output checks: a file where the folder belongs,
and a folder where a built suite's files would land on the corpus cache they are read from, are each one
line, exit 2, before any corpus is read or any file written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maxbench.benchmark.data.suite_build import build_suites
from maxbench.errors import MaxbenchError


def test_out_an_existing_file_is_refused_in_one_line_exit_2(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("keep me\n")
    p = subprocess.run(
        [sys.executable, "-m", "maxbench.benchmark.data.suite_build", "build", "food-reviews", "--out", str(target)],
        capture_output=True,
        text=True,
        env={"MAXBENCH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"--out {target}: {target} is a file; give a folder" in p.stderr
    assert target.read_text() == "keep me\n"


def test_out_the_corpus_cache_is_refused_before_the_corpus_is_overwritten(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MAXBENCH_HOME", str(home))
    corpora = home / "corpora"
    corpora.mkdir(parents=True)
    (corpora / "food-reviews.jsonl").write_text('{"text": "a cached text", "split": "test"}\n')
    before = (corpora / "food-reviews.jsonl").read_bytes()
    with pytest.raises(MaxbenchError, match=r"corpus food-reviews's texts .*an input of this command") as info:
        build_suites(["food-reviews"], corpora)
    assert "\n" not in str(info.value)
    assert (corpora / "food-reviews.jsonl").read_bytes() == before
