"""graphmax's self-evaluation bias (issue 51): every run's ppl is SmolLM2's, so SmolLM2's texts are
judged by the model that generated them; a diagnostic claim scores the same texts with Gemma 3 270M's
perplexity (ppl-gemma3-270m), outside the counts, so that each model's texts are judged by the other's."""

from maxbench.benchmark.metrics.base import get_metric
from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.protocol import check_metrics


def test_graphmax_scores_every_text_under_gemma_too_and_judges_figure3_again_outside_the_counts():
    paper = load_paper("graphmax")
    assert "ppl-gemma3-270m" in check_metrics(paper)
    claims = {c.id: c for c in paper.claims}
    own, cross = claims["figure3-ppl"], claims["figure3-ppl-gemma-evaluator"]
    assert cross.diagnostic and not own.diagnostic
    assert cross.scores == ("ppl-gemma3-270m",) and own.scores == ("ppl",)
    same = ("corpora", "baselines", "direction", "models")
    assert all(getattr(cross, k) == getattr(own, k) for k in same) and cross.methods == ("graphmax",)
    # the evaluator is fixed by the metric, not by the scoring options of the run
    assert get_metric("ppl-gemma3-270m", model="smollm2-135m").model == "gemma3-270m"
