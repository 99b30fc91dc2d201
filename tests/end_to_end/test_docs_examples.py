"""The documentation's examples run: every command of the README's quick start, in order, and every
Python block of docs/api.md and docs/plugins.md (with plugins.md's files and commands).

A command runs as the README writes it, except where a rule of ``SUBSTITUTIONS`` applies: the tiny
random model in place of SmolLM2 where a command would take minutes on two cores, the built-in
lineups on the four prompts of ``smoke``, the study's name, and ``serve``, which is started, rated
through and stopped. Each rule says what it changes and why; a README command that no rule expects
and that fails, fails the test, and so does a rule that no longer matches anything (the README
changed under it).
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("no_plugins")

TINY = "tiny-random"
NEW_TOKENS = 16
#: layers whose heads are trained on the fitting corpus before decoding ('lineup')
TRAINED = ("kerbs", "posg", "ft-softmax")

#: every way the test departs from the documents, and why; the keys name the rules in the code below
SUBSTITUTIONS = {
    "model": "smollm2-135m -> tiny-random in every system string and --model, and --model tiny-random where "
    "a command takes the default model (SmolLM2): SmolLM2 costs about a minute a command on two cores, "
    "the tiny random model seconds through the same code; a whole system string (in a lineup or "
    "study create) also gets max_new_tokens=16, as graphmax's paper solver takes seconds a token",
    "evaluator": "--evaluator tiny-random for score and run: ppl's default evaluator is SmolLM2",
    "lineup": "run --lineup NAME runs a copy of benchmark/lineups/NAME.toml (default.toml without --lineup) "
    "with the model substituted, suite = 'smoke', without the layers whose heads are trained first (KerBS, "
    "POSG: minutes of training, and KerBS's 1024 senses exceed the tiny model's 257 tokens; "
    "tests/systems/layers runs both on the tiny model), in one process (--workers 1): the built-in lineups "
    "decode 96 prompts a system",
    "run folder": "results/runs/default-food-reviews -> results/runs/default-smoke: the default lineup's copy "
    "runs on smoke",
    "items": "--items-per-system 50 -> 4: smoke has 4 prompts",
    "study": "STUDY -> the name study create printed",
    "serve": "serve is started as a process on a free port (not 8000), every page of the study is rated "
    "through it by scripted annotators (so that export and report have ratings), then it is stopped",
    "api": "docs/api.md's SmolLM2 block: the model substituted, evaluator='tiny-random' and "
    "reference_ppl=False (the tiny model's 512 positions cannot hold smoke's prompt and reference); "
    "results/runs/smol-smoke-copy (a copy of the run 'scored on another machine') is made by copying",
}


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block of a Markdown file, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M)]


def quick_start() -> list[list[str]]:
    """The README's quick-start commands, each as its argv after ``maxbench``."""
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    block = re.search(r"^```bash\n(.*?)^```", section, re.S | re.M).group(1)
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[0] == "maxbench", line
            commands.append(words[1:])
    return commands


def tiny_system(word: str) -> str:
    """A system string (or any argument) with the tiny model and 16 new tokens ('model')."""
    word = word.replace("smollm2-135m", TINY)
    if re.fullmatch(rf"{TINY}/[^/]+/[^/]+", word):
        word += f",max_new_tokens={NEW_TOKENS}"
    return word


def tiny_lineup(name: str, folder: Path) -> Path:
    """The built-in lineup ``name`` with the tiny model, on smoke, without heads to train ('lineup')."""
    spec = tomllib.loads((ROOT / "benchmark" / "lineups" / f"{name}.toml").read_text())
    systems = []
    for entry in spec["systems"]:
        if isinstance(entry, str):
            if parse_layer(entry) in TRAINED:
                continue
            systems.append(tiny_system(entry))
        else:
            systems.append({**entry, "system": tiny_system(entry["system"])})
    spec |= {"suite": "smoke", "systems": systems, "baseline": tiny_system(spec["baseline"])}
    lines = [f"{k} = {toml_value(v)}" for k, v in spec.items() if k != "systems"]
    lines.append("systems = [" + ", ".join(toml_value(e) for e in systems) + "]")
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def parse_layer(system: str) -> str:
    return system.split("/")[1].split("(")[0]


def toml_value(v) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v).lower() if isinstance(v, bool) else repr(v)


