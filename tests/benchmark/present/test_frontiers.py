"""``maxbench frontier``: a scored run with sweeps drawn as curves, compared at a matched value, with
dominance and tuning budgets, written as md/html/json and plots; bad input refused in one line."""

import json

import pytest

from maxbench.benchmark.present import frontiers
from maxbench.multiple_testing import holm
from maxbench.rundir import read_scores

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
OFFSETS = [-0.002, -0.001, 0.0, 0.0, 0.001, 0.002]  # per-prompt values around each point's value: their mean


def entry(value, higher=True, per_prompt=True, ci=0.01):
    e = {"value": value, "ci_low": value - ci, "ci_high": value + ci, "higher_is_better": higher}
    if per_prompt:
        e["per_prompt"] = {f"p{i}": value + d for i, d in enumerate(OFFSETS)}
    return e


SWEEPS = {  # name -> knob, values, self-bleu-4 (x), bleu-4 (y), mauve
    "softmax temp": (
        "temp",
        [0.6, 0.8, 1.0, 1.2],
        [0.30, 0.20, 0.10, 0.05],
        [0.02, 0.05, 0.07, 0.08],
        [0.5, 0.7, 0.8, 0.6],
    ),
    "graphmax lam": ("lam", [0.3, 1.0, 3.0], [0.12, 0.18, 0.24], [0.03, 0.04, 0.045], [0.4, 0.5, 0.45]),
    "posg temp": ("temp", [0.6, 1.0], [0.40, 0.30], [0.01, 0.02], [0.3, 0.35]),
}


def make_run(tmp_path, sweeps=SWEEPS, human=True, drop=()):
    """A scored run folder with the manifest's sweeps record; ``drop``: (sweep, score) pairs left out."""
    run = tmp_path / "results" / "frontier" / "runs" / "frontier-test"
    run.mkdir(parents=True)
    record, systems = {}, {}
    for name, (knob, values, xs, ys, ms) in sweeps.items():
        names = [f"m/{name.split()[0]}/{knob}={v}" for v in values]
        record[name] = {"knob": knob, "values": values, "systems": names}
        for s, x, y, mv in zip(names, xs, ys, ms):
            scores = {"self-bleu-4": entry(x, higher=False), "bleu-4": entry(y), "mauve": entry(mv, per_prompt=False)}
            systems[s] = {"scores": {k: v for k, v in scores.items() if (name, k) not in drop}}
    (run / "manifest.json").write_text(json.dumps({"run_id": "frontier-test", "systems": {}, "sweeps": record}))
    doc = {
        "run_id": "frontier-test",
        "bootstrap": {"n_resamples": 200, "seed": 0, "level": 0.95},
        "systems": systems,
        "comparisons": {"baseline": "m/graphmax/lam=1.0", "systems": {}},
    }
    if human:  # the references' row, where scoring keeps it (scores.json's "human")
        doc["human"] = {"scores": {"self-bleu-4": entry(0.15, higher=False), "mauve": entry(1.0)}}
    (run / "scores.json").write_text(json.dumps(doc))
    return run


