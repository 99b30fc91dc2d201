"""maxbench calls transformers in no deprecated form: a FutureWarning (what transformers gives for a
deprecated argument, such as ``past_key_values`` once it was renamed ``cache`` in 5.24) is an error here,
for a whole ``maxbench generate`` of the tiny random model (decoding with its KV cache, and the layers'
log-probabilities of the references). pyproject.toml's range of transformers stops below the version
that deprecates what the decoding loop and the adapters pass; this test fails on a version that
deprecates anything else they use."""

from __future__ import annotations

import json
import warnings

from maxbench.cli import main


def test_a_tiny_random_generate_makes_no_future_warning(tmp_path, capsys):
    argv = ["generate", "--model", "tiny-random", "--suite", "smoke", "--decoding", "top_p=0.9,max_new_tokens=8"]
    argv += ["--runs-dir", str(tmp_path), "--run-id", "r", "--no-progress", "--threads", "1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "FutureWarning" not in err
    rows = [json.loads(line) for line in (tmp_path / "r" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["system"] == "tiny-random/softmax/top_p=0.9,max_new_tokens=8" for r in rows)


def test_the_declared_range_of_transformers_holds_the_version_installed():
    import tomllib

    from packaging.requirements import Requirement
    from transformers import __version__

    from tests.support.paths import ROOT

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [Requirement(d) for d in declared if Requirement(d).name == "transformers"]
    assert spec.specifier.contains(__version__), (spec, __version__)
