"""Each score declares what "best" means for it (ScoreInfo.goal), and a score whose goal is the human
value is tested by its distance to the human references' value (closeness_test)."""

from __future__ import annotations

import numpy as np
import pytest

from maxbench.benchmark.metrics.base import GOALS, METRICS, ScoreInfo, get_metric
from maxbench.benchmark.metrics.stats import closeness_test, mean_stats, paired_test

#: the scores the field reads against human text (Holtzman et al. 2020; Su and Collier 2022)
CLOSEST_TO_HUMAN = (
    "ppl self-bleu-2 self-bleu-3 self-bleu-4 self-bleu-5 rep seq-rep-4 distinct-1-corpus distinct-2-corpus "
    "distinct-3-corpus distinct-1-per-text distinct-2-per-text distinct-3-per-text uniq diversity coherence"
).split()


def test_every_builtin_score_declares_a_goal_display_name_and_scale():
    for name in METRICS.names():
        metric = get_metric(name)
        info = metric.score_info
        assert list(info) == list(metric.score_ranges), name  # one declaration per score, none extra
        for score, i in info.items():
            assert isinstance(i, ScoreInfo) and i.display and i.goal in GOALS, (name, score)
            assert i.scale in (1.0, 100.0), (name, score)


def test_likelihood_repetition_and_diversity_scores_are_closest_to_human():
    goals = {s: i.goal for n in METRICS.names() for s, i in get_metric(n).score_info.items()}
    assert {s for s in CLOSEST_TO_HUMAN if goals[s] != "human"} == set()
    # goals are per score, not per metric: ref-ppl's scores are lower-is-better, rouge-l's all higher
    assert goals["ref-eps-ppl"] == goals["ref-zero-frac"] == "lower"
    assert goals["rouge-l-p"] == goals["rouge-l-r"] == goals["rouge-l-f"] == "higher"
    assert goals["bleu-4"] == goals["mauve"] == "higher" and goals["kld"] == "lower"


def test_perplexity_and_uniq_are_shown_as_computed_and_fractions_x100():
    ppl, uniq = get_metric("ppl").score_info["ppl"], get_metric("uniq").score_info["uniq"]
    assert ppl.format(14.78123) == "14.78" and uniq.format(1419.4) == "1419"
    assert get_metric("rep").score_info["rep"].format(0.3021) == "30.21"


def test_a_metric_without_a_goal_keeps_its_direction_and_its_value_as_computed():
    from maxbench.benchmark.metrics.base import Metric

    class Words(Metric):
        name = "mean-words"
        higher_is_better = False

        @property
        def score_ranges(self):
            return {"mean-words": (0.0, float("inf"))}

    info = Words().score_info["mean-words"]
    assert info.goal is None and info.scale == 1.0 and info.format(21.25) == "21.25"
    assert ScoreInfo.from_dict("x", {"goal": "sideways", "scale": "big"}) == ScoreInfo("x")  # bad metadata: defaults
    with pytest.raises(ValueError):
        ScoreInfo("x", goal="sideways")


def _stats(values: np.ndarray):
    ids = [f"p{i}" for i in range(len(values))]
    return mean_stats(ids, np.arange(len(values)), values)


def test_closeness_test_is_the_difference_of_distances_to_the_human_value():
    rng = np.random.default_rng(3)
    human = _stats(20 + rng.normal(size=60))
    near = _stats(19 + rng.normal(size=60))  # a little below the references
    degenerate = _stats(2.5 + 0.1 * rng.normal(size=60))  # far lower: "better" by a lower-is-better reading
    c = closeness_test(degenerate, near, human, n_resamples=500, seed=1)
    h = human.value()
    assert c.difference == pytest.approx(abs(degenerate.value() - h) - abs(near.value() - h))
    assert c.difference > 0 and c.confidence_interval.low > 0 and c.p_value < 0.01  # significantly farther
    assert "|system - human| - |baseline - human|" in c.method
    plain = paired_test(degenerate, near, n_resamples=500, seed=1)
    assert plain.difference < 0  # what the plain test reads: "significantly lower", the opposite sign
    back = closeness_test(near, degenerate, human, n_resamples=500, seed=1)
    assert back.difference == pytest.approx(-c.difference) and back.confidence_interval.high < 0


def test_closeness_interval_resamples_system_baseline_and_references_jointly():
    """With the system's per-prompt values equal to the references', |system - human| is 0 in every
    joint resample, so no resample's difference is above 0; resampling the references on their own
    would give the system a positive distance in most resamples and put the interval above -|b - h|."""
    rng = np.random.default_rng(5)
    values = 10 + 3 * rng.normal(size=40)
    same, human = _stats(values.copy()), _stats(values.copy())
    other = _stats(values + 0.5 + rng.normal(size=40))
    c = closeness_test(same, other, human, n_resamples=400, seed=2)
    assert c.difference == pytest.approx(-abs(other.value() - human.value()))
    assert c.confidence_interval.high <= 0


def test_closeness_test_of_corpus_counts_aligns_the_references_columns():
    from maxbench.benchmark.metrics.base import TextBatch

    ids = ["a", "b", "c", "d"]
    m = get_metric("distinct")
    sys_a = m.compute(TextBatch(["x y z", "y z w", "u v", "v w"], ids)).scores["distinct-1-corpus"]
    sys_b = m.compute(TextBatch(["x x x", "x x", "x", "x y"], ids)).scores["distinct-1-corpus"]
    refs = m.compute(TextBatch(["p q r", "s t", "q r o", "t u"], ids)).scores["distinct-1-corpus"]
    c = closeness_test(sys_a.stats, sys_b.stats, refs.stats, n_resamples=100, seed=0)
    assert c.difference == pytest.approx(abs(sys_a.value - refs.value) - abs(sys_b.value - refs.value))
    assert c.difference < 0 and "jackknife" in c.ci_method
