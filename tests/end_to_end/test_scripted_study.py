"""scripts/scripted_study.py on a tiny run through the real server: the report's Bradley-Terry equals
choix on the same comparisons; and the report's z-score tests on a hand-worked direct case."""

import importlib.util
import json

import choix
import numpy as np
import pytest

from maxbench.human_eval.analysis.pairwise import BT_ALPHA
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.export import pair_judgment_rows
from maxbench.human_eval.testing.participants import ROOT, write_run

THREE = ["tiny/softmax/top_p=0.9", "tiny/sparsemax/top_p=0.9", "tiny/graphmax(lam=1.0)/top_p=0.9"]
JUDGED_KINDS = ("best-worst",)


def load_script():
    spec = importlib.util.spec_from_file_location("scripted_study", ROOT / "scripts" / "scripted_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scripted_pairwise_report_equals_choix_on_the_same_comparisons(tmp_path):
    run = write_run(tmp_path / "run", THREE, 5, text_for=lambda s, i: f"Text {i} & more, by <{s}>.")
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    out = tmp_path / "studies"
    argv = ["--run", str(run), "--systems", *THREE, "--judgments", "pairwise", "--items", "4", "--raters", "2"]
    assert load_script().main([*argv, "--out", str(out), "--db", url, "--n-boot", "200"]) == 0
    report = json.loads((out / "scripted-pairwise" / "report.json").read_text())
    assert json.loads((out / "scripted-pairwise" / "scripted.json").read_text())["quality"][THREE[2]] == 2
    with session_for(url) as s:
        rows = pair_judgment_rows(s, report["study"])
    assert len(rows) == 4 * 3 * 2  # 4 prompts x 3 pairs x 2 raters, every page rated through HTTP
    index = {s: k for k, s in enumerate(report["systems"])}
    m = np.zeros((3, 3))
    for r in rows:
        a, b = index[r["left"]], index[r["right"]]
        if not r["winner"]:
            m[a, b] += 0.5
            m[b, a] += 0.5
        elif r["winner"] == r["left"]:
            m[a, b] += 1
        else:
            m[b, a] += 1
    (aspect,) = report["aspects"]
    np.testing.assert_allclose([s["score"] for s in aspect["strengths"]], choix.ilsr_pairwise_dense(m, alpha=BT_ALPHA))


def test_report_z_scores_match_a_hand_worked_case(tmp_path, cli):
    # 3 annotators x 2 items x 2 systems on the 0-100 slider. Each annotator's four values have mean
    # m and deviations of 0 or +-20, so sd = sqrt(800 / 3) and z is 0 or +-20 / sd = +-1.224745.
    values = {  # annotator: (ref i1, ref i2, other i1, other i2)
        "a1": (70, 50, 30, 50),  # z: +1.22, 0, -1.22, 0
        "a2": (80, 60, 60, 40),  # z: +1.22, 0, 0, -1.22
        "a3": (20, 40, 20, 0),  # z: 0, +1.22, 0, -1.22
    }
    lines = ["study,item,system,annotator,criterion,value,scale_min,scale_max"]
    for a, (r1, r2, o1, o2) in values.items():
        for item, system, v in (("i1", "ref", r1), ("i2", "ref", r2), ("i1", "other", o1), ("i2", "other", o2)):
            lines.append(f"da,{item},{system},{a},quality,{v},0,100")
    path = tmp_path / "direct.csv"
    path.write_text("\n".join(lines) + "\n")
    rc, _, err = cli(
        "report", "--ratings", path, "--z-scores", "--reference", "ref", "--out", tmp_path / "r", "--n-boot", "200"
    )
    assert rc == 0, err
    (c,) = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())["comparisons"]
    # Per-item means of z: ref i1 2z/3, ref i2 z/3, other i1 -z/3, other i2 -2z/3; both differences
    # are z = 1.224745 > 0, tied ranks 1.5 + 1.5: W+ = 3, W- = 0, statistic min = 0, exact p = 2/4.
    assert c["wilcoxon"]["statistic"] == 0 and c["wilcoxon"]["pvalue"] == pytest.approx(0.5)
    # Mann-Whitney on the 6 + 6 z-scores: ref {z, z, z, 0, 0, 0} against other {-z, -z, -z, 0, 0, 0}:
    # U = 3 x 6 + 3 x (3 + 3 / 2) = 31.5.
    assert c["mannwhitney"]["statistic"] == pytest.approx(31.5)


def test_judged_scripted_studies_are_rendered_again_from_their_saved_judgments_without_judging(tmp_path):
    """A rebuilt database (another scratch file) gets the same people's ratings from the seed, and the
    judgments saved beside the reports (judgments.json) instead of new ones: the judges' numbers are
    the same and nothing is judged again; the same database given again reuses its studies."""
    run = write_run(tmp_path / "run", THREE, 5, text_for=lambda s, i: f"Text {i} & more, by <{s}>.")
    out = tmp_path / "studies"
    argv = ["--run", str(run), "--systems", *THREE, "--judgments", *JUDGED_KINDS, "--items", "4"]
    argv += ["--raters", "2", "--out", str(out), "--n-boot", "200", "--judges", "tiny-random", "--threads", "1"]
    script = load_script()
    first = f"sqlite:///{tmp_path / 'first.sqlite3'}"
    assert script.main([*argv, "--db", first, "--human-share", "0.5"]) == 0

    def read(name, judgment):
        return json.loads((out / f"scripted-{judgment}" / name).read_text())

    before = {j: (read("report.json", j), read("judges.json", j), read("judging.json", j)) for j in JUDGED_KINDS}
    for j, (_, judges, judging) in before.items():
        (entry,) = judging
        assert entry["judge"] == "tiny-random" and entry["judged_now"] == entry["units"] > 0
        saved = read("judgments.json", j)
        assert [r["rater"] for r in saved["judges"]] == [entry["rater"]] == [g["rater"] for g in judges["judges"]]
        assert len(saved["judgments"]) == judges["judges"][0]["judgments"]
    assert script.main([*argv, "--db", f"sqlite:///{tmp_path / 'second.sqlite3'}", "--human-share", "0.5"]) == 0
    for j, (report, judges, judging) in before.items():
        again = read("report.json", j)
        assert again["aspects"] == report["aspects"] and again["study"] != report["study"]  # rebuilt, the same
        assert read("judges.json", j)["judges"] == judges["judges"]
        assert read("judging.json", j) == judging  # nothing judged: the first measurement stays
    assert script.main([*argv, "--db", first]) == 0  # the same database: its studies, no second study
    with session_for(first) as s:
        from sqlalchemy import func, select

        from maxbench.human_eval.store.models import Study

        assert s.scalar(select(func.count()).select_from(Study)) == len(JUDGED_KINDS)
