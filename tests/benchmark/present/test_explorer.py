"""maxbench view: the explorer's data, its escaping, its study join and its refusals."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from maxbench.benchmark.present.explorer import script_json, write_explorer
from maxbench.benchmark.present.explorer.data import quantise
from tests.support.explorer_fixtures import HOSTILE, SYSTEMS, make_scored_run, make_study_export
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("explorer")
    run = make_scored_run(root)
    return root, run, make_study_export(root, run)


def _index(html: str) -> dict:
    start = html.index('<script id="maxbench-data" type="application/json">') + len(
        '<script id="maxbench-data" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_json_for_a_script_element_escapes_what_ends_or_breaks_it():
    text = script_json({"t": HOSTILE})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"t": HOSTILE}


def test_quantised_levels_keep_order_and_mark_unknowns():
    q = quantise([0.0, 0.01, 0.5, 0.99, 1.0, None, float("nan")], 1.0)
    assert (
        q[0] == "0"
        and q[-2:] == ".."
        and len(q) == 7
        and list(q[:5]) == sorted(q[:5], key="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_".index)
    )


def test_run_writes_the_explorer_and_texts_never_enter_as_markup(scored):
    root, run, _ = scored
    html = (root / "out" / "explorer" / "index.html").read_text()
    chunk = (root / "out" / "explorer" / "data" / "prompts-000.js").read_text()
    for page in (html, chunk):
        assert "<script>window" not in page and "<img" not in page and "\u2028" not in page
    assert "innerHTML" not in (root / "out" / "explorer" / "explorer.js").read_text()
    index = _index(html)
    assert index["systems"] == SYSTEMS and len(index["prompts"]) == 8
    board = index["leaderboard"]
    assert len(board["compact"]) <= 10 and set(board["compact"]) <= set(board["columns"])
    assert {board["meta"][c]["family"] for c in board["columns"]} >= {"quality", "diversity", "fluency"}
    # the sparsemax layer gives reference tokens probability zero: flagged, counted
    records = json.loads(chunk[chunk.index(",") + 1 : chunk.rindex(")")])
    sparse = [r["texts"][1] for r in records]
    assert all("ref-zero" in t["flags"] and t["ref_zero"][0] > 0 for t in sparse)
    assert all(r["texts"][0]["ref_zero"][0] == 0 for r in records)
    # per-token shading: one quantised probability and entropy per piece
    t = records[1]["texts"][2]
    assert len(t["p"]) == len(t["h"]) == len(t["pieces"]) or t["pieces"] is None


def test_leaderboard_cells_carry_the_leaderboards_own_values(scored):
    """The explorer shows the numbers of leaderboard.csv, not a rounding of them (6 significant
    digits once showed a perplexity of 13469.25 as 13469.30)."""
    import csv

    root, _, _ = scored
    board = _index((root / "out" / "explorer" / "index.html").read_text())["leaderboard"]
    with open(root / "out" / "leaderboard.csv", newline="") as f:
        table = {r["system"]: r for r in csv.DictReader(f)}
    checked = 0
    for row in board["rows"]:
        for col, cell in row["cells"].items():
            for key, suffix in (("v", ""), ("lo", "_ci_low"), ("hi", "_ci_high")):
                text = table[row["system"]].get(col + suffix)
                if text and cell[key] is not None:
                    assert cell[key] == pytest.approx(float(text), rel=1e-9, abs=1e-12), (row["system"], col, key)
                    checked += 1
    assert checked > 50


def test_same_runs_give_the_same_bytes(scored, tmp_path):
    root, run, study = scored
    a = write_explorer([run], tmp_path / "a", study=study)
    b = write_explorer([run], tmp_path / "b", study=study)
    for f in ("index.html", "data/prompts-000.js"):
        assert (a.parent / f).read_bytes() == (b.parent / f).read_bytes()


def test_study_ratings_join_the_texts_and_the_correlations_cover_every_metric_and_aspect(scored, tmp_path):
    root, run, study = scored
    index = _index(write_explorer([run], tmp_path / "x", study=study).read_text())
    aspects = index["study"]["aspects"]
    assert aspects and all(f"human:{a}" in index["leaderboard"]["columns"] for a in aspects)
    corr = index["study"]["correlations"]
    assert {(r["metric"], r["aspect"]) for r in corr} >= {("bleu-4", a) for a in aspects}
    item = next(r["item_level"] for r in corr if r["metric"] == "self-bleu-4")
    assert item["n"] == 24 and -1 <= item["kendall_tau"] <= 1
    assert sum(p["rated"] for p in index["prompts"]) == 8


def test_bad_input_is_one_line_with_exit_2(scored, tmp_path, cli):
    root, run, study = scored
    bare = tmp_path / "bare"
    bare.mkdir()
    rc, _, err = cli("view", bare, "--out", tmp_path / "o1")
    assert rc == 2 and "has no scores.json" in err and err.count("\n") == 1
    other = json.loads(study.read_text())
    for r in other["ratings"]:
        r["prompt_id"] = "elsewhere-" + r["prompt_id"]
    (tmp_path / "other.json").write_text(json.dumps(other))
    rc, _, err = cli("view", run, "--study", tmp_path / "other.json", "--out", tmp_path / "o2")
    assert rc == 2 and "none of study" in err and "is in these runs" in err
    (tmp_path / "junk.json").write_text("[1]")
    rc, _, err = cli("view", run, "--study", tmp_path / "junk.json", "--out", tmp_path / "o3")
    assert rc == 2 and "not a study export" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    rc, _, err = cli("view", run, "--out", tmp_path / "full")
    assert rc == 2 and "not an explorer folder" in err and (tmp_path / "full" / "mine.txt").exists()


def test_partly_matching_study_is_a_marked_partial_view(scored, tmp_path):
    root, run, study = scored
    doc = json.loads(study.read_text())
    doc["ratings"][0]["prompt_id"] = "not-in-the-run"
    (tmp_path / "part.json").write_text(json.dumps(doc))
    index = _index(write_explorer([run], tmp_path / "p", study=tmp_path / "part.json").read_text())
    assert any("not in these runs" in w for w in index["warnings"])


def test_report_of_the_study_correlates_the_runs_metrics_with_its_ratings(scored, tmp_path, cli):
    root, run, study = scored
    slug = json.loads(study.read_text())["study"]
    rc, _, err = cli("report", "--study", slug, "--db", f"sqlite:///{root / 'ratings.sqlite3'}", "--out", tmp_path)
    assert rc == 0, err
    md = (tmp_path / slug / "report.md").read_text()
    html = (tmp_path / slug / "report.html").read_text()
    assert "Automatic metrics against human ratings" in md and "Automatic metrics against human ratings" in html
    table = json.loads((tmp_path / slug / "report.json").read_text())["metric_correlations"]["table"]
    # the same points as the explorer shows (both from core/rank_correlation)
    index = _index(write_explorer([run], tmp_path / "x", study=study).read_text())
    shown = {(r["metric"], r["aspect"]): r["item_level"]["kendall_tau"] for r in index["study"]["correlations"]}
    assert table and all(shown[(r["metric"], r["aspect"])] == r["item_level"]["kendall_tau"] for r in table)


def test_two_base_models_without_a_baseline_each_is_a_marked_partial_view(scored, tmp_path):
    import shutil

    root, run, _ = scored
    other = tmp_path / "other"
    shutil.copytree(run, other)
    for name in ("scores.json", "generations.jsonl"):
        path = other / name
        path.write_text(path.read_text(encoding="utf-8").replace("tiny-random/", "other-model/"), encoding="utf-8")
    # the scores describe the renamed generations (leaderboard and view check the hash)
    scores = json.loads((other / "scores.json").read_text(encoding="utf-8"))
    scores["generations_sha256"] = hashlib.sha256((other / "generations.jsonl").read_bytes()).hexdigest()
    (other / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
    index = _index(write_explorer([run, other], tmp_path / "two").read_text())
    assert index["leaderboard"]["grouped"] and len(index["systems"]) == 6
    assert any("several base models" in w and "baseline for each" in w for w in index["warnings"])


def test_study_export_for_the_explorer_from_the_command_line(scored, tmp_path, cli):
    root, run, study = scored
    slug, db = json.loads(study.read_text())["study"], f"sqlite:///{root / 'ratings.sqlite3'}"
    rc, _, err = cli("study", "export", slug, "--format", "explorer", "--db", db, "--out", tmp_path / "s.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads(study.read_text())
    rc, _, err = cli("study", "export", slug, "--format", "explorer", "--blind", "--db", db)
    assert rc == 2 and "cannot be --blind" in err


STATIC = ROOT / "benchmark" / "present" / "explorer" / "static"


def test_the_explorer_css_isolates_untrusted_text():
    css = re.sub(r"/\*.*?\*/", "", (STATIC / "explorer.css").read_text(encoding="utf-8"), flags=re.S)
    rule = re.search(r"([^{}]*)\{[^}]*unicode-bidi:\s*isolate", css)
    assert rule, "explorer.css needs a unicode-bidi: isolate rule"
    selectors = {s.strip() for s in rule.group(1).split(",")}
    assert {"bdi", ".card .text", "#prompt-head .prompt"} <= selectors


def test_the_explorer_js_wraps_each_untrusted_text():
    js = (STATIC / "explorer.js").read_text(encoding="utf-8")
    assert re.search(r'function u\(text\) \{ return el\("bdi"', js)
    for wrapped in (
        "u(r.prompt)",
        "u(r.reference)",
        "u(p.head.slice(0, 90))",
        "u(shortSystem(s))",
        "u(r.model)",
        "u(w)",
    ):
        assert wrapped in js, wrapped
    # no untrusted text is glued to a label in one string any more
    for glued in ('"prompt " + r.key', '"base model: " + r.model', 'p.key + " "', '"Partial view: " + w'):
        assert glued not in js, glued


def test_explorers_written_now_carry_the_isolating_static_files(tmp_path):
    import shutil

    from maxbench.benchmark.present import explorer

    static = Path(explorer.__file__).parent / "static"
    assert (static / "explorer.css").read_bytes() == (STATIC / "explorer.css").read_bytes()
    out = tmp_path / "copy"
    shutil.copytree(static, out)
    assert "unicode-bidi: isolate" in (out / "explorer.css").read_text(encoding="utf-8")
