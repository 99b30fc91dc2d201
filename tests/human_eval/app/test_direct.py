"""Direct assessment (a 0-100 slider, WMT/Appraise): the rubric, the slider page, values
outside 0-100 rejected, and the report testing per-annotator z-scores."""

import json
import re
from urllib.parse import urlsplit

import numpy as np
import pytest
from scipy.stats import wilcoxon

from maxbench.errors import MaxbenchError
from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.rubrics import load_rubric, parse_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, csrf_token, make_study

RUBRIC = load_rubric("direct-quality")
# Annotator a01 is harsh, a02 lenient and compressed; both prefer SYSTEMS[1] on most items.
OFFSET = {0: (10, 1.0), 1: (55, 0.4)}


def test_direct_rubric_is_a_0_to_100_slider():
    assert (RUBRIC.kind, RUBRIC.scale_min, RUBRIC.scale_max) == ("direct", 0, 100)
    assert RUBRIC.attention_values == [0, 100]
    base = {"name": "d", "title": "t", "instructions": "i", "kind": "direct", "criteria": [{"name": "q", "label": "Q"}]}
    with pytest.raises(MaxbenchError, match="slider runs from 0 to 100"):
        parse_rubric({**base, "scale": {"min": 1, "max": 7}})
    with pytest.raises(MaxbenchError, match="kind 'stars' is not one of"):
        parse_rubric({**base, "kind": "stars"})
    with pytest.raises(MaxbenchError, match="allow_tie applies to kind"):
        parse_rubric({**base, "allow_tie": True})


def enter(client, created, index):
    client.get(urlsplit(created.links("http://x")[index][1]).path)
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(RUBRIC.check.answer)})
    return client.get("/next").location


def quality(system: str, item: int) -> float:
    return 40 + (25 if system == SYSTEMS[1] else 0) - (30 if item % 4 == 0 and system == SYSTEMS[1] else 0) + item


@pytest.fixture
def rated(tmp_path, db_url):
    texts = {}

    def text_for(system, i):
        texts[f"text {i} of {SYSTEMS.index(system)}"] = (system, i)
        return f"text {i} of {SYSTEMS.index(system)}"

    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="direct-quality",
        n_prompts=8,
        items_per_system=8,
        raters_per_item=2,
        annotators=2,
        attention_rate=0.1,
        text_for=text_for,
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    given = []
    for a in range(2):
        client = app.test_client()
        path = enter(client, created, a)
        while path.startswith("/item/"):
            page = client.get(path)
            assert 'type="range"' in page.text and 'min="0" max="100"' in page.text
            attention = re.search(r"select (\d+)", page.text)
            if attention:
                value = int(attention.group(1))
            else:
                system, i = texts[re.search(r'id="text">([^<]+)<', page.text).group(1)]
                shift, stretch = OFFSET[a]
                value = int(round(shift + stretch * quality(system, i)))
                given.append((a, system, i, value))
                for bad in ("101", "-1", "50.5", "abc", ""):
                    form = {"csrf_token": csrf_token(page.text), "c_quality": bad}
                    r = client.post(path, data=form)
                    assert r.status_code == 400 and "whole number from 0 to 100" in r.text
            r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_quality": str(value)})
            assert r.status_code == 303
            path = r.location
        assert path == "/finish"
    return url, created, given


def test_slider_ratings_are_stored_and_the_report_tests_z_scores(rated, cli, tmp_path):
    url, created, given = rated
    rc, out, err = cli("report", "--study", created.slug, "--db", url, "--out", tmp_path / "reports", "--n-boot", "200")
    assert rc == 0, err
    report = json.loads(next((tmp_path / "reports").glob("*/report.json")).read_text())
    assert report["options"]["z_scores"] is True
    # By hand: z-scores per annotator (sample sd), per-item means, Wilcoxon reference - other.
    z = {}
    for a in (0, 1):
        values = np.array([v for b, _, _, v in given if b == a], dtype=float)
        for b, system, i, v in given:
            if b == a:
                z[(a, system, i)] = (v - values.mean()) / values.std(ddof=1)
    means = {(s, i): np.mean([z[(a, s, i)] for a in (0, 1) if (a, s, i) in z]) for _, s, i, _ in given}
    reference = report["reference"]
    other = next(s for s in SYSTEMS if s != reference)
    items = sorted(range(8))
    # Differences rounded as the report documents (DIFFERENCE_DECIMALS), so equal ones tie.
    d = np.round([means[(reference, i)] - means[(other, i)] for i in items], 9)
    expected = wilcoxon(d)
    (comparison,) = report["comparisons"]
    assert comparison["wilcoxon"]["statistic"] == pytest.approx(expected.statistic)
    assert comparison["wilcoxon"]["pvalue"] == pytest.approx(expected.pvalue)
    md = next((tmp_path / "reports").glob("*/report.md")).read_text()
    assert "per-annotator z-scores" in md
    with session_for(url) as s:
        from maxbench.human_eval.studies.export import long_format_rows

        rows = long_format_rows(s, created.slug)
    assert sorted(r["value"] for r in rows if r["item"]) == sorted(v for *_, v in given)
