"""Helpers that drive the rating app from outside: a small run directory, the real server
as a separate process, and scripted annotators speaking HTTP to it.

The durability test, the browser test and benchmarks/rating_load.py use these, so the
load benchmark and the tests exercise exactly the same client path.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from maxbench.rundir import write_generations, write_manifest

ROOT = Path(__file__).resolve().parents[2]  # the repository: scripts/, and the working folder of a served app


def write_run(
    run_dir: Path, systems: list[str], n_prompts: int, text_for=None, prompt_for=None, reference_for=None
) -> Path:
    """A results/runs/<id>-like directory with generations.jsonl in the foundation's format."""
    reference_for = reference_for or (lambda i: "")
    run_dir.mkdir(parents=True, exist_ok=True)
    text_for = text_for or (lambda s, i: f"Continuation number {i} written by one of the systems.")
    prompt_for = prompt_for or (lambda i: f"Prompt {i}: the food here was")
    rows = [
        {
            "system": s,
            "prompt_id": f"food-{i:04d}",
            "sample": 0,
            "seed": 1000 + i,
            "prompt": prompt_for(i),
            "reference": reference_for(i),
            "text": text_for(s, i),
            "n_tokens": 12,
            "token_ids": [],
            "finish": "length",
            "stats": {},
        }
        for s in systems
        for i in range(n_prompts)
    ]
    write_generations(run_dir, rows)
    write_manifest(run_dir, {"run_id": run_dir.name, "systems": {s: {} for s in systems}})
    return run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill_hard(self) -> None:
        """kill -9 the master and its workers (one process group), as a crash would."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill_hard()


def start_server(
    db_url: str,
    port: int | None = None,
    workers: int = 2,
    threads: int = 4,
    env: dict | None = None,
    log_path: Path | None = None,
    timeout: float = 60,
    access_log: bool = False,
    stdout_path: Path | None = None,
) -> Server:
    """``maxbench serve`` (gunicorn) on 127.0.0.1, in its own process group; waits until it answers.

    stderr goes to ``log_path``; stdout too, unless ``stdout_path`` names a file of its own.
    """
    port = port or free_port()
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    err = open(log_path, "ab") if log_path else subprocess.DEVNULL
    out = open(stdout_path, "ab") if stdout_path else err
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "maxbench.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--db",
            db_url,
            *(["--access-log"] if access_log else []),
        ],
        cwd=ROOT,
        env=full_env,
        stdout=out,
        stderr=err,
        start_new_session=True,
    )
    server = Server(process, port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}; see {log_path}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/")
            if conn.getresponse().status == 200:
                conn.close()
                return server
        except OSError:
            time.sleep(0.1)
    server.kill_hard()
    raise RuntimeError(f"server did not answer on port {port} within {timeout} s")


_CSRF = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')
_FIELD = re.compile(r'name="(c_[a-z0-9_]+)"')
_ATTENTION = re.compile(r"select (-?\d+)")
_POSITION = re.compile(r"Page (\d+) of (\d+)")


class ProtocolError(Exception):
    pass


@dataclass
class Ack:
    """A rating the server acknowledged (303 after the POST)."""

    public_id: str
    position: int
    values: dict[str, int]
    attention: bool
    latency_s: float  # the POST that stored it
    page_latency_s: float = 0.0  # the GET that showed the page


@dataclass
class ScriptedAnnotator:
    """One annotator over one keep-alive HTTP connection, with the session cookie by hand."""

    base_url: str
    link: str
    check_answer: int
    timeout: float = 30
    cookie: str | None = None
    acks: list[Ack] = field(default_factory=list)
    page: str = ""  # the HTML of the page being rated, for a ``choose`` that reads the text
    _conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            parts = urlsplit(self.base_url)
            self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, str, str]:
        headers = {}
        body = None
        if self.cookie:
            headers["Cookie"] = self.cookie
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        for attempt in (0, 1):
            reused = self._conn is not None
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                text = response.read().decode("utf-8")
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # the server closed an idle keep-alive connection (gunicorn after its keepalive
                # seconds) before reading this request: send it once more on a new connection,
                # as browsers and urllib3 do
                self.close()
                if not reused or attempt:
                    raise
            except (OSError, http.client.HTTPException):
                self.close()
                raise
        set_cookie = response.getheader("Set-Cookie")
        if set_cookie:
            self.cookie = set_cookie.split(";", 1)[0]
        location = response.getheader("Location") or ""
        return response.status, urlsplit(location).path if location else "", text

    def _get_following(self, path: str) -> tuple[str, str]:
        for _ in range(5):
            status, location, text = self.request("GET", path)
            if status in (301, 302, 303):
                path = location
                continue
            if status != 200:
                raise ProtocolError(f"GET {path} answered {status}")
            return path, text
        raise ProtocolError("too many redirects")

    def start(self) -> str | None:
        """Open the link, consent, pass the comprehension check; returns the first page still to
        rate, or None when there is none (an annotator who finished before, e.g. before a kill)."""
        path, text = self._get_following(urlsplit(self.link).path)
        if path == "/welcome":
            status, location, _ = self.request("POST", "/welcome", {"csrf_token": _token(text), "consent": "y"})
            path, text = self._get_following(location)
        if path == "/check":
            status, location, _ = self.request(
                "POST", "/check", {"csrf_token": _token(text), "answer": str(self.check_answer)}
            )
            if status != 303:
                raise ProtocolError(f"comprehension check answered {status}")
            path, _ = self._get_following(location)
        return path if path.startswith("/item/") else None

    def rate_page(self, path: str, choose, think_s: float = 0.0, reads_page: bool = False) -> str | None:
        """Rate the page at ``path``; returns the next page path (None when finished). ``choose(path,
        field)`` gives each value; with ``reads_page``, ``choose(page_html, fields)`` gives them all."""
        t0 = time.perf_counter()
        status, location, text = self.request("GET", path)
        page_latency = time.perf_counter() - t0
        if status == 303:
            return location if location.startswith("/item/") else None
        if status != 200:
            raise ProtocolError(f"GET {path} answered {status}")
        self.page = text
        fields = list(dict.fromkeys(_FIELD.findall(text)))
        attention = _ATTENTION.search(text)
        position = int(_POSITION.search(text).group(1))
        if attention:
            values = {f: int(attention.group(1)) for f in fields}
        elif reads_page:
            values = choose(text, fields)
        else:
            values = {f: choose(path, f) for f in fields}
        if think_s:
            time.sleep(think_s)
        form = {"csrf_token": _token(text), **{f: str(v) for f, v in values.items()}}
        t0 = time.perf_counter()
        status, location, _ = self.request("POST", path, form)
        latency = time.perf_counter() - t0
        if status != 303:
            raise ProtocolError(f"POST {path} answered {status}")
        public_id = path.rsplit("/", 1)[1]
        self.acks.append(
            Ack(public_id, position, {f[2:]: v for f, v in values.items()}, bool(attention), latency, page_latency)
        )
        return location if location.startswith("/item/") else None


def axe_serious(page, axe, seen: list[str]) -> list[tuple[str, str, str]]:
    """axe-core (an ``axe_playwright_python`` ``Axe``) on a Playwright page: its serious or
    critical violations as (page, rule, impact); the page's URL is appended to ``seen``."""
    results = axe.run(page)
    seen.append(page.url)
    return [
        (urlsplit(page.url).path.split("/")[1], v["id"], v["impact"])
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def _token(html: str) -> str:
    match = _CSRF.search(html)
    if not match:
        raise ProtocolError("no CSRF token in the page")
    return match.group(1)


SYSTEMS = ["tiny/softmax/top_p=0.9", "tiny/graphmax(lam=1.0)/top_p=0.9"]


def make_study(
    tmp_path: Path,
    rubric: str = "graphmax",
    systems: list[str] | None = None,
    n_prompts: int = 6,
    items_per_system: int = 4,
    raters_per_item: int = 2,
    annotators: int | None = None,
    text_for=None,
    prompt_for=None,
    db_url: str | None = None,
    reference_for=None,
    **options,
):
    """A run directory and a study over it: (db_url, CreatedStudy, run_dir); ``options``: the
    other fields of :class:`~maxbench.human_eval.studies.options.StudyOptions`.

    The database is ``db_url`` (e.g. a fresh PostgreSQL database from
    ``maxbench.human_eval.testing.postgres``), else a fresh SQLite file in ``tmp_path``."""
    from maxbench.human_eval.store.db import session_for
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    systems = systems or SYSTEMS
    run_dir = write_run(tmp_path / "runs" / "run-2026-test", systems, n_prompts, text_for, prompt_for, reference_for)
    url = db_url or f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    with session_for(url, create=True) as session:
        created = create_study(
            session,
            run_dir,
            load_rubric(rubric),
            StudyOptions(
                systems=systems,
                items_per_system=items_per_system,
                raters_per_item=raters_per_item,
                annotators=annotators,
                **options,
            ),
        )
    return url, created, run_dir


def enter_with_client(client, created, index: int, check_answer: int) -> str:
    """Flask test client: open annotator ``index``'s link, consent, pass the check; the first page's path."""
    client.get(urlsplit(created.links("http://x")[index][1]).path)
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(check_answer)})
    return client.get("/next").location


def csrf_token(html: str) -> str:
    return _token(html)
