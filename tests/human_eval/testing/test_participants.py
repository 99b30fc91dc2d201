"""scripts/scripted_raters.py: its rule on known texts, and a tiny study driven to the finish
through the real server (gunicorn, HTTP), every stored rating the rule's value for the text shown."""

from __future__ import annotations

import importlib.util

import pytest

from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.studies.export import explorer_export, study_progress
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import make_study, start_server
from tests.support.paths import ROOT

_spec = importlib.util.spec_from_file_location("scripted_raters", ROOT / "scripts" / "scripted_raters.py")
sr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sr)

LEXICON = sr.lexicon_of(["the soup was hot and the bread was fresh"] * 3)
GOOD = "the soup was hot and the bread was fresh and we ate the soup with bread"
LOOP = "the soup was hot the soup was hot the soup was hot the soup was hot"
SYSTEMS = ["tiny/softmax/top_p=0.9", "tiny/loops/top_p=0.9"]


def test_features_of_known_texts():
    f = sr.features(LOOP, LEXICON)
    # 16 tokens, 13 four-grams: 4 distinct ones first, then 9 repeats
    assert f["repeat"] == pytest.approx(9 / 13)
    assert f["known"] == 1.0 and f["distinct"] == pytest.approx(4 / 16) and f["length"] == pytest.approx(16 / 20)
    g = sr.features("zorp blick the soup", LEXICON)
    assert g["known"] == pytest.approx(2 / 4) and g["repeat"] == 0.0
    assert sr.features("", LEXICON) == {"length": 0.0, "repeat": 0.0, "known": 0.0, "distinct": 0.0}
    assert sr.latent(sr.features("", LEXICON)) == {"quality": 1.0, "diversity": 1.0}


def test_ratings_are_seeded_clipped_and_order_free():
    a = [sr.rating(GOOD, "annotator-01", "quality", LEXICON, 0, 1, 5) for _ in range(3)]
    assert len(set(a)) == 1 and 1 <= a[0] <= 5
    many = [sr.rating(f"{GOOD} {i}", "annotator-01", "diversity", LEXICON, 0, 1, 5) for i in range(200)]
    assert min(many) >= 1 and max(many) <= 5 and len(set(many)) > 1  # noisy, within the scale
    with pytest.raises(sr.MaxbenchError, match="not 'fluency'"):
        sr.rating(GOOD, "a", "fluency", LEXICON, 0, 1, 5)


def test_page_text_unescapes_and_reads_empty_pages():
    assert sr.page_text('<div class="textbox" id="text">a &lt;b&gt; &amp; c</div>') == "a <b> & c"
    assert sr.page_text('<div class="textbox" id="text"><em>(no text was produced)</em></div>') == ""


def test_drives_a_study_to_completion_through_the_real_server(tmp_path):
    texts = {SYSTEMS[0]: GOOD, SYSTEMS[1]: LOOP}
    url, created, _ = make_study(
        tmp_path,
        rubric="posg-lm",
        systems=SYSTEMS,
        n_prompts=4,
        items_per_system=4,
        raters_per_item=2,
        annotators=2,
        attention_rate=0.25,
        text_for=lambda s, i: f"{texts[s]} {i}",
    )
    server = start_server(url, workers=1, threads=2, log_path=tmp_path / "server.log")
    try:
        links = created.links(server.base_url)
        done = sr.drive(server.base_url, links, load_rubric("posg-lm"), LEXICON, seed=3)
    finally:
        server.stop()
    assert done == dict(zip([label for label, _ in links], created.n_pages))  # rating pages and attention checks
    with session_for(url) as session:
        progress = study_progress(session, created.slug)
        rows = explorer_export(session, created.slug)["ratings"]
    dispose_engines()
    assert progress.texts_rated == progress.texts_assigned == 2 * 4 * 2
    assert len(rows) == 2 * 4 * 2 * 2  # texts x raters x criteria
    for r in rows:
        text = f"{texts[r['system']]} {int(r['prompt_id'].split('-')[1])}"
        assert r["value"] == sr.rating(text, r["annotator"], r["criterion"], LEXICON, 3, 1, 5)
    mean = {s: sum(r["value"] for r in rows if r["system"] == s and r["criterion"] == "diversity") / 8 for s in SYSTEMS}
    assert mean[SYSTEMS[0]] > mean[SYSTEMS[1]]  # the looping texts are rated less diverse


def test_a_missing_links_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert sr.main(["--links", str(tmp_path / "no.csv"), "--server", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the links file" in err and "--links-out" in err
