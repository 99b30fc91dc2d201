"""Files: atomic writes keep the umask's mode and never replace a device or a folder;
MAXBENCH_HOME's problems named with its value."""

import os
import stat
from pathlib import Path

import pytest

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, maxbench_home
from tests.support.files import file_mode


def test_a_home_below_a_file_names_maxbench_home_and_its_value(tmp_path, monkeypatch):
    from maxbench.systems import assets

    (tmp_path / "f").write_text("x")
    home = tmp_path / "f" / "x"
    monkeypatch.setenv("MAXBENCH_HOME", str(home))
    with pytest.raises(MaxbenchError) as err:
        assets.cache_dir(maxbench_home() / "assets")
    msg = str(err.value)
    assert msg.startswith(f"MAXBENCH_HOME={home}: cannot create it")
    assert "set MAXBENCH_HOME to a writable folder or unset it" in msg and "assets" not in msg


def test_a_home_that_is_a_file_is_named(tmp_path, monkeypatch):
    from maxbench.fileio import os_error

    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "f"))
    try:
        (tmp_path / "f" / "hidden").mkdir(parents=True)
    except OSError as exc:
        msg = str(os_error(exc.filename, exc, "use"))
    assert msg.startswith(f"MAXBENCH_HOME={tmp_path / 'f'}: it is a file, not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_a_read_only_home_is_named(tmp_path, monkeypatch):
    from maxbench.systems import assets

    home = tmp_path / "ro"
    home.mkdir()
    home.chmod(0o555)
    monkeypatch.setenv("MAXBENCH_HOME", str(home))
    try:
        with pytest.raises(MaxbenchError, match=r"^MAXBENCH_HOME=.*ro: this user cannot write in it"):
            assets.cache_dir(maxbench_home() / "corpora")
    finally:
        home.chmod(0o755)


def test_a_failure_below_a_usable_home_keeps_its_own_message(tmp_path, monkeypatch):
    from maxbench.fileio import os_error

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    (tmp_path / "assets").write_text("in the way")
    try:
        (tmp_path / "assets" / "x").mkdir(parents=True)
    except OSError as exc:
        msg = str(os_error(exc.filename, exc, "use"))
    assert "MAXBENCH_HOME" not in msg and "assets" in msg


def test_the_cli_names_maxbench_home(tmp_path, cli, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "f" / "home"))
    rc, _, err = cli("assets", "fetch", "wordnet")
    assert rc == 2 and "Traceback" not in err
    assert f"MAXBENCH_HOME={tmp_path / 'f' / 'home'}: cannot create it" in err


# ---------------------------------------------------------------- files others can read
def test_atomic_write_gives_the_mode_the_umask_gives_not_0600(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.json", "{}\n")
        os.umask(0o022)
        atomic_write(tmp_path / "b.json", b"{}\n")
    finally:
        os.umask(old)
    assert file_mode(tmp_path / "a.json") == 0o640 and file_mode(tmp_path / "b.json") == 0o644
    assert (tmp_path / "b.json").read_bytes() == b"{}\n"
    assert [p.name for p in tmp_path.iterdir()] != [] and not list(tmp_path.glob(".*.tmp"))


def test_atomic_write_keeps_an_asked_for_private_mode(tmp_path, umask_022):
    atomic_write(tmp_path / "secret", "k", mode=0o600)
    assert file_mode(tmp_path / "secret") == 0o600


def test_atomic_write_never_replaces_a_device_or_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    for path in (tmp_path / "d", Path("/dev/null")):
        with pytest.raises(MaxbenchError, match="exists and is not a regular file"):
            atomic_write(path, "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and (tmp_path / "d").is_dir()
