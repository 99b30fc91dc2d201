"""A plugin's system from `study create` to `report --study` and `view --study` (issue 38): every page
of the study rated through the rating app (Flask's test client, as an annotator's browser would:
the link, consent, the comprehension check, then each page), then the report and the explorer
built from those ratings. Shared by tests/core/test_plugins.py (an --include file) and
tests/end_to_end/test_plugin_example.py (an installed distribution)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from maxbench.document import md_escape

STUDY_OPTIONS = ("--rubric", "fluency", "--raters-per-item", "1", "--annotators", "1", "--attention-rate", "0")


def rate_every_page(db_url: str, links_csv: Path) -> int:
    """Rate each page of each link of ``links_csv`` (``study create --links-out``); returns the pages rated."""
    from maxbench.human_eval.app.factory import create_app
    from maxbench.human_eval.studies.rubrics import load_rubric
    from maxbench.human_eval.testing.participants import csrf_token

    answer = load_rubric("fluency").check.answer
    app = create_app({"DB_URL": db_url, "SECRET_KEY": "t"})
    rated = 0
    with open(links_csv, encoding="utf-8") as f:
        links = [row["link"] for row in csv.DictReader(f)]
    for link in links:
        client = app.test_client()
        client.get(urlsplit(link).path)
        page = client.get("/welcome")
        client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
        page = client.get("/check")
        assert (
            client.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(answer)}).status_code == 303
        )
        path = client.get("/next").location
        while path.startswith("/item/"):
            page = client.get(path)
            assert page.status_code == 200 and 'name="c_fluency"' in page.text
            value = 2 + rated % 3  # some spread, so the tests have something to rank
            r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_fluency": str(value)})
            assert r.status_code == 303, r.text
            rated, path = rated + 1, r.location
        assert path == "/finish"
    return rated


def study_slug(stdout: str) -> str:
    return re.search(r"^study: (\S+)$", stdout, re.M).group(1)


def report_and_view(commands, tmp_path: Path, run: Path, slug: str, db_url: str, *include) -> tuple[str, dict, dict]:
    """`maxbench report --study` and `maxbench view --study` (through `study export --format explorer`) of the
    rated study, run in order by ``commands(list of argv) -> (exit status, stderr)``; returns (report.md,
    report.json, the explorer's leaderboard rows by system)."""
    export = tmp_path / "ratings.json"
    rc, err = commands(
        [
            ["report", "--study", slug, "--db", db_url, "--out", tmp_path / "reports", "--n-boot", "100", *include],
            ["study", "export", slug, "--db", db_url, "--format", "explorer", "--out", export],
            ["view", run, "--study", export, "--out", tmp_path / "explorer", *include],
        ]
    )
    assert rc == 0, err
    folder = tmp_path / "reports" / slug
    md, doc = (folder / "report.md").read_text(), json.loads((folder / "report.json").read_text())
    html = (tmp_path / "explorer" / "index.html").read_text()
    start = html.index(_DATA) + len(_DATA)
    data = json.loads(html[start : html.index("</script>", start)])
    return md, doc, {row["system"]: row for row in data["leaderboard"]["rows"]}


def in_process(cli):
    """``commands`` for ``report_and_view``: each through the ``cli`` fixture, stopping at the first failure."""

    def commands(argvs):
        for argv in argvs:
            rc, _, err = cli(*argv)
            if rc:
                return rc, err
        return 0, ""

    return commands


_DATA = '<script id="maxbench-data" type="application/json">'


def assert_rated_against_the_baseline(
    md: str, doc: dict, explorer: dict, baseline: str, plugin_system: str, origin: dict
) -> None:
    """The plugin's system is in the report, tested against the run's baseline, the provenance names
    its code's origin, and the explorer shows its ratings beside its metrics."""
    assert doc["reference"] == baseline and plugin_system in doc["systems"]
    assert "the run's baseline" in md and md_escape(plugin_system) in md.split("## Tests against the reference")[1]
    (comparison,) = doc["comparisons"]
    assert (comparison["reference"], comparison["other"]) == (baseline, plugin_system)
    assert comparison["primary"] == "wilcoxon" and comparison["design"]["kind"] == "paired"
    assert comparison["mannwhitney"]["n_other"] > 0
    assert doc["code"] == {plugin_system: {"layer": origin}}
    provenance = md.split("## Provenance", 1)[1]
    assert f"code of `{plugin_system}`: " in provenance
    if origin["source"] == "entry-point":
        assert f"layer from distribution {origin['distribution']} {origin['version']}" in provenance
    else:
        assert f"layer from file `{origin['path']}`, sha256 {origin['sha256']}" in provenance
    assert explorer[plugin_system]["cells"]["human:fluency"]["n"] == explorer[baseline]["cells"]["human:fluency"]["n"]
