"""Plugins (docs/plugins.md): entry points, --include files and register_* from a session; their
checks before any generation, and the provenance they leave in manifests, score caches and
leaderboards."""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import textwrap

import pytest

import maxbench
from maxbench import plugins
from maxbench.errors import MaxbenchError
from tests.support.plugin_files import UNIQ2
from tests.support.plugin_study import (
    STUDY_OPTIONS,
    assert_rated_against_the_baseline,
    in_process,
    rate_every_page,
    report_and_view,
    study_slug,
)

SOFTMAX2 = '''
import maxbench
from maxbench.systems.layers.base import OutputLayer


class Softmax2(OutputLayer):
    """Softmax again: the logits as they are."""

    name = "softmax2"

    def scores(self, logits, hidden):
        return logits{extra}


maxbench.register_layer(Softmax2)
'''


#: a subclass of a built-in metric that keeps the built-in's score name
UNIQ_SAME_NAME = """
import maxbench
from maxbench.benchmark.metrics.diversity import Uniq


class Uniq3(Uniq):
    name = "uniq3"


maxbench.register_metric(Uniq3)
"""


@pytest.fixture(autouse=True)
def no_plugins():
    plugins.forget()
    yield
    plugins.forget()


def _file(tmp_path, text: str, name: str = "plugin.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _generate(cli, tmp_path, *more):
    rows = [{"id": f"p{i}", "prompt": f"Review number {i}: the soup was", "reference": f"ref {i}"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    return cli(
        "generate",
        "--model",
        "tiny-random",
        "--suite",
        tmp_path / "s.toml",
        "--decoding",
        "top_p=0.9,max_new_tokens=6",
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        "r",
        "--no-progress",
        "--threads",
        "1",
        *more,
    )


def _rows(tmp_path):
    text = (tmp_path / "runs" / "r" / "generations.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_included_softmax_plugin_generates_what_softmax_does_and_is_scored_and_ranked(cli, tmp_path):
    plugin = _file(tmp_path, SOFTMAX2.format(extra=""))
    metric = _file(tmp_path, UNIQ2, "metric.py")
    rc, _, err = _generate(cli, tmp_path, "--layer", "softmax", "--layer", "softmax2", "--include", plugin)
    assert rc == 0, err
    rows = _rows(tmp_path)
    by = {}
    for r in rows:
        by.setdefault(r["system"].split("/")[1], {})[(r["prompt_id"], r["sample"])] = r["text"]
    assert set(by) == {"softmax", "softmax2"} and by["softmax"] == by["softmax2"]
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    code = manifest["systems"]["tiny-random/softmax2/top_p=0.9,max_new_tokens=6"]["code"]
    sha = hashlib.sha256(plugin.read_bytes()).hexdigest()
    assert code["layer"] == {"source": "file", "path": str(plugin.resolve()), "sha256": sha}
    assert (
        manifest["systems"]["tiny-random/softmax/top_p=0.9,max_new_tokens=6"]["code"]["layer"]["source"] == "maxbench"
    )

    run = tmp_path / "runs" / "r"
    rc, _, err = cli("score", run, "--metrics", "uniq,uniq2", "--bootstrap", "0", "--quiet", "--include", metric)
    assert rc == 0, err
    doc = json.loads((run / "scores.json").read_text())
    assert doc["metrics"]["uniq2"]["origin"]["source"] == "file" and "origin" not in doc["metrics"]["uniq"]
    rc, out, err = cli("leaderboard", run, "--out", tmp_path / "board")
    assert rc == 0, err
    board = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "plugins:" in board and "layer softmax2: file" in board and "metric uniq2: file" in board

    # the plugin metric's code changes: its scores are computed again, the built-in's are not
    before = set((run / "score-cache").iterdir())
    metric.write_text(UNIQ2 + "\n# edited\n")
    plugins.forget()
    assert cli("score", run, "--metrics", "uniq,uniq2", "--bootstrap", "0", "--quiet", "--include", metric)[0] == 0
    assert set((run / "score-cache").iterdir()) != before

    # rated in a study through the rating app; the report tests it against softmax and names its file
    db = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    links = tmp_path / "links.csv"
    rc, out, err = cli(
        "study", "create", run, *STUDY_OPTIONS, "--items-per-system", "3", "--db", db, "--links-out", links,
        "--include", plugin,
    )  # fmt: skip
    assert rc == 0, err
    slug = study_slug(out)
    assert rate_every_page(db, links) == 6
    md, doc, explorer = report_and_view(in_process(cli), tmp_path, run, slug, db, "--include", plugin)
    softmax, softmax2 = (f"tiny-random/{layer}/top_p=0.9,max_new_tokens=6" for layer in ("softmax", "softmax2"))
    assert_rated_against_the_baseline(md, doc, explorer, softmax, softmax2, code["layer"])

    # compare computes its metrics again on the texts: the plugin layer's texts need no code, the
    # plugin metric needs its file, as score does
    other = tmp_path / "runs" / "r2"
    shutil.copytree(run, other)
    plugins.forget()
    rc, _, err = cli("compare", run, other, "--bootstrap", "20", "--quiet")
    assert rc == 2 and err.count("\n") == 1 and f"records it from file {metric.resolve()}" in err
    assert f"give --include {metric.resolve()}" in err
    rc, out, err = cli("compare", run, other, "--metrics", "uniq", "--bootstrap", "20", "--quiet")
    assert rc == 0 and f"`{softmax2}`" in out and "plugins:" not in out, err
    result = tmp_path / "compare.json"
    rc, out, err = cli("compare", run, other, "--bootstrap", "20", "--quiet", "--include", metric, "--out", result)
    assert rc == 0, err
    origin = json.loads((run / "scores.json").read_text())["metrics"]["uniq2"]["origin"]
    assert json.loads(result.read_text())["metric_origins"] == {"uniq2": origin}
    assert "plugins: metric uniq2: file" in out and " | uniq | " in out


def test_plugin_metric_giving_a_builtin_score_name_is_one_line(cli, tmp_path):
    rc, _, err = _generate(cli, tmp_path, "--layer", "softmax")
    assert rc == 0, err
    metric = _file(tmp_path, UNIQ_SAME_NAME, "metric3.py")
    run = tmp_path / "runs" / "r"
    rc, _, err = cli("score", run, "--metrics", "uniq,uniq3", "--bootstrap", "0", "--quiet", "--include", metric)
    assert rc == 2 and err.count("\n") == 1
    assert "metrics 'uniq' and 'uniq3' both give a score named 'uniq'" in err
    assert not (run / "scores.json").exists()


def test_plugin_named_as_a_builtin_is_one_line(cli, tmp_path):
    plugin = _file(tmp_path, SOFTMAX2.format(extra="").replace('"softmax2"', '"softmax"'))
    rc, _, err = _generate(cli, tmp_path, "--include", plugin)
    assert rc == 2 and err.count("\n") == 1
    assert "plugin output layer 'softmax'" in err and "collides with the built-in" in err and str(plugin) in err


def test_plugin_file_that_fails_to_import_is_one_line(cli, tmp_path):
    plugin = _file(tmp_path, "import no_such_module_anywhere\n")
    rc, _, err = _generate(cli, tmp_path, "--include", plugin)
    assert rc == 2 and err.count("\n") == 1
    assert f"plugin file {plugin.resolve()} failed to import: ModuleNotFoundError" in err


def test_plugin_that_is_not_an_output_layer_is_one_line(cli, tmp_path):
    plugin = _file(
        tmp_path,
        """
        import maxbench

        class NotALayer:
            name = "odd"

        maxbench.register_layer(NotALayer)
        """,
    )
    rc, _, err = _generate(cli, tmp_path, "--include", plugin)
    assert rc == 2 and err.count("\n") == 1 and "is not a subclass of OutputLayer" in err and str(plugin) in err


def test_plugin_giving_nan_is_refused_before_generation(cli, tmp_path):
    plugin = _file(tmp_path, SOFTMAX2.format(extra=' * float("nan")'))
    rc, _, err = _generate(cli, tmp_path, "--layer", "softmax2", "--include", plugin)
    assert rc == 2 and err.count("\n") == 1
    assert "plugin output layer 'softmax2'" in err and "NaN" in err
    assert not (tmp_path / "runs" / "r").exists()


def test_layer_registered_from_a_session_works_and_records_its_source_hash(tmp_path):
    from maxbench.systems.layers.base import OutputLayer
    from maxbench.systems.system_strings import LAYERS, parse_system

    class Doubled(OutputLayer):
        name = "doubled"

        def scores(self, logits, hidden):
            return 2 * logits

    assert maxbench.register_layer(Doubled) is Doubled
    origin = LAYERS.origin("doubled")
    assert origin == {"source": "session", "sha256": hashlib.sha256(inspect.getsource(Doubled).encode()).hexdigest()}
    assert parse_system("tiny-random/doubled/greedy").build_layer().name == "doubled"
    maxbench.register_layer(Doubled)  # a notebook cell run again
    with pytest.raises(MaxbenchError, match="is not a subclass of OutputLayer"):
        maxbench.register_layer(dict)


def test_origin_of_a_builtin_is_maxbench_and_its_version():
    from importlib import metadata

    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.systems.models import MODELS
    from maxbench.systems.system_strings import LAYERS

    want = {"source": "maxbench", "version": metadata.version("maxbench")}
    assert LAYERS.origin("softmax") == MODELS.origin("tiny-random") == METRICS.origin("uniq") == want


def test_resume_after_the_plugin_file_changed_is_refused(cli, tmp_path):
    plugin = _file(tmp_path, SOFTMAX2.format(extra=""))
    assert _generate(cli, tmp_path, "--layer", "softmax2", "--include", plugin)[0] == 0
    assert _generate(cli, tmp_path, "--layer", "softmax2", "--include", plugin)[0] == 0  # unchanged: resumes
    plugin.write_text(SOFTMAX2.format(extra=" * 1.0"))
    rc, _, err = _generate(cli, tmp_path, "--layer", "softmax2", "--include", plugin)
    assert rc == 2 and err.count("\n") == 1
    assert "system 'tiny-random/softmax2/top_p=0.9,max_new_tokens=6'" in err and "must not be mixed" in err


def test_plugins_command_lists_included_plugins(cli, tmp_path):
    plugin = _file(tmp_path, SOFTMAX2.format(extra=""))
    rc, out, _ = cli("plugins", "--include", plugin)
    assert rc == 0 and "softmax2" in out and f"file {plugin.resolve()}" in out


def test_lineup_includes_files_relative_to_itself(tmp_path):
    from maxbench.benchmark.run.lineup import load_lineup

    _file(tmp_path, SOFTMAX2.format(extra=""), "layers.py")
    lineup = tmp_path / "mine.toml"
    lineup.write_text('include = ["layers.py"]\nsystems = ["tiny-random/softmax2/greedy"]\n')
    assert [s.layer for s in load_lineup(str(lineup)).systems] == ["softmax2"]


def test_entry_point_plugin_colliding_with_a_builtin_is_one_line(monkeypatch):
    from importlib import metadata

    from maxbench.registry import Registry

    class Dist:
        name, version = "acme-layers", "1.2"

    ep = metadata.EntryPoint("softmax", "acme:Softmax", "maxbench.test")
    monkeypatch.setattr(
        metadata, "entry_points", lambda group: [type("E", (), {"name": ep.name, "value": ep.value, "dist": Dist})()]
    )
    reg = Registry("output layer", {"softmax": "x:Y"}, group="maxbench.test")
    with pytest.raises(MaxbenchError, match="plugin output layer 'softmax' from distribution acme-layers 1.2 collides"):
        reg.names()
    ok = Registry("output layer", {"other": "x:Y"}, group="maxbench.test2")
    assert ok.names() == ["other", "softmax"]
    assert ok.origin("softmax") == {"source": "entry-point", "distribution": "acme-layers", "version": "1.2"}


def test_entry_point_plugin_that_fails_to_import_is_one_line(monkeypatch, tmp_path):
    from importlib import metadata

    from maxbench.registry import Registry

    (tmp_path / "broken_acme.py").write_text("raise RuntimeError('the vendored kernel is missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Dist:
        name, version = "acme-layers", "1.2"

    entry = type("E", (), {"name": "acme", "value": "broken_acme:Layer", "dist": Dist})()
    monkeypatch.setattr(metadata, "entry_points", lambda group: [entry])
    reg = Registry("output layer", {"softmax": "x:Y"}, group="maxbench.test3")
    with pytest.raises(
        MaxbenchError, match="plugin output layer 'acme' from distribution acme-layers 1.2 failed to import"
    ) as err:
        reg.get("acme")
    assert "RuntimeError: the vendored kernel is missing" in str(err.value) and "\n" not in str(err.value)
