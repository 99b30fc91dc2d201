"""Messages that name the real cause (issue 41 item 7): an unusable MAXBENCH_HOME is named with its
value, a scores.json of the wrong shape says what is wrong where, a ';'-separated ratings CSV is
recognised, and the explorer isolates untrusted text for bidi (an unterminated U+202E cannot reverse
the labels around it)."""

import json
import os
import re
from pathlib import Path

import pytest

from maxbench.errors import MaxbenchError
from maxbench.fileio import maxbench_home
from tests.support.paths import ROOT

STATIC = ROOT / "benchmark" / "present" / "explorer" / "static"
RLO = "\u202e"


# ---------------------------------------------------------------- MAXBENCH_HOME


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


# ---------------------------------------------------------------- scores.json shapes


def _scored(tmp_path, systems, **extra) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text(json.dumps({"systems": systems, **extra}))
    return run


@pytest.mark.parametrize(
    ("systems", "extra", "expected"),
    [
        ("softmax", {}, "'systems' is a string, expected an object"),
        ({"a/softmax/greedy": "oops"}, {}, "systems['a/softmax/greedy'] is a string, expected an object"),
        ({"s": {"scores": "x"}}, {}, "systems['s']['scores'] is a string"),
        ({"s": {"scores": {"bleu-4": 3}}}, {}, "systems['s']['scores']['bleu-4'] is a number"),
        ({"s": {"scores": {}}}, {"comparisons": "none"}, "'comparisons' is a string"),
        ({"s": {"scores": {}}}, {"comparisons": {"systems": {"s": []}}}, "comparisons['systems']['s'] is a list"),
    ],
)
def test_a_wrongly_typed_scores_value_is_reported_where_it_is(tmp_path, systems, extra, expected):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    with pytest.raises(MaxbenchError) as err:
        load_scored_run(_scored(tmp_path, systems, **extra))
    assert expected in str(err.value) and "rescore the run" in str(err.value)


def test_missing_systems_is_still_reported_as_missing(tmp_path):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "scores.json").write_text("{}")
    with pytest.raises(MaxbenchError, match="has no 'systems' table"):
        load_scored_run(run)


def test_a_string_identity_in_the_manifest_is_reported(tmp_path):
    from maxbench.benchmark.present.leaderboard import load_scored_run

    run = _scored(tmp_path, {"s": {"scores": {}}})
    (run / "manifest.json").write_text(json.dumps({"identity": "x"}))
    with pytest.raises(MaxbenchError, match="'identity' is a string"):
        load_scored_run(run)


# ---------------------------------------------------------------- ratings CSV delimiter

HEADER = ["study", "item", "system", "annotator", "criterion", "value"]


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_ratings_csv_with_another_delimiter_says_so(tmp_path, delimiter):
    from maxbench.human_eval.analysis.ratings import load_ratings

    f = tmp_path / "ratings.csv"
    f.write_text(delimiter.join(HEADER) + "\n" + delimiter.join(["s", "p1", "a", "r1", "fluency", "3,5"]) + "\n")
    with pytest.raises(MaxbenchError) as err:
        load_ratings(f)
    msg = str(err.value)
    assert "seems to use" in msg and "as its delimiter" in msg and "save it with commas" in msg
    assert ("';'" if delimiter == ";" else "tab") in msg


def test_a_comma_csv_lacking_columns_still_names_them(tmp_path):
    from maxbench.human_eval.analysis.ratings import load_ratings

    f = tmp_path / "ratings.csv"
    f.write_text("study,item,system,annotator,value\ns,p1,a,r1,3\n")
    with pytest.raises(MaxbenchError, match="lacks required column.*criterion") as err:
        load_ratings(f)
    assert "delimiter" not in str(err.value)


def test_report_with_a_semicolon_ratings_csv_is_one_line(tmp_path, cli):
    f = tmp_path / "ratings.csv"
    f.write_text(";".join(HEADER) + "\n" + ";".join(["s", "p1", "a", "r1", "fluency", "3"]) + "\n")
    rc, _, err = cli("report", "--ratings", str(f))
    assert rc == 2 and "Traceback" not in err
    assert "seems to use ';' as its delimiter" in err


# ---------------------------------------------------------------- explorer bidi isolation


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


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent: run scripts/browser_setup.sh")
def test_an_open_right_to_left_override_in_a_prompt_keeps_its_labels_in_order(tmp_path):
    from playwright.sync_api import sync_playwright

    from maxbench.benchmark.present.explorer import write_explorer
    from tests.support.explorer_fixtures import make_scored_run

    run = make_scored_run(tmp_path)
    gen = run / "generations.jsonl"
    lines = [json.loads(x) for x in gen.read_text(encoding="utf-8").split("\n") if x.strip()]
    for line in lines:
        if line.get("prompt", "").startswith("Review 5:"):
            line["prompt"] = f"Review 5: {RLO}evil"
    gen.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    import hashlib

    scores = json.loads((run / "scores.json").read_text(encoding="utf-8"))  # only the prompt's text changed
    scores["generations_sha256"] = hashlib.sha256(gen.read_bytes()).hexdigest()
    (run / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
    index = write_explorer([run], tmp_path / "explorer")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        page.goto(index.as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#views button[data-view='prompts']").click()
        page.wait_for_selector(".card")
        page.locator("#search").fill("Review 5:")
        page.wait_for_function("document.querySelector('#prompt-count').textContent.startsWith('1 of')")
        page.select_option("#diff-metric", index=1)  # every listed prompt gets a "Δ ..." badge after its head
        page.wait_for_selector("#prompt-list li .badge")
        # the badge after the head (whose override is never closed) stays to the right of the head's text
        text_right, badge_left, badge_text = page.evaluate(
            """() => { const li = document.querySelector('#prompt-list li');
                 const walk = document.createTreeWalker(li, NodeFilter.SHOW_TEXT);
                 let node; while ((node = walk.nextNode()) && !node.data.includes('evil'));
                 const range = document.createRange(); range.selectNodeContents(node);
                 const badge = [...li.querySelectorAll('.badge')].pop();
                 return [range.getBoundingClientRect().right, badge.getBoundingClientRect().left, badge.textContent]; }"""
        )
        assert badge_text.startswith("Δ") and badge_left >= text_right - 1, (text_right, badge_left)
        # the prompt box: its label "prompt p05" is above, whole; the override stays inside the prompt's text
        page.locator("#prompt-list li").first.click()
        page.wait_for_function("document.querySelector('#prompt-head .prompt').textContent.includes('evil')")
        assert page.locator("#prompt-head .prompt .label").inner_text().startswith("prompt p05")
        browser.close()
