"""A plugin's origin covers the code it runs: an ``--include`` file's helper modules (outside the
standard library, site-packages and maxbench), and an editable distribution's whole package; a resume
after either changed is refused, as docs/plugins.md promises."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from maxbench import plugins
from maxbench.errors import MaxbenchError
from maxbench.registry import Registry, describe_origin

LAYER = """
import maxbench
from maxbench.systems.layers.base import OutputLayer
from scaling_help import factor


class Scaled(OutputLayer):
    name = "scaled"

    def scores(self, logits, hidden):
        return logits * factor()


maxbench.register_layer(Scaled)
"""


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _generate(cli, tmp_path, plugin):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was"} for i in range(2)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "two"\nfile = "p.jsonl"\n')
    return cli(
        "generate", "--model", "tiny-random", "--suite", tmp_path / "s.toml", "--decoding", "greedy,max_new_tokens=3",
        "--layer", "scaled", "--include", plugin, "--runs-dir", tmp_path / "runs", "--run-id", "r",
        "--no-progress", "--threads", "1",
    )  # fmt: skip


def _new_process():
    """What a new process would see: the helper imported afresh, the file included again."""
    sys.modules.pop("scaling_help", None)
    plugins.forget()


def test_an_included_layer_whose_helper_module_changed_is_refused_on_resume(cli, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "scaling_help.py").write_text("def factor():\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(lib))
    plugin = tmp_path / "scaled.py"
    plugin.write_text(textwrap.dedent(LAYER))
    monkeypatch.delitem(sys.modules, "scaling_help", raising=False)
    rc, _, err = _generate(cli, tmp_path, plugin)
    assert rc == 0, err
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    (code,) = [s["code"]["layer"] for s in manifest["systems"].values()]
    assert list(code["helpers"]) == [str((lib / "scaling_help.py").resolve())]

    _new_process()
    assert _generate(cli, tmp_path, plugin)[0] == 0  # nothing changed: it resumes

    (lib / "scaling_help.py").write_text("def factor():\n    return 2.0\n")
    _new_process()
    rc, _, err = _generate(cli, tmp_path, plugin)
    assert rc == 2 and err.count("\n") == 1 and "must not be mixed" in err and "helper module" in err
    sys.modules.pop("scaling_help", None)


def test_a_file_without_helpers_keeps_the_origin_it_had(tmp_path):
    plugin = tmp_path / "plain.py"
    plugin.write_text(textwrap.dedent(LAYER.replace("from scaling_help import factor\n", "import math\n")))
    plugins.include(plugin)
    from maxbench.systems.system_strings import LAYERS

    assert set(LAYERS.origin("scaled")) == {"source", "path", "sha256"}


def _editable(tmp_path, monkeypatch, editable=True):
    site, src = tmp_path / "site", tmp_path / "src"
    (src / "acme_ed").mkdir(parents=True)
    (src / "acme_ed" / "__init__.py").write_text("")
    (src / "acme_ed" / "layers.py").write_text("from acme_ed.util import k\n\nclass Scaled:\n    pass\n")
    (src / "acme_ed" / "util.py").write_text("k = 1\n")
    info = site / "acme_ed-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-ed\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[maxbench.test-editable]\nscaled = acme_ed.layers:Scaled\n")
    if editable:
        (info / "direct_url.json").write_text(json.dumps({"url": src.as_uri(), "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(src))
    return src


def test_an_editable_distribution_s_origin_is_its_code_and_changes_with_it(tmp_path, monkeypatch):
    src = _editable(tmp_path, monkeypatch)
    first = Registry("output layer", {}, group="maxbench.test-editable").origin("scaled")
    assert first["editable"] is True and len(first["sha256"]) == 64
    assert "(editable, code sha256" in describe_origin(first)
    (src / "acme_ed" / "util.py").write_text("k = 2\n")  # same version, other code
    second = Registry("output layer", {}, group="maxbench.test-editable").origin("scaled")
    assert second["version"] == first["version"] and second != first


def test_a_released_distribution_s_origin_is_its_name_and_version(tmp_path, monkeypatch):
    _editable(tmp_path, monkeypatch, editable=False)
    origin = Registry("output layer", {}, group="maxbench.test-editable").origin("scaled")
    assert origin == {"source": "entry-point", "distribution": "acme-ed", "version": "0.1"}


def test_resume_with_an_edited_editable_layer_is_refused(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from maxbench.rundir import check_code

    old = {"source": "entry-point", "distribution": "acme-ed", "version": "0.1", "editable": True, "sha256": "a" * 64}
    new = old | {"sha256": "b" * 64}
    system = SimpleNamespace(name="tiny-random/scaled/greedy", code=lambda: {"layer": new})
    plan = SimpleNamespace(systems=[system], run_dir=tmp_path)
    manifest = {"systems": {system.name: {"code": {"layer": old}}}}
    with pytest.raises(MaxbenchError, match="must not be mixed"):
        check_code(plan, manifest)