def test_frontier_writes_the_report_plots_and_explorer_data_beside_the_runs(tmp_path, cli):
    run = make_run(tmp_path)
    rc, out, err = cli("frontier", run)
    assert rc == 0, err
    folder = tmp_path / "results" / "frontier"
    for name in ("frontier.md", "frontier.html", "frontier.json"):
        assert (folder / name).is_file() and f"wrote {folder / name}" in out
    for plot in ("frontier-mauve-self-bleu-4", "budget-mauve-self-bleu-4", "frontier-bleu-4-self-bleu-4"):
        assert (folder / "plots" / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((folder / "frontier.json").read_text())
    assert [(p["quality"], p["match"]) for p in data["planes"]] == [("mauve", "self-bleu-4"), ("bleu-4", "self-bleu-4")]
    bleu = data["planes"][1]
    assert bleu["human"] == [0.15, None] and bleu["target"] == 0.15 and bleu["against"] == "graphmax lam"
    soft = next(c for c in bleu["curves"] if c["name"] == "softmax temp")
    assert [p["value"] for p in soft["points"]] == [0.6, 0.8, 1.0, 1.2]
    assert [p["x"] for p in soft["points"]] == [0.30, 0.20, 0.10, 0.05]
    # the tuning budget carries an interval at every N, in the data and in the report's table
    mauve = data["planes"][0]
    assert mauve["budget_method"]["softmax temp"] == frontiers.fr.NORMAL_METHOD  # MAUVE: no per-prompt values
    assert all(len(cis) == len(mauve["budget"][n]) and None not in cis for n, cis in mauve["budget_ci"].items())
    best = bleu["budget_ci"]["softmax temp"][-1]
    assert best[0] <= 0.08 <= best[1]
    md = (folder / "frontier.md").read_text()
    budget_table = md.split("Tuning budget: expected best bleu-4")[1]
    assert f"[{best[0]:.4g}, {best[1]:.4g}]" in budget_table
    # the matched differences of a plane are one family: each has its p and its Holm-adjusted p
    diffs = [d for m in bleu["matched"] for d in m["differences"]]
    assert bleu["multiplicity"] == {
        "method": "holm",
        "family": "every matched difference of this plane",
        "tests": len(diffs),
    }
    assert [d["holm_p"] for d in diffs] == pytest.approx(holm([d["p"] for d in diffs]), abs=1e-6)
    matched_table = md.split("Matched comparisons: bleu-4")[1].split("###")[0]
    assert (
        "| p | Holm p |" in matched_table
        and f"Holm's step-down adjustment over the {len(diffs)} differences" in matched_table
    )


def test_the_matched_comparison_at_the_human_value_is_the_interpolation_on_each_curve(tmp_path):
    _, planes = frontiers.build(make_run(tmp_path), [("bleu-4", "self-bleu-4")])
    (plane,) = planes
    soft = next(m for m in plane.matched if m.a == "softmax temp")
    # softmax at self-bleu-4 0.15: between temp 0.8 (0.20, 0.05) and 1.0 (0.10, 0.07): 0.06;
    # graphmax between lam 0.3 (0.12, 0.03) and 1.0 (0.18, 0.04): 0.035
    assert [s.estimate for s in soft.a_segments] == pytest.approx([0.06])
    assert [s.estimate for s in soft.b_segments] == pytest.approx([0.035])
    (d,) = soft.differences
    assert d.estimate == pytest.approx(0.025) and d.interval.low < 0.025 < d.interval.high
    assert soft.method.startswith("percentile bootstrap over prompts, resampled jointly")
    mauve = frontiers.build(make_run(tmp_path / "2"), [("mauve", "self-bleu-4")])[1][0]
    # MAUVE has no per-prompt values: drawn from its own intervals, while self-bleu-4 resamples prompts
    assert mauve.matched[0].method == (
        "the matching score: percentile bootstrap over prompts, resampled jointly for every point of both curves; "
        "the quality score: parametric bootstrap: each point drawn from a normal with the standard error its own "
        "interval implies, clipped to the score's range, points independent (a score without per-prompt values "
        "that add up to it)"
    )


def test_a_sweep_that_does_not_reach_the_matched_value_is_reported_as_no_overlap(tmp_path, cli):
    run = make_run(tmp_path)
    rc, _, err = cli("frontier", run, "--plane", "bleu-4,self-bleu-4", "--out", tmp_path / "out")
    assert rc == 0, err
    md = (tmp_path / "out" / "frontier.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| posg temp | graphmax lam | no overlap"))
    assert "does not reach the value: posg temp" in row
    _, planes = frontiers.build(run, [("bleu-4", "self-bleu-4")])
    posg = next(m for m in planes[0].matched if m.a == "posg temp")
    assert not posg.overlap and posg.differences == ()


