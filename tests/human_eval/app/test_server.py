"""``maxbench serve``: no credential in any log line, the log on stderr, and a server that
cannot start says why in one line (exit 2) instead of a traceback."""

import http.client
import logging
import os
import socket
import sys
from urllib.parse import urlsplit

import pytest

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.logs import redact
from maxbench.human_eval.store.db import dispose_engines
from maxbench.human_eval.testing.participants import free_port, make_study, start_server
from tests.support.cli import assert_one_line_exit_2

TOKEN = "q9Xk2LmN8pQrStUvWxYz01Ab"  # the shape of secrets.token_urlsafe(18)
ADMIN = "adm-Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed"


@pytest.mark.parametrize(
    "line",
    [
        f'127.0.0.1 - - [23/Nov/2026:10:00:00 +0000] "GET /a/{TOKEN} HTTP/1.1" 303 189 "-" "curl"',
        f'"GET /A/{TOKEN}?x=1 HTTP/1.1" 404',
        f'"GET /a%2F{TOKEN} HTTP/1.1" 404',
        f'"GET /welcome HTTP/1.1" 200 5120 "https://rate.example.org/a/{TOKEN}" "Mozilla"',
        f'"GET /admin/login?next=%2Fa%2F{TOKEN}&token={ADMIN} HTTP/1.1" 200',
        f"POST /{ADMIN} HTTP/1.1",
        f"login?key={TOKEN}",
    ],
)
def test_redact_removes_tokens_from_paths_referers_and_query_strings(line):
    out = redact(line)
    assert TOKEN not in out and ADMIN not in out and "[redacted]" in out


def test_redact_keeps_what_is_no_secret():
    line = '"GET /item/Ab3dEf6hIj9kLm2n HTTP/1.1" 200 "-" "Mozilla/5.0" /admin/study/graphmax-20261123-3fa2c1'
    assert redact(line) == line


def test_app_log_lines_carry_no_token(tmp_path, monkeypatch, caplog):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1)
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    token = created.annotator_tokens[0][1]
    import maxbench.human_eval.app.annotator as annotator_views

    def boom(text):
        raise RuntimeError(f"cannot hash {text}")

    monkeypatch.setattr(annotator_views, "hash_token", boom)
    with caplog.at_level(logging.ERROR, logger="maxbench.human_eval"):
        assert app.test_client().get(f"/a/{token}").status_code == 500
    dispose_engines()
    assert "unexpected error on GET /a/[redacted]" in caplog.text
    assert "RuntimeError: cannot hash" in caplog.text  # the trace is kept, without the secret
    assert token not in caplog.text


def test_access_log_goes_to_stderr_without_tokens(tmp_path):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1)
    stderr, stdout = tmp_path / "stderr.log", tmp_path / "stdout.log"
    server = start_server(
        url,
        workers=1,
        threads=2,
        access_log=True,
        log_path=stderr,
        stdout_path=stdout,
        env={"MAXBENCH_HOME": str(tmp_path / "home")},
    )
    link_path = urlsplit(created.links(server.base_url)[0][1]).path
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for path, headers in (
            (link_path, {}),
            (f"{link_path}?utm=abc", {}),
            ("/welcome", {"Referer": server.base_url + link_path}),
            (f"/admin/login?token={created.admin_token}", {}),
        ):
            conn.request("GET", path, headers=headers)
            conn.getresponse().read()
        conn.close()
    finally:
        server.stop()
    dispose_engines()
    err, out = stderr.read_text(), stdout.read_text()
    secrets = [t for _, t in created.annotator_tokens] + [created.admin_token]
    for secret in secrets:
        assert secret not in err and secret not in out
    assert '"GET /a/[redacted] HTTP/1.1" 303' in err  # the access log, on stderr
    assert '"GET /a/[redacted]?utm=[redacted] HTTP/1.1" 303' in err
    assert "/admin/login?token=[redacted]" in err
    assert "GET " not in out  # nothing of the access log on stdout


@pytest.fixture
def serve_cli(cli, tmp_path, monkeypatch):
    """``maxbench serve`` in-process, for arguments that must stop it before gunicorn runs."""
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAXBENCH_DB_URL", f"sqlite:///{tmp_path / 'unused.sqlite3'}")  # restored after the test

    def run(*argv):
        rc, out, err = cli("serve", *argv)
        dispose_engines()
        return rc, out, err

    return run


