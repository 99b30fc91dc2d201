"""The command line: --help everywhere, one-line errors with exit 2 for bad input."""

import argparse
import os
import subprocess
import sys

import pytest

from maxbench.cli import build_parser
from tests.support.cli import assert_one_line_exit_2


def _subcommand_paths(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommand_paths(sub, prefix + (name,))


def test_every_subcommand_has_help(capsys):
    paths = list(_subcommand_paths(build_parser()))
    assert {("generate",), ("suites",), ("assets",)} <= set(paths)
    for path in paths:
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([*path, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "usage: maxbench " + " ".join(path) in out.replace("\n", " ").replace("  ", " ") or "usage:" in out


def test_python_dash_m_benchmark_help():
    proc = subprocess.run([sys.executable, "-m", "maxbench", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "generate" in proc.stdout


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate", "--suite", "no-such-suite", "--model", "tiny-random"], "unknown suite 'no-such-suite'"),
        (["generate", "--suite", "smoke", "--layer", "nosuchlayer", "--model", "tiny-random"], "unknown output layer"),
        (
            ["generate", "--suite", "smoke", "--decoding", "top_q=3", "--model", "tiny-random"],
            "unknown decoding setting",
        ),
        (["generate", "--suite", "smoke", "--model", "tiny-random", "--shard", "3/2"], "--shard"),
        (["generate", "--suite", "smoke", "--model", "tiny-random", "--threads", "0"], "--threads"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, tmp_path, argv, words):
    rc, out, err = cli(*argv, "--runs-dir", tmp_path)
    assert rc == 2
    assert err.startswith("maxbench: error: ") and err.count("\n") == 1, err
    assert words in err
    assert "Traceback" not in err


def test_unknown_model_offline_says_what_to_do(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")  # read by huggingface_hub at import: needs a fresh process
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "maxbench",
            "generate",
            "--suite",
            "smoke",
            "--model",
            "no-org/no-such-model",
            "--runs-dir",
            str(tmp_path),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot load model 'no-org/no-such-model'" in proc.stderr and "local-dir" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing half-made


def test_subprocess_error_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "maxbench", "generate", "--suite", str(tmp_path / "x.toml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("maxbench: error: unknown suite") and "Traceback" not in proc.stderr


def test_an_operating_system_error_no_command_expected_is_one_line(cli, monkeypatch):
    import maxbench.benchmark.commands.suites

    def refused(args):
        raise PermissionError(13, "Permission denied", "/some/where")

    monkeypatch.setattr(maxbench.benchmark.commands.suites, "cmd_suites", refused)
    assert_one_line_exit_2(cli("suites"), "cannot use /some/where: permission denied")
