"""``maxbench study plan``: simulated power with the report's own tests, checked against exact
binomial power, rising with items, seeded, and bad input in one line."""

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binom, binomtest, norm

from maxbench.human_eval.analysis.direct import z_scores
from maxbench.human_eval.analysis.ratings import Rating
from maxbench.human_eval.studies.plan import simulate_power, standardise

# The planner's documented model: rating sd within a system = sqrt(noise 1 + item 1 + annotator 0.25).
TOTAL_SD = math.sqrt(2.25)


def test_power_rises_with_items():
    for judgment in ("likert", "pairwise"):
        few = simulate_power(judgment, 0.3, 15, 3, n_sim=40)
        many = simulate_power(judgment, 0.3, 60, 3, n_sim=40)
        assert few + 0.3 < many, (judgment, few, many)


def test_pairwise_power_agrees_with_the_exact_sign_test_power():
    p, n, alpha, n_sim = 0.65, 30, 0.05, 300
    effect = math.sqrt(2) * norm.ppf(p) / TOTAL_SD  # the effect whose preference probability is 0.65
    exact = sum(binom.pmf(k, n, p) for k in range(n + 1) if binomtest(k, n, 0.5).pvalue < alpha)
    simulated = simulate_power("pairwise", effect, n, 1, n_sim=n_sim, alpha=alpha)
    assert 0.3 < exact < 0.7  # a case where Monte-Carlo error matters
    assert abs(simulated - exact) < 3 * math.sqrt(exact * (1 - exact) / n_sim), (simulated, exact)


def test_vectorised_z_scores_equal_the_reports():
    values = np.random.default_rng(3).integers(0, 101, size=(5, 2, 3)).astype(float)
    rows = [
        Rating("s", f"i{i}", f"s{s}", f"a{a}", "q", values[i, s, a], None, None, (), 0, 100, "")
        for i in range(5)
        for s in range(2)
        for a in range(3)
    ]
    z, undefined = z_scores(rows)
    assert not undefined
    expected = np.array([r.value for r in z]).reshape(5, 2, 3)
    np.testing.assert_allclose(standardise(values), expected, rtol=1e-12)
    assert np.isnan(standardise(np.ones((2, 2, 1)))).all()  # one value throughout: left out, as there
    assert z_scores([replace(r, value=1.0) for r in rows[:2]])[1] == ["a0", "a1"]


def test_plan_command_prints_the_smallest_design_and_repeats(cli):
    argv = ("study", "plan", "--effect", "0.5", "--judgment", "pairwise", "likert", "--items", "14", "20", "40")
    rc, out, err = cli(*argv, "--n-sim", "30")
    assert rc == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("pairwise", "likert"))}
    assert set(lines) == {"pairwise", "likert"} and all(float(v[3]) >= 0.8 for v in lines.values())
    assert int(lines["pairwise"][2]) in (14, 20, 40)
    assert cli(*argv, "--n-sim", "30")[1] == out


def test_plan_from_pilot_ratings_estimates_cohens_d(cli, tmp_path):
    pilot = tmp_path / "pilot.csv"
    ref, other = [2, 3, 3, 4, 2, 3], [3, 4, 4, 5, 4, 4]
    lines = ["study,item,system,annotator,criterion,value"]
    lines += [f"p,i{k},base,a1,quality,{v}" for k, v in enumerate(ref)]
    lines += [f"p,i{k},new,a1,quality,{v}" for k, v in enumerate(other)]
    pilot.write_text("\n".join(lines) + "\n")
    pooled = math.sqrt((np.var(ref, ddof=1) + np.var(other, ddof=1)) / 2)
    d = (np.mean(other) - np.mean(ref)) / pooled
    rc, out, err = cli(
        "study", "plan", "--pilot", pilot, "--judgment", "pairwise", "--items", "14", "20", "--n-sim", "20"
    )
    assert rc == 0, err
    assert f"Cohen's d {d:.3f} of 'new' against 'base'" in out and f"effect d = {d:.3f}" in out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--effect", "0.3", "--power", "1.5"], "--power 1.5 is not a probability in (0, 1)"),
        (["--effect", "0.3", "--power", "0"], "--power 0 is not a probability"),
        (["--effect", "-0.3"], "--effect -0.3 must be a positive Cohen's d"),
        (["--effect", "0.3", "--alpha", "2"], "--alpha 2 is not a significance level"),
        (["--pilot", "/nonexistent/pilot.csv"], "pilot ratings /nonexistent/pilot.csv not found"),
        (["--effect", "0.3", "--systems", "1"], "--systems must be at least 2"),
        (["--effect", "0.3", "--items", "5", "20"], "--items must be 14 or more"),
        (["--effect", "0.3", "--judge-correlation", "0.5"], "--judge-correlation and --judged go with --width"),
        (["--width", "0"], "--width and --sd must be positive"),
        (["--width", "0.2", "--judge-correlation", "1.5"], "--judge-correlation 1.5 is not a correlation"),
        (["--width", "0.2", "--judge-correlation", "0.5", "--judged", "0"], "--judged must be 1 or more"),
    ],
)
def test_bad_plan_input_is_one_line(cli, args, needle):
    rc, _, err = cli("study", "plan", *args)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_best_worst_is_planned_from_three_systems(cli):
    rc, out, err = cli("study", "plan", "--effect", "0.8", "--judgment", "best-worst", "--items", "14", "--n-sim", "20")
    assert rc == 0 and "tuples need 3 or more systems" in out and "\nbest-worst " not in out, err
    rc, out, err = cli(*"study plan --effect 0.8 --judgment best-worst --items 14 --n-sim 20 --systems 4".split())
    assert rc == 0 and "\nbest-worst  3" in out, err


def test_plan_by_width_gives_fewer_human_texts_with_a_correlated_judge(cli):
    """The people-only count is the normal interval's closed form; a judge of correlation r needs
    about (1 - r^2) as many (unbounded judged texts), more when it rates fewer texts."""
    rc, out, err = cli("study", "plan", "--width", "0.2", "--sd", "0.9", "--judge-correlation", "0.7")
    assert rc == 0, err
    alone = math.ceil((2 * norm.ppf(0.975) * 0.9 / 0.2) ** 2)
    assert f"people only: {alone} human-rated texts" in out
    with_judge = int(out.split("(PPI++): ")[1].split()[0])
    assert with_judge == math.ceil(alone * (1 - 0.49)) or abs(with_judge - alone * 0.51) <= 1
    rc, out, _ = cli("study", "plan", "--width", "0.2", "--sd", "0.9", "--judge-correlation", "0.7", "--judged", "200")
    assert with_judge < int(out.split("(PPI++): ")[1].split()[0]) < alone
