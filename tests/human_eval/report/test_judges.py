"""``maxbench report --study ID --judges``: the judges' report beside an unchanged human report."""

import json
import random

import pytest
from sqlalchemy import select

from maxbench.cli import main
from maxbench.human_eval.judges.judge import judge_study
from maxbench.human_eval.judges.scoring import InProcessJudge
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.store.models import Assignment, Rating, utcnow
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, write_run

THREE = [*SYSTEMS, "tiny/sparsemax/top_p=0.9"]


def rated_study(sqlite_url, tmp_path, rubric_name):
    """A study every page of which a seeded script has rated."""
    run = write_run(
        tmp_path / "run",
        THREE,
        10,
        text_for=lambda s, i: " word" * (3 + i % 4 + 2 * THREE.index(s)) + f" {s[:9]} {i}.",
        reference_for=lambda i: f"the reference text of prompt {i} is long enough to be degraded for gold.",
    )
    gold = 0 if rubric_name == "best-worst-quality" else 2
    rubric = load_rubric(rubric_name)
    rng = random.Random(0)
    with session_for(sqlite_url, create=True) as s:
        slug = create_study(
            s,
            run,
            rubric,
            StudyOptions(items_per_system=6, raters_per_item=2, attention_rate=0, seed=1, gold_items=gold),
        ).slug
        for page in s.scalars(select(Assignment)):
            page.completed_at = utcnow()
            best = None
            for criterion in rubric.stored_criteria:
                # best-worst: a place among the tuple's three texts, never the best again
                choices = [c for c in rubric.choices if c != best and c <= len(THREE)]
                value = rng.choice(choices)
                best = value if criterion.endswith("_best") else None
                s.add(Rating(assignment_id=page.id, criterion=criterion, value=value))
        s.commit()
    return slug


def report(sqlite_url, slug, out, *extra):
    return main(["report", "--study", slug, "--db", sqlite_url, "--out", str(out), "--n-boot", "100", *extra])


