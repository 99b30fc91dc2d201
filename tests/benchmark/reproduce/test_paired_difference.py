"""A claim's difference in one run: scores.json's paired test against the run's baseline, unless that
test is a closeness test (the distance to the human row), which is another estimand."""

from pathlib import Path
from types import SimpleNamespace

from maxbench.benchmark.reproduce.evidence import paired_difference


class RecordingPairs:
    """The pair cache's interface: records what it was asked to compute, answers a fixed triple."""

    def __init__(self):
        self.asked = []

    def compare(self, run_dir, a, b, metric, score, signature=""):
        self.asked.append((a, b, metric, score, signature))
        return (9.0, 8.0, 10.0)


def test_a_closeness_test_in_scores_json_is_not_read_as_the_claim_s_difference():
    run = SimpleNamespace(roles={"m": "A", "b": "B"}, baseline="B", run_dir=Path("run"))
    plain = {"difference": 2.0, "ci_low": 1.0, "ci_high": 3.0}
    closeness = {"difference": 1.0, "ci_low": 0.5, "ci_high": 1.5, "test": "closeness"}
    doc = {
        "systems": {"A": {}, "B": {}},
        "metrics": {"ppl": {"scores": ["ppl"], "signature": "ppl|sig"}, "bleu-n": {"scores": ["bleu-4"]}},
        "comparisons": {"systems": {"A": {"bleu-4": plain, "ppl": closeness}}},
    }
    pairs = RecordingPairs()
    assert paired_difference(run, doc, "m", "b", "bleu-4", pairs) == (2.0, 1.0, 3.0)
    assert pairs.asked == []  # a plain paired test is read from scores.json
    assert paired_difference(run, doc, "m", "b", "ppl", pairs) == (9.0, 8.0, 10.0)
    assert pairs.asked == [("A", "B", "ppl", "ppl", "ppl|sig")]  # the plain difference, computed