class Substituted:
    """The rules of ``SUBSTITUTIONS`` applied to one README command; ``used`` collects the rules that applied."""

    def __init__(self, lineups: Path):
        self.lineups = lineups
        self.used: set[str] = set()
        self.study: str | None = None

    def __call__(self, argv: list[str]) -> list[str]:
        out = []
        for word in argv:
            if "smollm2-135m" in word:
                word = tiny_system(word)
                self.used.add("model")
            if "results/runs/default-food-reviews" in word:
                word = word.replace("default-food-reviews", "default-smoke")
                self.used.add("run folder")
            if word == "STUDY":
                assert self.study, "a command names STUDY before study create made one"
                word = self.study
                self.used.add("study")
            out.append(word)
        if out[0] == "generate" and "--model" not in out and "--system" not in out:
            out += ["--model", TINY]
            self.used.add("model")
        if out[0] in ("score", "run"):
            out += ["--evaluator", TINY]
            self.used.add("evaluator")
        if out[0] == "run":
            name = out[out.index("--lineup") + 1] if "--lineup" in out else "default"
            if name != "smoke-sweep":
                out = [w for w in out if w not in ("--lineup", name)]
                out += ["--lineup", str(tiny_lineup(name, self.lineups)), "--workers", "1"]
            else:
                out = [w.replace("smoke-sweep", str(tiny_lineup(name, self.lineups))) for w in out]
                out += ["--workers", "1"]
            self.used.add("lineup")
        if out[:2] == ["study", "create"]:
            i = out.index("--items-per-system")
            out[i + 1] = "4"
            self.used.add("items")
        if out[0] in ("generate", "run", "score"):
            out += ["--threads", "1"]
        return out


def rate_through(base_url: str, links: list[str], rubric: str) -> int:
    """Every page of every link rated through the served app by scripted annotators; the pages rated."""
    from maxbench.human_eval.studies.rubrics import load_rubric
    from maxbench.human_eval.testing.participants import ScriptedAnnotator

    answer = load_rubric(rubric).comprehension_check().answer
    rated = 0
    for link in links:
        annotator = ScriptedAnnotator(base_url, link, answer)
        path = annotator.start()
        while path:
            path = annotator.rate_page(path, lambda page, field: 1 + hash((page, field)) % 5)
        rated += len(annotator.acks)
        annotator.close()
    return rated


