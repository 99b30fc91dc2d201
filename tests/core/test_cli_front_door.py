"""The front door's manners: ``maxbench --version`` and ``maxbench.__version__``, a closed pipe ending
the command quietly, help and messages that point at what an installed maxbench has."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

import maxbench
from maxbench.errors import MaxbenchError


def test_version_is_the_installed_distributions(cli, capsys):
    assert maxbench.__version__ == metadata.version("maxbench")
    with pytest.raises(SystemExit) as info:
        cli("--version")
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"maxbench {maxbench.__version__}"


def test_a_closed_pipe_ends_the_command_quietly():
    """``maxbench suites --json | head``: the reader is gone before the command writes."""
    p = subprocess.Popen(
        [sys.executable, "-m", "maxbench", "suites", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p.stdout.close()  # the command is still importing: its first write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == ""


def test_serve_help_points_at_the_docs_not_a_file_the_wheel_lacks(cli, capsys):
    with pytest.raises(SystemExit):
        cli("serve", "--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "human_eval/README.md" not in out and "docs/human-evaluation.md" in out


def test_offline_advice_names_the_hf_command(monkeypatch):
    from huggingface_hub import constants

    from maxbench.systems.models import check_model_reachable

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(MaxbenchError) as info:
        check_model_reachable("nobody-here/no-such-model-49")
    assert "hf download nobody-here/no-such-model-49 --local-dir DIR" in str(info.value)
    assert "huggingface-cli" not in str(info.value)