def test_port_in_use_is_one_line(serve_cli, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rc, _, err = serve_cli("--port", port, "--db", f"sqlite:///{tmp_path / 'r.sqlite3'}")
    assert_one_line_exit_2((rc, "", err), f"port {port} on 127.0.0.1 is already in use")


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--port", "70000"], "--port 70000 is not a TCP port"),
        (["--port", "0"], "--port 0 is not a TCP port"),
        (["--port", "-1"], "--port -1 is not a TCP port"),
        (["--host", "no-such-host.invalid"], "is not an address"),
        (["--workers", "0"], "--workers and --threads must be at least 1"),
    ],
)
def test_bad_address_or_numbers_are_one_line(serve_cli, tmp_path, args, expected):
    if "--port" not in args:
        args = [*args, "--port", str(free_port())]
    rc, _, err = serve_cli(*args, "--db", f"sqlite:///{tmp_path / 'r.sqlite3'}")
    assert_one_line_exit_2((rc, "", err), expected)


def _parent_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    return f"sqlite:///{tmp_path / 'afile' / 'sub' / 'r.sqlite3'}", "afile is a file, not a folder"


def _a_folder(tmp_path):
    return f"sqlite:///{tmp_path}", "is a folder, not a file"


def _a_device(tmp_path):
    return "sqlite:////dev/null", "is not a regular file"


def _a_read_only_system_folder(tmp_path):
    # /sys refuses new files even to root, so this holds whoever runs the tests.
    return "sqlite:////sys/ratings.sqlite3", "cannot create the rating database /sys/ratings.sqlite3"


def _inside_proc(tmp_path):
    return "sqlite:////proc/ratings.sqlite3", "cannot create the rating database /proc/ratings.sqlite3"


def _in_memory(tmp_path):
    return "sqlite://", "in-memory database"


@pytest.mark.parametrize(
    "case", [_parent_is_a_file, _a_folder, _a_device, _a_read_only_system_folder, _inside_proc, _in_memory]
)
def test_database_that_cannot_exist_is_one_line(serve_cli, tmp_path, case):
    db, expected = case(tmp_path)
    rc, _, err = serve_cli("--db", db, "--port", free_port())
    assert_one_line_exit_2((rc, "", err), expected)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder whatever its mode")
def test_unwritable_database_folder_is_one_line(serve_cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        rc, _, err = serve_cli("--db", f"sqlite:///{locked / 'r.sqlite3'}", "--port", free_port())
    finally:
        locked.chmod(0o700)
    assert_one_line_exit_2((rc, "", err), "is not writable")


def test_unusable_secret_key_folder_is_one_line(serve_cli, tmp_path, monkeypatch):
    (tmp_path / "home-file").write_text("x")
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home-file"))
    monkeypatch.delenv("MAXBENCH_SECRET_KEY", raising=False)
    rc, _, err = serve_cli("--db", f"sqlite:///{tmp_path / 'r.sqlite3'}", "--port", free_port())
    assert_one_line_exit_2((rc, "", err), "cannot keep the app's secret key")


def test_bad_busy_timeout_setting_is_one_line(serve_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_DB_BUSY_TIMEOUT_MS", "5s")
    rc, _, err = serve_cli("--db", f"sqlite:///{tmp_path / 'r.sqlite3'}", "--port", free_port())
    assert_one_line_exit_2((rc, "", err), "MAXBENCH_DB_BUSY_TIMEOUT_MS='5s' is not a whole number")


def test_empty_secret_key_file_is_one_line(serve_cli, tmp_path, monkeypatch):
    # An empty key would sign no session: every page would fail with a 500 once serving.
    key = tmp_path / "home" / "human_eval" / "secret_key"
    key.parent.mkdir(parents=True)
    key.write_text("")
    monkeypatch.delenv("MAXBENCH_SECRET_KEY", raising=False)
    rc, _, err = serve_cli("--db", f"sqlite:///{tmp_path / 'r.sqlite3'}", "--port", free_port())
    assert_one_line_exit_2((rc, "", err), f"the secret key file {key} is empty")


def test_serve_without_gunicorn_names_the_server_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gunicorn", None)
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAXBENCH_DB_URL", "sqlite:///unused")  # serve sets it; restored after the test
    db = tmp_path / "r.sqlite3"
    rc, out, err = cli("serve", "--db", f"sqlite:///{db}", "--port", free_port())
    dispose_engines()
    assert_one_line_exit_2(
        (rc, "", err),
        "maxbench serve needs the 'server' extra (gunicorn is not installed): pip install 'maxbench[server]'",
    )
    assert err.startswith("maxbench: error: ") and out == ""
    assert not db.exists()  # said before anything else is checked or made


def test_serve_on_postgresql_without_psycopg_names_the_postgres_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAXBENCH_DB_URL", "sqlite:///unused")  # serve sets it; restored after the test
    rc, _, err = cli("serve", "--db", f"postgresql://rater@127.0.0.1:{free_port()}/ratings", "--port", free_port())
    assert_one_line_exit_2((rc, "", err), "pip install 'maxbench[postgres]'")