def serve(argv: list[str], cwd: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """``maxbench serve`` as the README gives it, on a free port ('serve'); waits until it answers."""
    from maxbench.human_eval.testing.participants import free_port

    port = free_port()
    argv = [str(port) if w == "8000" else w for w in argv]
    process = subprocess.Popen(
        [sys.executable, "-m", "maxbench", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/")
            if conn.getresponse().status == 200:
                conn.close()
                return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    pytest.fail(f"maxbench serve did not answer on port {port}")


def stop(process: subprocess.Popen) -> None:
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture
def docs_dir(tmp_path, monkeypatch):
    """A fresh working folder, with the ratings database in it (the models and corpora stay in the cache)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MAXBENCH_DB_URL", f"sqlite:///{tmp_path / 'ratings.sqlite3'}")
    monkeypatch.setenv("MAXBENCH_SECRET_KEY", "docs-examples")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


def test_every_command_of_the_readme_quick_start_runs(docs_dir, cli):
    commands = quick_start()
    lineups = docs_dir / "lineups"
    lineups.mkdir()
    sub = Substituted(lineups)
    served = None
    links: list[str] = []
    spent: list[str] = []
    try:
        for readme_argv in commands:
            t0 = time.perf_counter()
            argv = sub(readme_argv)
            if argv[0] == "serve":
                served = serve(argv, docs_dir, dict(os.environ))
                sub.used.add("serve")
                rated = rate_through(served[1], links, "graphmax")
                assert rated >= 8, rated  # 2 systems x 4 items, each page rated by 3 annotators in turn
                spent.append(f"{time.perf_counter() - t0:6.1f} s  maxbench {shlex.join(readme_argv)}")
                continue
            rc, out, err = cli(*argv)
            assert rc == 0, f"maxbench {shlex.join(readme_argv)}\n(ran: maxbench {shlex.join(argv)})\n{err[-3000:]}"
            if argv[:2] == ["study", "create"]:
                sub.study = re.search(r"^study: (\S+)$", out, re.M).group(1)
                links = re.findall(r"http://127\.0\.0\.1:8000/a/[^\s)]+", out)
                assert links, out
            spent.append(f"{time.perf_counter() - t0:6.1f} s  maxbench {shlex.join(readme_argv)[:80]}")
    finally:
        print("\n".join(spent))
        if served:
            stop(served[0])
    assert sub.used == set(SUBSTITUTIONS) - {"api"}, "a rule matches no README command: update SUBSTITUTIONS"
    # what the commands promise to write
    assert (docs_dir / "results" / "runs" / "try-graphmax" / "scores.json").is_file()
    assert (docs_dir / "results" / "smoke-sweep" / "frontier.md").is_file()
    assert (docs_dir / "results" / "smoke-sweep" / "plots" / "frontier-rouge-l-f-distinct-2-corpus.png").is_file()
    assert (docs_dir / "explorer" / "index.html").is_file() and (docs_dir / "ratings.csv").stat().st_size > 0
    assert (docs_dir / "results" / "reports" / sub.study / "report.md").is_file()


def test_every_python_block_of_docs_api_runs(docs_dir, capsys):
    blocks = [body for info, body in fenced_blocks(ROOT / "docs" / "api.md") if info == "python"]
    assert len(blocks) == 2
    tiny, smol = blocks
    namespace: dict = {}
    exec(compile(tiny, "docs/api.md (tiny-random)", "exec"), namespace)
    assert namespace["run"].scores is not None
    # 'api': the SmolLM2 block with the tiny model, its evaluator and no reference log-probabilities
    assert smol.count('suite="smoke",') == 2
    smol = smol.replace("smollm2-135m", TINY).replace(
        'suite="smoke",', f'suite="smoke", evaluator="{TINY}", reference_ppl=False,'
    )
    pre, post = smol.split("other = maxbench.load_run", 1)
    exec(compile(pre, "docs/api.md (SmolLM2)", "exec"), namespace)
    assert "maxbench: warning: not applicable (n/a): mauve needs at least 20" in capsys.readouterr().err
    shutil.copytree(docs_dir / "results" / "runs" / "smol-smoke", docs_dir / "results" / "runs" / "smol-smoke-copy")
    exec(compile("other = maxbench.load_run" + post, "docs/api.md (SmolLM2, compare)", "exec"), namespace)
    # the default metrics on smoke: MAUVE is n/a with its reason, the run is scored
    scores = namespace["run"].scores["systems"][f"{TINY}/softmax/top_p=0.9"]["scores"]
    assert scores["mauve"]["value"] is None and "left out of the default metrics" in scores["mauve"]["reason"]
    assert namespace["doc"]["pairs"][0]["scores"]["rep"]["difference"] == 0.0  # the same texts


def test_every_block_of_docs_plugins_runs(docs_dir, cli):
    """Each Python or TOML block that names its file on its first line (``# my_metrics.py``) is written
    there, the JSONL block to the file the suite names, and every ``maxbench`` command runs as written."""
    blocks = fenced_blocks(ROOT / "docs" / "plugins.md")
    written, commands = [], []
    for info, body in blocks:
        first = body.splitlines()[0]
        name = first[2:].strip() if first.startswith("# ") else ""
        if info in ("python", "toml") and re.fullmatch(r"[\w.-]+\.(py|toml)", name):
            (docs_dir / name).write_text(body)
            written.append(name)
        elif info == "python":
            pytest.fail(f"a Python block of docs/plugins.md names no file: {first}")
        elif info == "jsonl":
            suite = tomllib.loads((docs_dir / "my-suite.toml").read_text())
            (docs_dir / suite["file"]).write_text(body)
        commands += [shlex.split(line, comments=True)[1:] for line in body.splitlines() if line.startswith("maxbench ")]
    assert {"my_layers.py", "my_metrics.py", "my-suite.toml"} <= set(written)
    assert len(commands) >= 4
    for argv in commands:
        rc, _, err = cli(*argv)
        assert rc == 0, f"maxbench {shlex.join(argv)}\n{err[-3000:]}"
    scores = (docs_dir / "results" / "runs" / "mine" / "scores.json").read_text()
    assert '"mean-words"' in scores and (docs_dir / "mine-board" / "leaderboard.md").is_file()