@pytest.mark.parametrize("rubric", ["posg-lm", "pairwise-quality", "best-worst-quality"])
def test_the_judges_report_sits_beside_a_human_report_a_judge_does_not_change(
    sqlite_url, tmp_path, tiny, capsys, rubric
):
    slug = rated_study(sqlite_url, tmp_path, rubric)
    assert report(sqlite_url, slug, tmp_path / "before", "--name", "r") == 0
    err = capsys.readouterr()
    assert report(sqlite_url, slug, tmp_path / "none", "--name", "r", "--judges") == 2
    assert "has no judge yet" in capsys.readouterr().err
    with session_for(sqlite_url) as s:
        summary = judge_study(s, slug, InProcessJudge(tiny), log=None)
    measured = {"rater": summary.rater, "backend": "in-process", "device": "cpu", "threads": 1, "units": 9}
    measured |= {"judged_now": 9, "seconds": 3.0, "units_per_second": 3.0, "load_average_before": [1.5, 1, 1]}
    (tmp_path / "after" / "r").mkdir(parents=True)
    (tmp_path / "after" / "r" / "judging.json").write_text(json.dumps([measured]))
    assert report(sqlite_url, slug, tmp_path / "after", "--name", "r", "--judges", "--human-share", "0.5") == 0, err
    for name in ("report.md", "report.json"):  # the human report never includes the judge
        assert (tmp_path / "after" / "r" / name).read_bytes() == (tmp_path / "before" / "r" / name).read_bytes()
    data = json.loads((tmp_path / "after" / "r" / "judges.json").read_text())
    assert data["judgment"] == load_rubric(rubric).kind and data["prompts"] == 6 and data["human_prompts"] == 3
    (judge,) = data["judges"]
    assert judge["rater"].startswith("judge-tiny-random-") and judge["identity"]["weights"] == tiny.hash
    criteria = judge["criteria"]
    assert sorted(criteria) == sorted(c.name for c in load_rubric(rubric).criteria)
    md = (tmp_path / "after" / "r" / "judges.md").read_text()
    assert judge["rater"] in md
    assert md.count("Summary, ") == len(criteria) and "as wide as the people's alone" in md
    assert "## Judging throughput" in md and "| 9 of 9 | 3.00 | 3.000 | 1.50 1.00 1.00 |" in md
    if rubric == "posg-lm":
        for c in criteria.values():
            assert c["agreement"]["items"] == 18 and c["agreement"]["ranking"]["systems"] == 3
            for s in c["ppi"]["systems"].values():
                assert s["ppi"]["n"] == 3 and s["ppi"]["N"] == 3 and s["people"]["n"] == 3
            assert sorted(c["ppi"]["differences"]) == sorted(set(THREE) - {data["baseline"]})
            assert c["gold"]["n"] == 2  # each gold pair: the reference's score against its degraded copy's
        assert "PPI++" in md
    elif rubric == "pairwise-quality":
        (c,) = criteria.values()
        assert c["behaviour"]["pairs_both_orders"] == 18 and c["agreement"]["judgments"] == 36
        assert sorted(c["length_controlled"]) == sorted(set(THREE) - {data["baseline"]})
        assert c["gold"]["n"] == 4  # each gold pair in both orders
        assert "Order consistency" in md and "Position bias" in md and "LC" in md
        a = c["agreement"]  # the warning follows the chance the report shows
        assert 0 < a["chance"] < 1 and "Agreement (chance)" in md
        assert (a["agreement"] <= a["chance"]) == any("at or below chance" in w for w in judge["warnings"])
    else:
        (c,) = criteria.values()
        assert c["agreement"]["best"]["judgments"] > 0 and c["agreement"]["ranking"]["systems"] == 3
        sides = [c["agreement"][side] for side in ("best", "worst")]
        flagged = sum(a["agreement"] <= a["chance"] for a in sides)
        assert flagged == sum("at or below chance" in w for w in judge["warnings"])
        for s in c["ppi"]["systems"].values():  # each prompt's tuple shows all three systems
            assert s["ppi"]["n"] == 3 and s["ppi"]["N"] == 3 and -1 <= s["ppi"]["estimate"] <= 1
        assert sorted(c["ppi"]["differences"]) == sorted(set(THREE) - {data["baseline"]})
        assert "counting score" in md and "PPI++" in md


def test_best_worst_ppi_estimates_the_human_reports_counting_score(sqlite_url, tmp_path, tiny):
    """With every prompt's people kept, the people-only estimate of a system is the human report's
    counting score (each text shown equally often), and PPI with no judge-only texts is the same."""
    slug = rated_study(sqlite_url, tmp_path, "best-worst-quality")
    with session_for(sqlite_url) as s:
        judge_study(s, slug, InProcessJudge(tiny), log=None)
    assert report(sqlite_url, slug, tmp_path / "out", "--name", "r", "--judges") == 0
    human = json.loads((tmp_path / "out" / "r" / "report.json").read_text())
    scores = {row["system"]: row["score"] for row in human["aspects"][0]["scores"]}
    (judge,) = json.loads((tmp_path / "out" / "r" / "judges.json").read_text())["judges"]
    (c,) = judge["criteria"].values()
    assert sorted(c["ppi"]["systems"]) == sorted(scores)
    for system, v in c["ppi"]["systems"].items():
        assert v["people"]["estimate"] == pytest.approx(scores[system], abs=1e-12)
        assert v["ppi"]["estimate"] == pytest.approx(scores[system], abs=1e-12) and v["ppi"]["N"] == 0


def test_judges_need_a_study_and_human_share_needs_judges(sqlite_url, tmp_path, capsys):
    assert main(["report", "--ratings", str(tmp_path / "x.csv"), "--judges"]) == 2
    assert "give --study ID" in capsys.readouterr().err
    assert main(["report", "--study", "x", "--human-share", "0.5", "--db", sqlite_url]) == 2
    assert "--human-share F goes with --judges" in capsys.readouterr().err