def test_without_a_human_row_the_value_given_is_matched_and_none_is_said_so(tmp_path, cli):
    run = make_run(tmp_path, human=False)
    _, planes = frontiers.build(run, [("bleu-4", "self-bleu-4")])
    assert planes[0].target is None and planes[0].matched == []
    assert "No matched value" in frontiers.render_markdown(frontiers._sections(*frontiers.build(run), {}))
    _, planes = frontiers.build(run, [("bleu-4", "self-bleu-4")], match=0.2)
    soft = next(m for m in planes[0].matched if m.a == "softmax temp")
    assert [s.estimate for s in soft.a_segments] == pytest.approx([0.05])  # temp 0.8's point itself


def test_the_tuning_budget_of_each_sweep_is_the_expected_best_of_n_of_its_points(tmp_path):
    _, planes = frontiers.build(make_run(tmp_path), [("bleu-4", "self-bleu-4")])
    soft = planes[0].budget["softmax temp"]
    assert soft.estimates[0] == pytest.approx(sum([0.02, 0.05, 0.07, 0.08]) / 4)
    assert soft.estimates[-1] == pytest.approx(0.08)
    # each N has its interval, around its estimate and on the score's scale (the points' per-prompt
    # values lie within 0.002 of their values)
    for est, ci in zip(soft.estimates, soft.intervals):
        assert ci.low <= est <= ci.high and 0.018 <= ci.low and ci.high <= 0.082
    assert soft.intervals[-1].low == pytest.approx(0.08, abs=0.0021) and soft.method == frontiers.fr.JOINT_METHOD
    lower = frontiers.build(make_run(tmp_path / "2"), [("self-bleu-4", "bleu-4")])[1][0]
    assert lower.goal == "lower" and lower.budget["softmax temp"].estimates[-1] == pytest.approx(0.05)


def one_line_exit_2(cli, *argv):
    rc, out, err = cli(*argv)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_plane_whose_score_is_n_a_for_every_point_is_one_line_exit_2_and_writes_nothing(tmp_path, cli):
    run = make_run(tmp_path)
    err = one_line_exit_2(cli, "frontier", run, "--plane", "meteor,self-bleu-4")
    assert "meteor is n/a for every point" in err and "--plane" in err
    assert not (tmp_path / "results" / "frontier" / "frontier.md").exists()


def test_a_matching_score_no_system_in_the_comparison_scored_is_one_line_exit_2(tmp_path, cli):
    drop = {("graphmax lam", "self-bleu-4"), ("posg temp", "self-bleu-4")}
    run = make_run(tmp_path, drop=drop)
    err = one_line_exit_2(cli, "frontier", run, "--plane", "bleu-4,self-bleu-4", "--against", "graphmax lam")
    assert "matching score self-bleu-4: no system of 'posg temp' or 'graphmax lam' scored it" in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--plane", "bleu-4"], "give two score names"),
        (["--against", "nope"], "no such sweep"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, cli, argv, says):
    assert says in one_line_exit_2(cli, "frontier", make_run(tmp_path), *argv)


def test_a_run_without_sweeps_is_one_line_exit_2(tmp_path, cli):
    run = make_run(tmp_path, sweeps={"softmax temp": ("temp", [1.0], [0.1], [0.1], [0.1])}, human=False)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "sweeps"}))
    assert "records no sweeps" in one_line_exit_2(cli, "frontier", run)


def test_a_run_whose_manifest_predates_the_sweeps_record_has_its_sweeps_read_from_the_system_strings():
    run = ROOT / "results" / "lambda-sweep" / "runs" / "lambda-sweep-food-reviews"
    derived = frontiers.derived_sweeps(list(read_scores(run).systems))
    assert list(derived) == ["smollm2-135m/graphmax lam"]
    (sweep,) = derived.values()
    assert sweep["knob"] == "lam" and sweep["values"] == [0.3, 1.0, 3.0, 10.0, 30.0]
    assert sweep["systems"][0] == "smollm2-135m/graphmax(lam=0.3,solver=exact)/top_p=0.9"


# ---------------------------------------------------------------- a real run with sweeps (tiny-random)

