"""Gold items: a suite reference against a degraded copy, blinded like every page, left out of the
system statistics, scored per annotator, and an exclusion rule on that score."""

import html
import json
import random
import re
from collections import Counter

import pytest

from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.export import gold_accuracy, long_format_rows, pair_judgment_rows, rows_to_csv
from maxbench.human_eval.studies.gold import DEGRADATIONS, build_gold_pairs, degrade
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, csrf_token, enter_with_client, make_study

WORDS = "the soup arrived warm and the bread was fresh while our waiter smiled at every single table".split()


def reference(i: int) -> str:
    return f"Dish {i}: " + " ".join(WORDS[i % 3 :] + WORDS[: i % 3])


def records(n: int) -> list[dict]:
    return [
        {"system": s, "prompt_id": f"food-{i:04d}", "sample": 0, "prompt": f"Prompt {i}", "reference": reference(i)}
        for s in SYSTEMS
        for i in range(n)
    ]


def test_gold_pairs_are_deterministic_from_the_seed_and_degraded():
    first, again = build_gold_pairs(records(9), 6, seed=3), build_gold_pairs(records(9), 6, seed=3)
    assert first == again
    assert build_gold_pairs(records(9), 6, seed=4) != first
    assert Counter(g.kind for g in first) == {k: 2 for k in DEGRADATIONS}
    for g in first:
        ref, bad = g.reference.split(), g.degraded.split()
        assert g.reference == reference(int(g.prompt_id[-4:])) and g.degraded != g.reference
        if g.kind == "shuffled":
            assert sorted(bad) == sorted(ref)
        elif g.kind == "looped":
            head = ref[: len(ref) // 4]
            assert len(bad) == len(ref) and bad[: 2 * len(head)] == head * 2
        else:
            assert bad == ref[: len(ref) // 3]
    assert degrade(reference(0), "shuffled", random.Random(1)) == degrade(reference(0), "shuffled", random.Random(1))


def skeleton(page: str) -> str:
    """A page's markup without its texts, ids and counts: what tells pages apart besides the words."""
    page = re.sub(r">[^<]*<", "><", page)
    page = re.sub(r'(/item/|value=")[^"]+"', r"\1", page)
    return re.sub(r'(aria-valuenow|aria-valuemax|max)="\d+"', r'\1=""', page)


def drive(app, created, n, rubric, answer):
    """Scripted annotators through the test client; ``answer(a, texts, page)`` gives each page's value.
    Returns the page skeletons seen per kind (gold or not) and what was shown."""
    shapes, shown = {True: set(), False: set()}, []
    for a in range(n):
        client = app.test_client()
        path = enter_with_client(client, created, a, rubric.check.answer)
        while path.startswith("/item/"):
            page = client.get(path)
            texts = [html.unescape(t) for t in re.findall(r'id="text(?:-\d)?">([^<]*)<', page.text)]
            attention = re.search(r"select (\d+)", page.text)
            if attention:
                value = int(attention.group(1))
            else:
                gold = any("Dish" in t for t in texts)
                shapes[gold].add(skeleton(page.text))
                value = answer(a, texts, page.text)
                shown.append((a, gold, texts, value))
            r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_" + rubric.criteria[0].name: value})
            assert r.status_code == 303, r.text
            path = r.location
        assert path == "/finish"
    return shapes, shown


def is_reference(text: str) -> bool:
    return any(text == reference(i) for i in range(20))


def is_shuffled(text: str) -> bool:
    return any(sorted(text.split()) == sorted(reference(i).split()) for i in range(20))


@pytest.fixture
def likert(tmp_path, db_url):
    rubric = load_rubric("fluency")
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="fluency",
        n_prompts=8,
        items_per_system=4,
        raters_per_item=3,
        attention_rate=0,
        gold_items=3,
        reference_for=reference,
        text_for=lambda s, i: f"text {i} of {'first' if s == SYSTEMS[0] else 'second'}",
    )

    def answer(a, texts, _):
        (text,) = texts
        if "Dish" in text:  # a03 prefers every degraded copy; a02 ties the shuffled pair (a failure)
            good = is_reference(text)
            if a == 1 and not good and is_shuffled(text):
                return 5
            return 5 if good != (a == 2) else 1
        return 4 if "first" in text else 2

    shapes, shown = drive(create_app({"DB_URL": url, "SECRET_KEY": "t"}), created, 3, rubric, answer)
    return url, created, shapes, shown


def test_likert_gold_is_blinded_scored_and_never_a_system(likert, cli, tmp_path):
    url, created, shapes, shown = likert
    assert shapes[True] == shapes[False]  # a gold page is marked up exactly like a rated text
    assert sum(1 for _, gold, _, _ in shown if gold) == 3 * 3 * 2  # 3 annotators x 3 pairs x 2 pages
    with session_for(url) as s:
        rows, blind = long_format_rows(s, created.slug), long_format_rows(s, created.slug, blind=True)
        scores = {g.annotator: (g.correct, g.n) for g in gold_accuracy(s, created.slug)}
    assert len(rows) == 3 * 8  # 8 texts (2 systems x 4 prompts), each by all three: no gold row
    assert {r["system"] for r in rows} == set(SYSTEMS)
    exported = rows_to_csv(blind) + json.dumps(blind)
    assert "gold" not in exported.lower() and "Dish" not in exported
    assert len({r["system"] for r in blind}) == 2
    assert scores["a01"] == (3, 3) and scores["a03"] == (0, 3)

    out = tmp_path / "reports"
    rc, _, err = cli("report", "--study", created.slug, "--db", url, "--out", out, "--n-boot", "200")
    assert rc == 0, err
    kept_all = json.loads(next(out.glob("*/report.json")).read_text())
    assert kept_all["systems"] == sorted(SYSTEMS) or set(kept_all["systems"]) == set(SYSTEMS)
    assert {d["n"] for d in kept_all["descriptives"]} == {12}  # 4 prompts x 3 raters, no gold rating
    gold_of = {x["annotator"]: (x["gold_correct"], x["gold_n"]) for x in kept_all["annotators"]}
    assert gold_of["a03"] == (0, 3)

    rc, _, err = cli(
        "report", "--study", created.slug, "--db", url, "--out", out, "--name", "strict", "--n-boot", "200",
        "--exclude-gold-below", "0.8",
    )  # fmt: skip
    assert rc == 0, err
    strict = json.loads((out / "strict" / "report.json").read_text())
    rules = dict(strict["exclusions"]["by_rule"])
    assert rules["gold-item accuracy below 0.8 (annotator)"] == 16  # a02 (2/3) and a03 (0/3), 8 rows each
    assert dict(strict["exclusions"]["by_annotator"]) == {"a02": 8, "a03": 8}
    assert {d["n"] for d in strict["descriptives"]} == {4}
    md = (out / "strict" / "report.md").read_text()
    assert "gold-item accuracy below 0.8" in md and "0/3 (0.00)" in md


def test_pairwise_gold_page_excluded_from_bradley_terry_and_rule_counts(tmp_path, db_url, cli):
    rubric = load_rubric("pairwise-quality")
    url, created, _ = make_study(
        tmp_path,
        db_url=db_url,
        rubric="pairwise-quality",
        n_prompts=6,
        items_per_system=4,
        raters_per_item=2,
        attention_rate=0,
        gold_items=2,
        reference_for=reference,
        text_for=lambda s, i: f"text {i} of {'first' if s == SYSTEMS[0] else 'second'}",
    )

    def answer(a, texts, _):
        if any("Dish" in t for t in texts):
            ref_place = 1 if is_reference(texts[0]) else 2
            return ref_place if a == 0 else 3 - ref_place  # a02 picks the degraded copy
        return 1 if "first" in texts[0] else 2

    shapes, shown = drive(create_app({"DB_URL": url, "SECRET_KEY": "t"}), created, 2, rubric, answer)
    assert shapes[True] == shapes[False]
    gold_pages = [texts for _, gold, texts, _ in shown if gold]
    assert len(gold_pages) == 4 and Counter(is_reference(t[0]) for t in gold_pages) == {True: 2, False: 2}
    with session_for(url) as s:
        rows = pair_judgment_rows(s, created.slug)
    assert len(rows) == 2 * 4 and {r["left"] for r in rows} | {r["right"] for r in rows} == set(SYSTEMS)
    out = tmp_path / "reports"
    rc, _, err = cli(
        "report", "--study", created.slug, "--db", url, "--out", out, "--n-boot", "200", "--exclude-gold-below", "0.5"
    )
    assert rc == 0, err
    report = json.loads(next(out.glob("*/report.json")).read_text())
    assert set(report["systems"]) == set(SYSTEMS)
    assert dict(report["exclusions"])["gold-item accuracy below 0.5 (annotator)"] == 4
    assert report["rows_kept"] == 4 and [(g["annotator"], g["correct"], g["n"]) for g in report["gold"]] == [
        ("a01", 2, 2),
        ("a02", 0, 2),
    ]


def test_bad_gold_configuration_is_one_line(tmp_path, cli):
    url, created, run_dir = make_study(tmp_path, rubric="fluency", n_prompts=4, items_per_system=2)
    for args, needle in (
        (["--gold-items", "2"], "suite reference"),  # the run's references are empty
        (["--gold-items", "-1"], "--gold-items must be 0 or more"),
    ):
        rc, _, err = cli(
            "study", "create", run_dir, "--db", url, "--rubric", "fluency", "--items-per-system", "2",
            "--raters-per-item", "1", *args,
        )  # fmt: skip
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    ratings = tmp_path / "r.csv"
    ratings.write_text("study,item,system,annotator,criterion,value\ns,i1,x,a1,q,3\ns,i1,y,a1,q,4\n")
    for args, needle in (
        (["--ratings", ratings, "--exclude-gold-below", "0.8"], "has no gold items"),
        (["--study", created.slug, "--db", url, "--exclude-gold-below", "1.5"], "not an accuracy in (0, 1]"),
    ):
        rc, _, err = cli("report", *args, "--out", tmp_path / "out")
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
