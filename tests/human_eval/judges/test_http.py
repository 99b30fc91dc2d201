"""``--judge openai:URL:MODEL``: the HTTP backend against a local OpenAI-shaped server (a real HTTP
server on 127.0.0.1 in a thread, answering as the chat completions API does, or failing as asked).
The test against a real model server is ``test_http_server.py`` (opt-in)."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select

from maxbench.cli import main
from maxbench.errors import MaxbenchError
from maxbench.human_eval.judges import http as backend
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Annotator, Judgment
from tests.support.judges import fluency_study

KEY = "sk-test-5f3a9e1c"
TOP = [("3", 0.4), ("The", 0.3), (" 4", 0.2), ("A", 0.05), ("B", 0.03)]
SPLIT = [("5", 0.4), ("1", 0.3), ("0", 0.2), ("The", 0.1)]  # a model that writes "50" as "5", "0"


class Server:
    def __init__(self):
        self.requests, self.auth, self.active, self.peak = 0, set(), 0, 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                mode = self.path.split("/")[1]
                with outer.lock:
                    outer.requests += 1
                    outer.auth.add(self.headers.get("Authorization"))
                    outer.active += 1
                    outer.peak = max(outer.peak, outer.active)
                    n = outer.requests
                try:
                    time.sleep(0.03)
                    assert body["logprobs"] is True and body["max_tokens"] == 1
                    if mode == "unauthorized":
                        return self.reply(401, b'{"error": "bad key"}')
                    if mode == "flaky" and n <= 2:
                        return self.reply(503, b"busy")
                    if mode == "malformed":
                        return self.reply(200, b"{not json")
                    choice = {"index": 0, "message": {"role": "assistant", "content": "3"}}
                    if mode != "nologprobs":
                        top = [{"token": t, "logprob": math.log(p)} for t, p in (SPLIT if mode == "split" else TOP)]
                        choice["logprobs"] = {
                            "content": [{"token": "3", "logprob": top[0]["logprob"], "top_logprobs": top}]
                        }
                    self.reply(200, json.dumps({"choices": [choice]}).encode())
                finally:
                    self.done()

            def done(self):
                # before the answer leaves: once the client has it, it may send its next request
                if not getattr(self, "counted_out", False):
                    self.counted_out = True
                    with outer.lock:
                        outer.active -= 1

            def reply(self, code, data):
                self.done()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def judge(self, mode):
        return f"openai:http://127.0.0.1:{self.port}/{mode}/v1:fake-model"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_TEST_KEY", KEY)
    monkeypatch.setattr(backend, "BACKOFF_S", 0.01)
    yield fluency_study(tmp_path)
    dispose_engines()


def judge(study, spec, *extra):
    url, slug = study
    return main(["judge", slug, "--judge", spec, "--api-key-env", "MAXBENCH_TEST_KEY", "--db", url, *extra])


def stored(url):
    with session_for(url) as s:
        return s.scalars(select(Judgment)).all()


def test_the_http_judge_reads_top_logprobs_with_bounded_concurrency_and_never_shows_the_key(server, study, capsys):
    assert judge(study, server.judge("ok"), "--concurrency", "2", "--rate", "200") == 0
    out, err = capsys.readouterr()
    rows = stored(study[0])
    assert len(rows) == 6 and server.requests == 6
    for r in rows:  # "3" 0.4 and " 4" 0.2 are labels; "The", "A", "B" are not
        assert r.scoring == "top-logprobs" and r.value == 3
        assert r.label_mass == pytest.approx(0.6)
        assert r.expected == pytest.approx((3 * 0.4 + 4 * 0.2) / 0.6)
    assert 1 <= server.peak <= 2
    assert server.auth == {f"Bearer {KEY}"}
    with session_for(study[0]) as s:
        judge_row = s.scalar(select(Annotator).where(Annotator.kind == "model"))
    assert KEY not in out + err and KEY not in json.dumps(judge_row.judge)
    assert judge_row.judge["decoding"]["method"] == "top-logprobs"


def test_failed_requests_are_retried_with_backoff(server, study):
    assert judge(study, server.judge("flaky"), "--concurrency", "1", "--retries", "3") == 0
    assert len(stored(study[0])) == 6 and server.requests == 8


def test_the_rate_limit_spaces_requests(server, study):
    start = time.monotonic()
    assert judge(study, server.judge("ok"), "--concurrency", "4", "--rate", "20") == 0
    assert time.monotonic() - start >= 5 / 20  # six requests: five gaps of 1/20 s at least


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("nologprobs", "returned no logprobs"),
        ("malformed", "returned malformed JSON"),
        ("unauthorized", "refused the API key"),
        ("down", "cannot get an answer from"),
    ],
)
def test_a_failing_endpoint_is_one_line_and_exit_2(server, study, capsys, mode, needle):
    spec = server.judge(mode)
    if mode == "down":
        server.httpd.shutdown()
        server.httpd.server_close()
    assert judge(study, spec, "--retries", "1") == 2
    out, err = capsys.readouterr()
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert KEY not in out + err
    assert stored(study[0]) == []


def test_a_missing_key_or_endpoint_spelling_is_refused_before_anything(study, capsys, monkeypatch):
    monkeypatch.delenv("MAXBENCH_TEST_KEY")
    assert judge(study, "openai:http://127.0.0.1:9/v1:m") == 2
    assert "MAXBENCH_TEST_KEY is not set" in capsys.readouterr().err
    monkeypatch.setenv("MAXBENCH_TEST_KEY", KEY)
    for spec in ("openai:http://127.0.0.1:8080/v1", "openai:ftp://x/v1:m", "openai:m"):
        assert judge(study, spec) == 2
        assert "write openai:URL:MODEL" in capsys.readouterr().err
    with session_for(study[0]) as s:
        assert s.scalar(select(Annotator).where(Annotator.kind == "model")) is None


def test_labels_the_server_s_model_splits_into_several_tokens_are_refused_never_scored_zero(server, monkeypatch):
    """The slider's labels 0, 10, ..., 100 for a model that splits digits: its top tokens "5" and "1"
    start labels without being one, so reading one token per label would give 10..100 a probability of
    0 (and the expectation near 0): refused in one line instead. A one-token scale is scored as before."""
    monkeypatch.setattr(backend, "BACKOFF_S", 0.01)
    url, model = backend.parse_endpoint(server.judge("split"))
    judge_ = backend.OpenAIJudge(url, model, KEY)
    slider = tuple(str(v) for v in range(0, 101, 10))
    with pytest.raises(MaxbenchError, match=r"splits the rubric's label '10' into several tokens.*token '1'"):
        judge_.score("How good is the text?", slider)
    likert = ("1", "2", "3", "4", "5")
    scored = judge_.score("How good is the text?", likert)  # "5" and "1" are labels here
    assert scored.probabilities == pytest.approx((0.3 / 0.7, 0, 0, 0, 0.4 / 0.7))
