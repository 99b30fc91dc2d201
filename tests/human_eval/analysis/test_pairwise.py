"""Pairwise preference studies end to end: balanced pairs and positions, the A/B page, choices
that were not offered rejected, and the report's Bradley-Terry equal to choix called directly."""

import json
import re
from collections import Counter
from urllib.parse import urlsplit

import choix
import numpy as np
import pytest

from maxbench.human_eval.analysis.pairwise import BT_ALPHA
from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.export import pair_judgment_rows
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, csrf_token, make_study

RUBRIC = load_rubric("pairwise-quality")
THREE = [*SYSTEMS, "tiny/sparsemax/top_p=0.9"]
QUALITY = {THREE[0]: 1, THREE[1]: 2, THREE[2]: 0}


def enter(client, created, index):
    client.get(urlsplit(created.links("http://x")[index][1]).path)
    page = client.get("/welcome")
    client.post("/welcome", data={"csrf_token": csrf_token(page.text), "consent": "y"})
    page = client.get("/check")
    client.post("/check", data={"csrf_token": csrf_token(page.text), "answer": str(RUBRIC.check.answer)})
    return client.get("/next").location


@pytest.fixture
def rated(tmp_path, db_url):
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="pairwise-quality",
        systems=THREE,
        n_prompts=6,
        items_per_system=6,
        raters_per_item=2,
        annotators=3,
        attention_rate=0.1,
        text_for=lambda s, i: f"text {i} of system #{THREE.index(s)}",
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    sent = []
    for a in range(3):
        client = app.test_client()
        path = enter(client, created, a)
        while path.startswith("/item/"):
            page = client.get(path)
            assert "tiny/" not in page.text and "sys-" not in page.text  # blinded
            attention = re.search(r"select (\d+)", page.text)
            if attention:
                value = int(attention.group(1))
            else:
                shown = [int(x) for x in re.findall(r'id="text-\d">text \d+ of system #(\d)<', page.text)]
                item = re.search(r'id="text-1">text (\d+) ', page.text).group(1)
                assert len(shown) == 2 and shown[0] != shown[1]
                for bad in ("3", "-1", "A", "", "1;2"):
                    r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_overall": bad})
                    assert r.status_code == 400
                qa, qb = QUALITY[THREE[shown[0]]], QUALITY[THREE[shown[1]]]
                # a03 calls close ones a tie; others follow quality, with one dissent per annotator.
                value = 0 if a == 2 and abs(qa - qb) == 1 else (1 if qa > qb else 2)
                if len(sent) % 7 == 3:
                    value = 3 - value if value else 1
                sent.append((a, item, THREE[shown[0]], THREE[shown[1]], value))
            r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_overall": str(value)})
            assert r.status_code == 303
            path = r.location
        assert path == "/finish"
    return url, created, sent


def test_every_pair_on_every_prompt_twice_with_positions_balanced(rated):
    _, _, sent = rated
    units = Counter((item, frozenset((left, right))) for _, item, left, right, _ in sent)
    assert len(units) == 6 * 3 and set(units.values()) == {2}  # 6 prompts x 3 pairs, 2 raters each
    left = Counter((frozenset((lft, rgt)), lft) for _, _, lft, rgt, _ in sent)
    for pair in {frozenset((lft, rgt)) for _, _, lft, rgt, _ in sent}:
        a, b = sorted(pair)
        assert abs(left[(pair, a)] - left[(pair, b)]) <= 2  # 12 comparisons per pair: 6/6 per copy, +-1


def test_report_bradley_terry_equals_choix_on_what_was_sent(rated, cli, tmp_path):
    url, created, sent = rated
    with session_for(url) as s:
        rows = pair_judgment_rows(s, created.slug)
        blind = pair_judgment_rows(s, created.slug, blind=True)
    assert len(rows) == len(sent)
    assert all(r["left"].startswith("sys-") for r in blind) and "tiny/" not in json.dumps(blind)
    rc, out, err = cli("report", "--study", created.slug, "--db", url, "--out", tmp_path / "reports", "--n-boot", "200")
    assert rc == 0, err
    report = json.loads(next((tmp_path / "reports").glob("*/report.json")).read_text())
    systems = report["systems"]
    index = {s: k for k, s in enumerate(systems)}
    m = np.zeros((3, 3))
    for _, _, left, right, value in sent:
        a, b = index[left], index[right]
        if value == 0:
            m[a, b] += 0.5
            m[b, a] += 0.5
        elif value == 1:
            m[a, b] += 1
        else:
            m[b, a] += 1
    expected = choix.ilsr_pairwise_dense(m, alpha=BT_ALPHA)
    (aspect,) = report["aspects"]
    np.testing.assert_allclose([s["score"] for s in aspect["strengths"]], expected, atol=1e-8)
    best = max(aspect["strengths"], key=lambda s: s["score"])["system"]
    assert best == THREE[1]
    md = next((tmp_path / "reports").glob("*/report.md")).read_text()
    assert "Bradley-Terry" in md and "Holm" in md