TINY_LINEUP = """name = "t"
suite = "{suite}"
samples = 1
batch_size = 6
baseline = "tiny-random/softmax/top_p=0.9,max_new_tokens=16"
metrics = ["bleu-n", "self-bleu", "distinct"]
systems = [
  {{ system = "tiny-random/softmax/sample,max_new_tokens=16", sweep = {{ temp = [0.5, 1.0, 1.5] }}, name = "softmax temp" }},
  {{ system = "tiny-random/softmax/sample,max_new_tokens=16", sweep = {{ top_p = [0.3, 0.6, 0.9] }}, name = "softmax top-p" }},
]
"""


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """A run of a lineup with two sweeps, generated and scored for real; its folder and output folder."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("sweeps")
    rows = [
        {"id": f"p{i:02d}", "prompt": f"Review {i}: the soup was", "reference": f"cold and salty {i}"} for i in range(8)
    ]
    (root / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "s.toml").write_text('name = "eight"\nfile = "p.jsonl"\n')
    (root / "t.toml").write_text(TINY_LINEUP.format(suite=root / "s.toml"))
    cmd = [sys.executable, "-m", "maxbench", "run", "--lineup", str(root / "t.toml"), "--runs-dir", str(root / "runs")]
    cmd += ["--run-id", "r", "--out", str(root / "out"), "--n-resamples", "50", "--threads", "1", "--no-progress"]
    subprocess.run(cmd, check=True, capture_output=True)
    return root / "runs" / "r", root / "out"


def test_a_real_sweep_run_s_scores_resample_jointly_and_its_explorer_holds_the_frontier_data(sweep_run, cli):
    run, out = sweep_run
    # maxbench run wrote the frontier report beside the leaderboard
    assert (out / "frontier.md").is_file() and (out / "plots" / "frontier-bleu-4-self-bleu-4.png").is_file()
    rc, _, err = cli("frontier", run, "--match", "0.05", "--out", out / "frontier")
    assert rc == 0, err
    data = json.loads((out / "frontier" / "frontier.json").read_text())
    (plane,) = data["planes"]  # no MAUVE: the reference-based plane alone
    assert (plane["quality"], plane["match"], plane["against"]) == ("bleu-4", "self-bleu-4", "softmax top-p")
    assert [c["knob"] for c in plane["curves"]] == ["temp", "top_p"]
    assert [p["value"] for p in plane["curves"][0]["points"]] == [0.5, 1.0, 1.5]
    assert plane["matched"][0]["method"].startswith("percentile bootstrap over prompts, resampled jointly")
    assert all(len(b) == 3 for b in plane["budget"].values())
    for name, cis in plane["budget_ci"].items():  # each N's interval holds its estimate
        assert [ci[0] <= v <= ci[1] for ci, v in zip(cis, plane["budget"][name])] == [True] * 3
    html = (out / "explorer" / "index.html").read_text()
    index = json.loads(html.split('id="maxbench-data" type="application/json">')[1].split("</script>")[0])
    (view,) = index["frontiers"]
    assert view["run_id"] == "r" and view["planes"][0]["curves"] == plane["curves"]


@pytest.mark.browser
def test_the_explorer_s_frontiers_view_draws_each_sweep_in_chromium(sweep_run, artifacts_dir):
    import os

    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"{chromium} is absent: run scripts/browser_setup.sh")
    from playwright.sync_api import sync_playwright

    _, out = sweep_run
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "explorer" / "index.html").as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#views button[data-view='frontiers']").click()
        page.wait_for_selector("#frontiers svg")
        assert page.locator("#frontiers svg polyline").count() == 2  # one curve per sweep
        assert page.locator("#frontiers svg circle").count() == 6  # one dot per point
        # scoring keeps the references' row: the curves are compared at its diversity
        assert "the dashed line is the matched value" in page.locator("#frontiers").inner_text()
        assert "Holm: adjusted over the plane's matched differences (0)" in page.locator("#frontiers").inner_text()
        page.screenshot(path=str(artifacts_dir / "explorer-frontiers.png"), full_page=True)
        browser.close()
    assert errors == []
