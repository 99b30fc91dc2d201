"""The example plugin (examples/maxbench-entmax): 1.5-entmax from an installed distribution, found
through its `maxbench.layers` entry point, runs through a lineup, the leaderboard, a study rated
through the rating app, its report and the explorer as a built-in layer does, and the run, the study
and the report record the distribution as the layer's code."""

from __future__ import annotations

import importlib.util
import json
import select
import shutil
import subprocess
import sys
import sysconfig
from functools import partial
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.plugin_study import (
    STUDY_OPTIONS,
    assert_rated_against_the_baseline,
    in_process,
    rate_every_page,
    report_and_view,
    study_slug,
)

EXAMPLE = ROOT / "examples" / "maxbench-entmax"

#: ``maxbench``'s own entry (``maxbench.cli.main``) serving one command per line of its stdin (a JSON
#: object: cwd and argv) with one line on the protocol descriptor (exit status, stdout, stderr): the
#: commands of this module share one process of the environment, so torch, transformers and the rest
#: are imported once, not per command. File descriptor 1 is pointed at stderr, so that nothing a
#: library prints past ``sys.stdout`` can break a reply.
_SERVE = """
import contextlib, io, json, os, sys
protocol = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
from maxbench.cli import main
for line in sys.stdin:
    request = json.loads(line)
    os.chdir(request["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(request["argv"])
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else 2
    protocol.write(json.dumps([rc, out.getvalue(), err.getvalue()]) + "\\n")
    protocol.flush()
"""


def _site(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    """A fresh environment with the example installed from its source (its entry point registered),
    borrowing this environment's packages, maxbench's editable install included, through .pth files."""
    if importlib.util.find_spec("entmax") is None:  # found, not imported: that would import torch here
        pytest.skip("the example plugin needs the entmax package")
    root = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    site, ours = Path(_site(python)), Path(sysconfig.get_path("purelib"))
    # processed in name order: the borrowed path first, then the editable finder that needs it
    (site / "___borrowed.pth").write_text(f"{ours}\n")
    for pth in ours.glob("__editable__*maxbench*.pth"):
        shutil.copy2(pth, site / pth.name)
    src = root / "maxbench-entmax"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index"]
    proc = subprocess.run(
        [*cmd, "--no-build-isolation", "--quiet", str(src)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return root / "venv" / "bin"


@pytest.fixture(scope="module")
def maxbench_in_env(env, tmp_path_factory):
    """``maxbench_in_env(cwd, *argv) -> (exit status, stdout, stderr)``: a ``maxbench`` command run in
    the environment, by its one process serving this module (``_SERVE``)."""
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [str(env / "python"), "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )

    def maxbench(cwd: Path, *argv):
        proc.stdin.write(json.dumps({"cwd": str(cwd), "argv": [str(a) for a in argv]}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 600)
        line = proc.stdout.readline() if ready else ""
        assert line, f"the environment's maxbench did not answer {argv[:2]}:\n{log.read_text()[-4000:]}"
        rc, out, err = json.loads(line)
        return rc, out, err

    yield maxbench
    # every command has answered, its files are written: nothing is lost by not waiting for torch's exit
    proc.kill()
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()


def test_the_entry_point_is_listed_with_its_distribution(maxbench_in_env, tmp_path):
    rc, out, err = maxbench_in_env(tmp_path, "plugins")
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.split()[:1] == ["entmax"])  # the name, not a prefix
    assert "maxbench-entmax 0.1.0" in line


def test_the_example_runs_through_a_lineup_the_leaderboard_a_study_and_its_report(maxbench_in_env, tmp_path):
    rows = [
        {"id": f"p{i}", "prompt": f"Review number {i}: the soup was", "reference": f"It was hot {i}."} for i in range(4)
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "four"\nfile = "p.jsonl"\n')
    systems = [
        "tiny-random/softmax/top_p=0.9,max_new_tokens=8",
        "tiny-random/entmax(alpha=1.5)/top_p=0.9,max_new_tokens=8",
    ]
    (tmp_path / "lineup.toml").write_text(
        'name = "entmax-example"\nsuite = "s.toml"\nsamples = 1\nseed = 7\nbatch_size = 4\n'
        f'baseline = "{systems[0]}"\nmetrics = ["distinct", "uniq"]\nsystems = {json.dumps(systems)}\n'
    )
    rc, _, err = maxbench_in_env(
        tmp_path,
        "run",
        "--lineup",
        "lineup.toml",
        "--suite",
        "s.toml",
        "--runs-dir",
        "runs",
        "--out",
        "board",
        "--no-progress",
        "--threads",
        "1",
        "--workers",
        "1",  # generated in this process: worker processes would each load torch and the model again
        "--n-resamples",
        "20",
    )
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    code = manifest["systems"][systems[1]]["code"]["layer"]
    assert code["source"] == "entry-point" and code["distribution"] == "maxbench-entmax" and code["version"] == "0.1.0"
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "entmax(alpha=1.5)" in board and "maxbench-entmax 0.1.0" in board
    texts = [json.loads(ln) for ln in (run / "generations.jsonl").read_text().splitlines()]
    assert {r["system"] for r in texts} == set(systems) and all(isinstance(r["text"], str) for r in texts)
    db = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    rc, out, err = maxbench_in_env(
        tmp_path,
        "study",
        "create",
        run,
        *STUDY_OPTIONS,
        "--items-per-system",
        "2",
        "--db",
        db,
        "--links-out",
        tmp_path / "links.txt",
    )
    assert rc == 0, err

    # rated through the rating app (this process), then reported against softmax with the distribution as its
    # code, and viewed, in the environment
    assert rate_every_page(db, tmp_path / "links.txt") == 4
    in_env = in_process(partial(maxbench_in_env, tmp_path))  # each command in the environment's process
    md, doc, explorer = report_and_view(in_env, tmp_path, run, study_slug(out), db)
    assert_rated_against_the_baseline(md, doc, explorer, systems[0], systems[1], code)
