"""Best-worst scaling in the rating app: balanced tuples, the page (keyboard keys, blinded), bad
choices refused, the judgments stored and exported, and the report's counting scores equal to
counts of what was sent."""

import json
import random
import re
from collections import Counter

import pytest

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.design import best_worst_sequence
from maxbench.human_eval.studies.export import best_worst_rows
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import csrf_token, enter_with_client, make_study

RUBRIC = load_rubric("best-worst-quality")
FOUR = [f"tiny/layer{k}/top_p=0.9" for k in range(4)]
QUALITY = {s: k for k, s in enumerate(FOUR)}  # scripted: layer3 best, layer0 worst


@pytest.mark.parametrize("n_systems", [3, 4, 5, 6])
def test_tuples_are_balanced_over_systems_and_places(n_systems):
    size = min(4, n_systems)
    tuples = best_worst_sequence(7, n_systems, size, random.Random(0))
    shown = Counter(s for _, t in tuples for s in t)
    assert len(set(shown.values())) == 1  # every system shown equally often
    assert all(len(set(t)) == size for _, t in tuples)
    per_prompt = Counter(p for p, _ in tuples)
    assert set(per_prompt) == set(range(7)) and len(set(per_prompt.values())) == 1
    places = Counter((s, k) for _, t in tuples for k, s in enumerate(t))
    assert max(places.values()) - min(places.values()) <= 2


def test_best_worst_pages_store_export_and_report(tmp_path, db_url, cli):
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="best-worst-quality",
        systems=FOUR,
        n_prompts=5,
        items_per_system=4,
        raters_per_item=2,
        attention_rate=0,
        text_for=lambda s, i: f"text {i} of system #{FOUR.index(s)} <b>",
    )
    app = create_app({"DB_URL": url, "SECRET_KEY": "t"})
    sent = []
    for a in range(2):
        client = app.test_client()
        path = enter_with_client(client, created, a, RUBRIC.check.answer)
        while path.startswith("/item/"):
            page = client.get(path)
            assert "tiny/" not in page.text and "sys-" not in page.text and "<b>" not in page.text
            shown = [FOUR[int(k)] for k in re.findall(r'id="text-\d">text \d+ of system #(\d) &lt;b&gt;<', page.text)]
            assert len(shown) == 4 and len(set(shown)) == 4
            assert page.text.count('data-key="1"') == 2 and "Continuation D" in page.text  # best and worst
            token = csrf_token(page.text)
            for bad in ({"c_overall_best": "2", "c_overall_worst": "2"}, {"c_overall_best": "5", "c_overall_worst": "1"},
                        {"c_overall_best": "1"}, {"c_overall_best": "1", "c_overall_worst": "2", "c_other": "3"}):  # fmt: skip
                r = client.post(path, data={"csrf_token": token, **bad})
                assert r.status_code == 400
            assert (
                "must be different texts"
                in client.post(path, data={"csrf_token": token, "c_overall_best": "3", "c_overall_worst": "3"}).text
            )
            q = [QUALITY[s] for s in shown]
            best, worst = q.index(max(q)), q.index(min(q))
            if a == 1 and len(sent) % 5 == 0:  # a dissent now and then
                best, worst = worst, best
            sent.append((shown, shown[best], shown[worst]))
            r = client.post(
                path, data={"csrf_token": token, "c_overall_best": str(best + 1), "c_overall_worst": str(worst + 1)}
            )
            assert r.status_code == 303
            path = r.location
        assert path == "/finish"
    assert len(sent) == 2 * 4  # 4 prompts, one 4-tuple each, two annotators
    admin = app.test_client()
    login = admin.get("/admin/login")
    admin.post("/admin/login", data={"csrf_token": csrf_token(login.text), "token": created.admin_token})
    dashboard = admin.get(f"/admin/study/{created.slug}")
    assert dashboard.status_code == 200 and "a02" in dashboard.text

    with session_for(url) as s:
        rows = best_worst_rows(s, created.slug)
        blind = best_worst_rows(s, created.slug, blind=True)
    assert sorted((r["shown"], r["best"], r["worst"]) for r in rows) == sorted((";".join(t), b, w) for t, b, w in sent)
    assert "tiny/" not in json.dumps(blind)

    out = tmp_path / "reports"
    rc, _, err = cli("report", "--study", created.slug, "--db", url, "--out", out, "--n-boot", "200")
    assert rc == 0, err
    report = json.loads(next(out.glob("*/report.json")).read_text())
    assert report["judgment"] == "best-worst"
    (aspect,) = report["aspects"]
    for score in aspect["scores"]:
        s = score["system"]
        n_best = sum(b == s for _, b, _ in sent)
        n_worst = sum(w == s for _, _, w in sent)
        n_shown = sum(s in t for t, _, _ in sent)
        assert (score["best"], score["worst"], score["shown"]) == (n_best, n_worst, n_shown)
        assert score["score"] == pytest.approx((n_best - n_worst) / n_shown)
        assert score["ci"][0] <= score["score"] <= score["ci"][1]
    assert aspect["agreement"]["n_units"] == 4
    md = next(out.glob("*/report.md")).read_text()
    assert "best-worst scaling" in md and "Counting scores" in md


def test_best_worst_study_refuses_what_it_cannot_serve(tmp_path, cli):
    url, _, run_dir = make_study(tmp_path, systems=FOUR, rubric="fluency", items_per_system=2)
    base = ["study", "create", run_dir, "--db", url, "--rubric", "best-worst-quality", "--items-per-system", "2"]
    for extra, needle in (
        (["--raters-per-item", "1"], "--attention-rate 0"),
        (["--raters-per-item", "1", "--attention-rate", "0", "--independent"], "same prompts"),
        (["--raters-per-item", "1", "--attention-rate", "0", "--systems", *FOUR[:2]], "at least 3 systems"),
    ):
        rc, _, err = cli(*base, *extra)
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
